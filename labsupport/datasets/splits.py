"""The split string: which sequences of a dataset are train, validation and test — chapter 6.

Megatron cuts **each** dataset of a blend into three *contiguous* ranges of its sequences
(documents, when preprocessing did not split sentences) by one comma-separated weighting, then
builds a GPTDataset per range.  The same code, checked against megatron-core 0.16.1
(``blended_megatron_dataset_config.parse_and_normalize_split`` /
``convert_split_vector_to_split_matrix`` and
``BlendedMegatronDatasetBuilder._build_megatron_dataset_splits``; ``tests/crosscheck/test_splits.py``)::

    >>> split_matrix("969, 30, 1")                     # Megatron-LM's legacy default
    [(0, 0.969), (0.969, 0.999), (0.999, 1.0)]
    >>> split_ranges("900,50,50", 435)                 # NeMo's default, 435 documents
    [(0, 392), (392, 413), (413, 435)]

Defaults, dated: Megatron-LM (``megatron/training/arguments.py`` at core_v0.16.1, 55ac708)
has ``--split`` default None and, given ``--data-path`` without ``--split``, warns and uses
the legacy ``"969, 30, 1"``; ``--train-data-path``/``--valid-data-path``/``--test-data-path``
give each split its own blend instead.  NeMo uses ``"900,50,50"`` (1.x
``megatron_gpt_config.yaml`` ``splits_string``; 2.0 ``PreTrainingDataModule(split=...)``,
NVIDIA/NeMo 8cfedd7).
"""
from __future__ import annotations

import functools
import re

import numpy as np

__all__ = ["SPLITS", "MEGATRON_LEGACY_SPLIT", "NEMO_SPLIT", "parse_and_normalize_split", "split_matrix",
           "split_ranges", "split_indices"]

#: The three splits, in Megatron's ``Split`` order.
SPLITS: tuple[str, ...] = ("train", "valid", "test")
MEGATRON_LEGACY_SPLIT = "969, 30, 1"
NEMO_SPLIT = "900,50,50"


def parse_and_normalize_split(split: str) -> list[float]:
    """``"99,1"`` → ``[0.99, 0.01, 0.0]``: every number in the string (missing ones are 0),
    divided by their sum as float64 — megatron-core's function.  ValueError on a split that
    has more than three numbers or sums to zero."""
    numbers = [float(x) for x in re.findall(r"[.0-9]+", str(split))]
    if len(numbers) > len(SPLITS):
        raise ValueError(f"split {split!r}: at most {len(SPLITS)} numbers (train, valid, test)")
    numbers += [0.0] * (len(SPLITS) - len(numbers))
    total = float(np.sum(np.array(numbers, dtype=np.float64)))
    if total <= 0:
        raise ValueError(f"split {split!r}: the weights sum to 0; give e.g. '969,30,1'")
    return (np.array(numbers, dtype=np.float64) / total).tolist()


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """The book-ends ``(start, end)`` of each split as fractions of the dataset, or None for an
    empty split: ``"1,0,1"`` → ``[(0, 0.5), None, (0.5, 1.0)]``."""
    vector = parse_and_normalize_split(split)
    edges = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])  # Megatron's float sums
    return [None if hi <= lo else (lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]


def split_ranges(split: str, num_elements: int) -> list[tuple[int, int] | None]:
    """Per split, the half-open range ``[beg, end)`` of sequence indices it takes from a dataset
    of ``num_elements`` sequences (``int(round(fraction × n))`` at both ends), or None."""
    n = float(int(num_elements))
    return [None if b is None else (int(round(b[0] * n)), int(round(b[1] * n))) for b in split_matrix(split)]


def split_indices(split: str, num_elements: int) -> list[np.ndarray | None]:
    """:func:`split_ranges` as the int32 index arrays Megatron hands each GPTDataset."""
    return [None if r is None else np.arange(r[0], r[1], dtype=np.int32) for r in split_ranges(split, num_elements)]
