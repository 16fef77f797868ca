"""Helpers every dataset class of :mod:`labsupport.datasets` shares (chapters 2–4, 6), as
Megatron keeps its own in ``megatron/core/datasets/utils.py``.

One rule for indexing, so that ``ds[-1]``, ``ds.document(-1)`` and ``packed.cu_seqlens(-1)`` all
mean "the last one" and all fail with the same words:

>>> normalize_index(-1, 5, "sample", "this blend")
4
>>> normalize_index(5, 5, "sample", "this blend")
Traceback (most recent call last):
...
IndexError: sample 5 out of range: this blend has 5 samples
"""
from __future__ import annotations

import operator
from typing import Any

__all__ = ["normalize_index", "DataError"]


class DataError(ValueError):
    """Bad data: a dataset file (``.bin``/``.idx``, its sidecar ``.json``, an index cache) or a
    blend that cannot be read as what it claims.  The message names the file (or entry) and the
    cure; the base of the reader's errors (``indexed.IndexedDatasetError``), ``blending.BlendError``
    and ``index_cache.IndexCacheError``, so that a command maps one class to its "bad input"
    status (``python -m labsupport train`` exits 2) instead of listing each.
    """


def normalize_index(idx: Any, length: int, what: str, owner: str) -> int:
    """``idx`` as a position in ``range(length)``; negative values count from the end.

    Args:
        idx: any integer-like value (Python int, numpy integer; not float, not bool-as-slice).
        length: number of items.
        what: the item's name in the message, singular (``"sample"``, ``"document"``, ``"pack"``).
        owner: what holds them (``"web_text_document"``, ``"this blend"``).

    Raises:
        TypeError: ``idx`` is not an integer (``"pack index must be an integer, got float"``).
        IndexError: ``"{what} {idx} out of range: {owner} has {length} {what}s"``.
    """
    try:
        i = operator.index(idx)
    except TypeError:
        raise TypeError(f"{what} index must be an integer, got {type(idx).__name__}") from None
    j = i + length if i < 0 else i
    if not 0 <= j < length:
        raise IndexError(f"{what} {i} out of range: {owner} has {length} {what}s")
    return j
