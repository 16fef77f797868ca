"""Megatron-Bridge's rules for a packed fine-tuning run, as one typed object (chapter 4).

:class:`PackedRun` holds the sizes a packed SFT job is configured with.  ``problems()`` lists every rule
the configuration breaks, one line each naming the field and the cure; ``check()`` raises the first;
``equivalent_mbs1()`` is the configuration Bridge itself suggests when ``micro_batch_size > 1`` (the same
token slots per step); ``pad_seq_to_mult`` and ``padded_cu_seqlens`` are the alignment each packed
sequence gets under CP/TP/SP (:func:`labsupport.datasets.sft_packing.pad_seq_to_mult`).

The rules and where they are, Megatron-Bridge v0.6.0 ``src/megatron/bridge/training/config.py``
(``ConfigContainer.validate``): 1430–1432 with CP > 1 the sequence length divides by 2·CP; 1447–1451
fine-tuning with CP > 1 needs ``calculate_per_token_loss=True`` and ``average_in_collective=False``;
1458 a pack size > 0; 1461–1473 offline packing needs ``micro_batch_size == 1`` (the message gives the
equivalent: micro-batch 1, global batch ÷ micro-batch, pack size × micro-batch); 1475–1479 in-batch
packing needs ``micro_batch_size > 1``.  ``docs/training/packed-sequences.md``: ``pad_seq_to_mult =
lcm(2·CP if CP > 1, CP·TP with SP and TP > 1)``, ``token_slots_per_step = packed_sequence_size ×
global_batch_size``.  megatron-core core_v0.16.1 ``megatron/core/num_microbatches_calculator.py``
340–350: the global batch divides by micro-batch × DP, with at least one micro-batch.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from labsupport.datasets.sft_packing import pad_seq_to_mult, padded_cu_seqlens

__all__ = ["PackedRun"]

_COUNTS = ("micro_batch_size", "global_batch_size", "packed_sequence_size", "data_parallel_size",
           "tensor_parallel_size", "context_parallel_size")


@dataclasses.dataclass(frozen=True)
class PackedRun:
    """A packed SFT run's sizes (counts: samples, tokens, ranks) and switches, with Bridge's rules attached."""

    global_batch_size: int
    packed_sequence_size: int
    micro_batch_size: int = 1
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    context_parallel_size: int = 1
    sequence_parallel: bool = False
    offline_packing: bool = True          # False: Bridge's in-batch packing (Direct-HF / VLM)
    calculate_per_token_loss: bool = False
    average_in_collective: bool = True

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a whole number ≥ 1")

    @property
    def pad_seq_to_mult(self) -> int:
        """The multiple (tokens) each packed sequence's length is padded to."""
        return pad_seq_to_mult(self.context_parallel_size, self.tensor_parallel_size, self.sequence_parallel)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per optimizer step on each DP rank (gradient accumulation)."""
        return self.global_batch_size // (self.micro_batch_size * self.data_parallel_size)

    @property
    def token_slots_per_step(self) -> int:
        """Token slots an optimizer step offers: pack size × global batch (every sample is one pack)."""
        return self.packed_sequence_size * self.global_batch_size

    def problems(self) -> list[str]:
        """Every rule this configuration breaks, one line each (empty when Bridge would accept it)."""
        out = []
        mbs, gbs, dp, cp = (self.micro_batch_size, self.global_batch_size, self.data_parallel_size,
                            self.context_parallel_size)
        if self.offline_packing and mbs > 1:
            out.append(f"micro_batch_size={mbs}: offline packed sequences need 1; the same token slots per step: "
                       f"micro_batch_size=1, global_batch_size={gbs // mbs}, "
                       f"packed_sequence_size={self.packed_sequence_size * mbs}")
        if not self.offline_packing and mbs == 1:
            out.append("micro_batch_size=1: in-batch packing joins the sequences of a micro-batch, so it needs ≥ 2")
        if gbs % (mbs * dp):
            out.append(f"global_batch_size={gbs}: must be a multiple of micro_batch_size × data_parallel_size = "
                       f"{mbs * dp}")
        if cp > 1 and self.packed_sequence_size % (2 * cp):
            out.append(f"packed_sequence_size={self.packed_sequence_size}: with context_parallel_size={cp} it must "
                       f"divide by 2·CP = {2 * cp}")
        if cp > 1 and not self.calculate_per_token_loss:
            out.append("calculate_per_token_loss=False: fine-tuning with CP > 1 needs True (a rank whose tokens "
                       "are all masked would otherwise divide by zero: a NaN loss)")
        if cp > 1 and self.average_in_collective:
            out.append("average_in_collective=True: fine-tuning with CP > 1 needs False (with the per-token loss the "
                       "gradients are summed over the ranks and divided once by the total token count)")
        return out

    def check(self) -> "PackedRun":
        """This run when Bridge accepts it; else ValueError with the first problem."""
        problems = self.problems()
        if problems:
            raise ValueError(problems[0])
        return self

    def equivalent_mbs1(self) -> "PackedRun":
        """Bridge's suggested replacement for micro_batch_size > 1: micro-batch 1, the global batch divided by
        the micro-batch, the pack size multiplied by it (the same token slots per step)."""
        mbs = self.micro_batch_size
        if self.global_batch_size % mbs:
            raise ValueError(f"global_batch_size={self.global_batch_size}: not a multiple of micro_batch_size={mbs}, "
                             "so no micro-batch-1 run has the same token slots")
        return dataclasses.replace(self, micro_batch_size=1, global_batch_size=self.global_batch_size // mbs,
                                   packed_sequence_size=self.packed_sequence_size * mbs)

    def padded_cu_seqlens(self, seq_lengths: Iterable[int]) -> np.ndarray:
        """Where each sequence of one pack starts once aligned to :attr:`pad_seq_to_mult` (int32 tokens);
        ValueError when the aligned sequences no longer fit the pack (pack the padded lengths instead)."""
        cu = padded_cu_seqlens(seq_lengths, self.pad_seq_to_mult)
        if cu[-1] > self.packed_sequence_size:
            raise ValueError(f"aligned to multiples of {self.pad_seq_to_mult}, the pack holds {int(cu[-1])} tokens "
                             f"> packed_sequence_size={self.packed_sequence_size}: pack the padded lengths")
        return cu
