"""Megatron's blending loop, once — chapter 3 (데이터 블렌딩, book §6.2.5).

:func:`blending_loop` is the loop of megatron-core's ``build_blending_indices`` (C++,
``megatron/core/datasets/helpers.cpp``) written out in Python.  Every blending engine of the
workbook runs this one function: :func:`labsupport.datasets.blending.reference_blending_indices`
on Python lists, the numpy engine (:mod:`labsupport.datasets.blending_numpy`) on the datasets that
can still win a window of steps, and the compiled engine (:mod:`labsupport.datasets.blending_numba`)
compiled by numba.

    >>> dl, sl = [0] * 4, [0] * 4
    >>> blending_loop([0.5, 0.5], 0, [0, 0], dl, sl)
    >>> dl, sl
    ([0, 1, 0, 1], [0, 0, 1, 1])
"""
from __future__ import annotations

__all__ = ["blending_loop"]


def blending_loop(weights, start, counts, dataset_index, dataset_sample_index) -> None:  # pragma: no cover
    """Megatron's ``build_blending_indices`` loop (``helpers.cpp``), literally: steps ``start ..
    start + len(dataset_index) - 1`` from the per-dataset ``counts`` reached at ``start`` (updated
    in place), writing each step's dataset and its sample number there.

    The one copy of the loop: on Python lists it is the readable reference (:func:`sequential_steps`,
    behind :func:`labsupport.datasets.blending.reference_blending_indices`), the numpy engine runs it
    over the datasets that can still win, and :mod:`labsupport.datasets.blending_numba` compiles
    this same function for numpy arrays.
    ``weights[d] * x - counts[d]`` is a rounded multiply then a rounded subtract in both, as in
    the C++ (a Python int count converts to the double exactly)."""
    n = len(weights)
    for k in range(len(dataset_index)):
        x = float(max(start + k, 1))
        best = 0
        best_error = weights[0] * x - counts[0]
        for d in range(1, n):
            error = weights[d] * x - counts[d]
            if error > best_error:
                best_error = error
                best = d
        dataset_index[k] = best
        dataset_sample_index[k] = counts[best]
        counts[best] += 1


def sequential_steps(w: list[float], size: int, counts: list[int], start: int
                ) -> tuple[list[int], list[int], list[int]]:
    """:func:`blending_loop` on Python lists: ``(datasets, sample numbers, counts)``."""
    dl = [0] * size
    sl = [0] * size
    blending_loop(w, start, counts, dl, sl)
    return dl, sl, counts
