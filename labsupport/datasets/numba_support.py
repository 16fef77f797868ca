"""numba for the workbook's compiled loops: chapter 2's BPE (:mod:`labsupport.datasets.spm_bpe_numba`)
and chapter 3's blending indices (:mod:`labsupport.datasets.blending_numba`).

``numba`` is the module, or None where it cannot be imported (it is a dependency, so only on an
unusual platform); ``IMPORT_ERROR`` then says why, and each caller keeps its slower path.
"""
from __future__ import annotations

from typing import Callable

try:
    import numba
except ImportError as exc:  # pragma: no cover - numba is a dependency; exercised by monkeypatching
    numba = None
    IMPORT_ERROR: str | None = f"numba could not be imported ({exc})"
else:
    IMPORT_ERROR = None

__all__ = ["numba", "IMPORT_ERROR", "compile_cached"]


def compile_cached(fn: Callable) -> Callable:
    """``numba.njit(nogil=True)`` with an on-disk cache next to the module, so later processes load
    the machine code instead of compiling it; without one where no cache folder is writable (a
    read-only install, a grading sandbox), where numba refuses ``cache=True`` at decoration."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:
        return numba.njit(nogil=True)(fn)
