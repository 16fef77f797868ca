"""Megatron's data-parallel batch sampler — chapter 6 (end to end, book §6.2.3's exact resume).

:class:`MegatronPretrainingSampler` follows Megatron-LM's class of the same name
(``megatron/training/datasets/data_samplers.py``, NVIDIA/Megatron-LM commit 00caa53 — the same
arguments, sanity checks and ``__iter__``; ``megatron/legacy/data/data_samplers.py`` in older
versions): it walks sample indices upward from ``consumed_samples``, gathers
``micro_batch_size × data_parallel_size`` of them, and hands rank ``r`` the contiguous slice
``[r × micro_batch_size, (r + 1) × micro_batch_size)``.  It does not shuffle — the GPT dataset's
shuffle index already did — so resuming is just building it again with the saved
``consumed_samples``.

Example (12 samples, 4 already consumed, micro-batch 2, rank 1 of 2)::

    >>> list(MegatronPretrainingSampler(12, 4, 2, 1, 2))[:2]
    [[6, 7], [10, 11]]
"""
from __future__ import annotations

from typing import Any, Iterator

from labsupport.config import parallel_layout

__all__ = ["MegatronPretrainingSampler", "rank_slice", "num_microbatches", "batch_arithmetic"]


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def rank_slice(consumed_samples: int, micro_batch_size: int, data_parallel_rank: int,
               data_parallel_size: int) -> list[int]:
    """The sample indices rank ``data_parallel_rank`` reads next: its micro-batch of the group
    of ``micro × DP`` samples starting at ``consumed_samples``.

    ``rank_slice(8, 2, 1, 2)`` → ``[10, 11]`` (the group is 8…11; rank 0 gets 8, 9).
    """
    start = consumed_samples + data_parallel_rank * micro_batch_size
    return list(range(start, start + micro_batch_size))


def num_microbatches(global_batch_size: int, micro_batch_size: int, data_parallel_size: int) -> int:
    """Gradient-accumulation steps: ``global / (micro × DP)``; ValueError naming the sizes when
    it does not divide (Megatron's ``num_microbatches_calculator`` asserts the same)."""
    per_step = micro_batch_size * data_parallel_size
    if global_batch_size % per_step:
        raise ValueError(f"global_batch_size {global_batch_size} is not divisible by micro_batch_size "
                         f"{micro_batch_size} × data_parallel_size {data_parallel_size} = {per_step}")
    return global_batch_size // per_step


def batch_arithmetic(cfg: Any, steps: int) -> dict[str, int]:
    """The global-batch arithmetic of a config (``trainer.devices``/``num_nodes``, the model's TP, PP,
    ``micro_batch_size``, ``global_batch_size``, ``encoder_seq_length``) after ``steps`` optimizer steps:
    ``data_parallel_size`` (GPUs / (TP × PP)), ``accumulation_steps`` (:func:`num_microbatches`),
    ``tokens_per_step`` (global batch × sequence length) and ``consumed_samples`` (steps × global batch,
    the sampler's resume point).  Raises ValueError (a :class:`~labsupport.config.ConfigError` for the
    layout) when the GPUs or the batch do not divide.  Chapter 6's exercise q2 asks for it."""
    m = cfg.model
    dp = parallel_layout(cfg).data_parallel
    acc = num_microbatches(m.global_batch_size, m.micro_batch_size, dp)
    return {"data_parallel_size": dp, "accumulation_steps": acc,
            "tokens_per_step": m.global_batch_size * m.encoder_seq_length,
            "consumed_samples": steps * m.global_batch_size}


class MegatronPretrainingSampler:
    """Yields this rank's micro-batches (lists of sample indices) from ``consumed_samples`` on.

    Args:
        total_samples: samples in the dataset (its ``len``).
        consumed_samples: samples all ranks together have already taken (resume point).
        micro_batch_size: samples per rank per forward/backward.
        data_parallel_rank / data_parallel_size: this rank and the number of DP ranks.
        drop_last: drop a final incomplete group (Megatron's default, True).
    """

    def __init__(self, total_samples: int, consumed_samples: int, micro_batch_size: int,
                 data_parallel_rank: int, data_parallel_size: int, drop_last: bool = True) -> None:
        self.total_samples = _positive("total_samples", total_samples)
        self.micro_batch_size = _positive("micro_batch_size", micro_batch_size)
        self.data_parallel_size = _positive("data_parallel_size", data_parallel_size)
        if not isinstance(consumed_samples, int) or consumed_samples < 0:
            raise ValueError(f"consumed_samples must be an integer ≥ 0, got {consumed_samples!r}")
        if consumed_samples >= total_samples:
            raise ValueError(f"no samples left: consumed_samples {consumed_samples} ≥ total_samples {total_samples}")
        if not 0 <= data_parallel_rank < data_parallel_size:
            raise ValueError(f"data_parallel_rank {data_parallel_rank} must be in 0…{data_parallel_size - 1}")
        self.consumed_samples = consumed_samples
        self.data_parallel_rank = data_parallel_rank
        self.drop_last = drop_last
        self.group = micro_batch_size * data_parallel_size

    def __len__(self) -> int:
        return self.total_samples

    def _slice(self) -> tuple[int, int]:
        """Where this rank's part lies in a group: ``[start, end)`` (:func:`rank_slice` of the group at 0)."""
        part = rank_slice(0, self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size)
        return part[0], part[-1] + 1

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        start, end = self._slice()
        for idx in range(self.consumed_samples, self.total_samples):
            batch.append(idx)
            if len(batch) == self.group:
                yield batch[start:end]
                batch = []
        if batch and not self.drop_last:  # Megatron: the last partial group, sliced the same way
            yield batch[start:end]
