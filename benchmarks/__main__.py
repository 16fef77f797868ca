"""Run every benchmark: ``python -m benchmarks [NAME ...]`` (what ``make bench`` calls).

Each ``bench_<topic>.main()`` follows the contract in :mod:`benchmarks._common`: it raises
:class:`~benchmarks._common.Mismatch` when the two sides computed different results.  A
benchmark that raises anything does not stop the others, but the command exits 1 and names it.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path


def benchmark_names() -> list[str]:
    """``bench_*`` modules of this package, sorted."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks (default: all) with their default arguments; 1 if any failed."""
    names = list(argv if argv is not None else sys.argv[1:]) or benchmark_names()
    failed: list[str] = []
    for name in names:
        name = name if name.startswith("bench_") else f"bench_{name}"
        print(f"== benchmarks.{name}", flush=True)
        try:
            result = importlib.import_module(f"benchmarks.{name}").main([])
            if not isinstance(result, dict):
                raise TypeError(f"benchmarks.{name}.main() returned {type(result).__name__}, not the results dict")
        except Exception as exc:  # noqa: BLE001 - report every benchmark, fail at the end
            traceback.print_exc()
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    if failed:
        print("\nbenchmarks FAILED — their numbers were not written:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    print(f"\nall {len(names)} benchmarks ran; outputs equal on both sides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
