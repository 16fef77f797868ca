"""Executing notebooks headless — shared by ``runall`` (instructors, ``make outputs``) and ``grade``.

Not a chapter topic: this is the workbook's own tooling.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

KERNEL = "python3"


@dataclass
class RunResult:
    """One notebook execution: where, how long (seconds), and whether it failed."""

    path: Path
    seconds: float
    ok: bool
    error: str = ""


def headless_env(**extra: str) -> dict[str, str]:
    """Environment for a headless kernel (plain progress bars, static widget fallbacks)."""
    env = dict(os.environ)
    env.update({"LABSUPPORT_HEADLESS": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    env.update(extra)
    return env


def write_atomic(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write a notebook to ``path`` via a temporary file and a rename (never half-written)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".ipynb.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            text = nbformat.writes(nb)
            fh.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def execute_in_place(path: Path, timeout: int = 600, env: dict[str, str] | None = None,
                     allow_errors: bool = False) -> tuple[nbformat.NotebookNode, RunResult]:
    """Execute ``path`` top to bottom with its own folder as cwd; returns the executed notebook.

    No timing or widget-state metadata is stored, so re-running an unchanged notebook gives
    an unchanged file (apart from timing outputs in ``nbval-ignore-output`` cells).
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name=KERNEL, allow_errors=allow_errors,
        record_timing=False, store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    error = ""
    saved = os.environ.copy()
    env = env or headless_env()  # before clear(): headless_env() copies the current environment
    try:
        os.environ.clear()
        os.environ.update(env)
        client.execute()
        ok = True
    except CellExecutionError as exc:
        ok, error = False, f"{exc.ename}: {_first_line(exc.evalue)}"
    except Exception as exc:  # noqa: BLE001 - kernel died, timeout, ...
        ok, error = False, f"{type(exc).__name__}: {_first_line(str(exc))}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb, RunResult(path, time.perf_counter() - start, ok, error)


def _first_line(text: str, default: str = "") -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not set(line) <= set("-"):
            return line[:200]
    return default
