"""The compiled engine of the blending indices — chapter 3 (데이터 블렌딩, book §6.2.5): Megatron's
loop, literally, compiled by `numba <https://numba.pydata.org>`_.

Megatron-Core compiles this loop from C++ (``megatron/core/datasets/helpers.cpp``,
``build_blending_indices``) when it first imports ``megatron.core.datasets.helpers``.  The
workbook gets the same machine code path without a C++ toolchain: the loop of
:func:`labsupport.datasets.blending.reference_blending_indices` — the same function,
:func:`labsupport.datasets.blending_loop.blending_loop` — and ``numba.njit`` turns it into native code
the first time it runs (about half a second; the result is cached on disk, so later processes
load it in milliseconds).

Exactness: numba compiles without fast-math, so ``w[d] * x - count`` is two IEEE operations, a
rounded multiply then a rounded subtract, as in the C++ (no fused multiply-add, which would
round once and could flip a near-tie).  :func:`fused_multiply_add_in_machine_code` reads the
compiled code back and ``tests/datasets/test_blending.py`` asserts it contains no FMA instruction; the
output is compared with the Python loop and with megatron-core on random weight vectors.

Where numba is not installed (it is a dependency of the workbook, so only on an unusual
platform), :func:`numba_problem` says why and ``build_blending_indices`` uses the numpy
engine (:mod:`labsupport.datasets.blending_numpy`) instead — slower, same output.

    >>> di, si = numba_blending_indices(np.array([0.6, 0.25, 0.15]), 8)    # doctest: +SKIP
    >>> di.tolist(), si.tolist()                                             # doctest: +SKIP
    ([0, 1, 2, 0, 0, 1, 0, 0], [0, 0, 0, 1, 2, 1, 3, 4])
"""
from __future__ import annotations

import re

import numpy as np

from labsupport.datasets.blending_loop import blending_loop as _blending_loop
from labsupport.datasets.numba_support import IMPORT_ERROR as _IMPORT_ERROR
from labsupport.datasets.numba_support import compile_cached as _compile
from labsupport.datasets.numba_support import numba

__all__ = ["numba_blending_indices", "numba_problem", "fused_multiply_add_in_machine_code"]


_kernel = _compile(_blending_loop) if numba is not None else None


def numba_problem() -> str | None:
    """None when the compiled engine can run here; else why not (one line)."""
    return _IMPORT_ERROR


def numba_blending_indices(weights: np.ndarray, size: int, *, start: int = 0,
                           counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's blending indices for ``size`` steps: ``(dataset_index int16[size],
    dataset_sample_index int64[size])``, exactly the C++ helper's output.

    ``weights``: float64 (n,), used as given.  ``start``/``counts``: resume at step ``start`` from
    the per-dataset counts reached there (default: step 0, all zero).  Raises RuntimeError when
    numba is missing (:func:`numba_problem`).
    """
    if _kernel is None:
        raise RuntimeError(f"the compiled blending engine is unavailable: {_IMPORT_ERROR}")
    w = np.ascontiguousarray(weights, dtype=np.float64)
    c = np.zeros(w.size, dtype=np.int64) if counts is None else np.array(counts, dtype=np.int64)
    if c.shape != w.shape:
        raise ValueError(f"counts has shape {c.shape}, weights {w.shape}")
    dataset_index = np.empty(int(size), dtype=np.int16)
    dataset_sample_index = np.empty(int(size), dtype=np.int64)
    _kernel(w, int(start), c, dataset_index, dataset_sample_index)
    return dataset_index, dataset_sample_index


#: x86 FMA (vfmadd/vfmsub/vfnmadd…, 132/213/231 forms) and AArch64 fmadd/fmsub/fnmadd/fmla/fmls
_FMA_RE = re.compile(r"\b(v?fn?m(add|sub)\d{3}\w*|fn?m(add|sub)|fml[as])\b", re.IGNORECASE)
#: a floating-point multiply of any kind (x86 mulsd/vmulsd/mulpd…, AArch64 fmul): the loop has one
_MUL_RE = re.compile(r"\b(v?mul[sp]d|fmul)\b", re.IGNORECASE)


def fused_multiply_add_in_machine_code() -> list[str]:
    """The fused multiply-add instructions in the compiled loop's machine code (should be none).

    Compiles a fresh, uncached copy of the loop for the same argument types (numba cannot show the
    assembly of code it loaded from its cache) and reads its assembly.  Raises RuntimeError when
    the assembly holds no floating-point multiply at all: then it was not really read.
    """
    if _kernel is None:
        raise RuntimeError(f"the compiled blending engine is unavailable: {_IMPORT_ERROR}")
    fresh = numba.njit(nogil=True)(_blending_loop)
    fresh(np.array([0.5, 0.5]), 0, np.zeros(2, dtype=np.int64), np.empty(2, dtype=np.int16),
          np.empty(2, dtype=np.int64))
    asm = "\n".join(fresh.inspect_asm().values())
    if not _MUL_RE.search(asm):
        raise RuntimeError("no floating-point multiply found in the compiled loop's assembly: "
                           "the machine code could not be read")
    return [m.group(0) for m in _FMA_RE.finditer(asm)]
