"""Megatron's vocabulary padding: how many embedding rows a model gets for a tokenizer (chapter 2).

Megatron pads the embedding (and the output layer) to a multiple of
``make_vocab_size_divisible_by * tensor_model_parallel_size`` so that every tensor-parallel rank
holds the same number of rows (``VocabParallelEmbedding`` splits the rows evenly) and each slice is a
GPU-friendly size.  The padded rows are never indexed by the data: token ids stay below the
tokenizer's own vocabulary size, and the ``.idx`` dtype is chosen from that size, not the padded one.

Megatron's versions of this arithmetic: ``_vocab_size_with_padding`` in
``megatron/training/tokenizer/tokenizer.py`` (core_v0.16.1), ``vocab_size_with_padding`` in
``megatron/core/tokenizers/utils/build_tokenizer.py`` and ``calculate_padded_vocab_size`` in
``megatron/training/vocab_utils.py`` (core_v0.19.0); ``tests/crosscheck/test_vocab_padding.py``
compares them with :func:`padded_vocab_size`.
"""
from __future__ import annotations

import operator

__all__ = ["padded_vocab_size"]


def padded_vocab_size(vocab_size: int, divisible_by: int = 128, tensor_parallel: int = 1) -> int:
    """Rows of Megatron's embedding for a tokenizer of ``vocab_size`` ids.

    ``vocab_size`` rounded *up* to the next multiple of ``divisible_by * tensor_parallel``
    (a size already on a multiple stays as it is).  All three are counts (ids, rows, ranks).
    Each tensor-parallel rank then holds ``padded_vocab_size(...) // tensor_parallel`` rows.

    Raises ``ValueError`` naming the argument when one of them is not a positive integer.
    """
    counts = []
    for name, value in (("vocab_size", vocab_size), ("divisible_by", divisible_by),
                        ("tensor_parallel", tensor_parallel)):
        try:
            if isinstance(value, bool):
                raise TypeError
            value = operator.index(value)           # int or numpy integer; not float, not bool
        except TypeError:
            raise ValueError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__})") from None
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
        counts.append(value)
    vocab, multiple = counts[0], counts[1] * counts[2]
    return -(-vocab // multiple) * multiple
