"""What every benchmark shares: the machine it ran on, an atomic results write, and the contract.

The contract (``python -m benchmarks`` relies on it): each ``benchmarks/bench_<topic>.py`` has
``main(argv: list[str] | None = None) -> dict`` that measures both sides in one run, compares
their outputs, raises :class:`Mismatch` when they differ (before writing anything), and otherwise
writes ``benchmarks/results/<topic>.json`` and returns the dict it wrote.
"""
from __future__ import annotations

import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from labsupport.fileio import atomic_write

class Mismatch(AssertionError):
    """The two sides of a benchmark computed different results: the speed numbers mean nothing."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`Mismatch` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise Mismatch(message)


#: Distribution name → key in the results file.
_KEYS = {"megatron-core": "megatron_core"}


def machine_info(*packages: str, **extra: Any) -> dict[str, Any]:
    """CPU count, platform, Python, the versions of ``packages`` (distribution names), the 1-minute
    load average at the start (the machines are shared: read ratios, not absolute numbers), and
    ``extra`` fields."""
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                            "machine": platform.machine(), "python": platform.python_version()}
    for name in packages:
        try:
            info[_KEYS.get(name, name)] = version(name)
        except PackageNotFoundError:
            info[_KEYS.get(name, name)] = None
    info.update(extra)
    try:
        info["loadavg_1min_at_start"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on every platform
        pass
    return info


def write_results(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON via a temporary file and a rename."""
    atomic_write(path, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
