"""Batch-size ramp-up: the global batch of every step — chapter 6 (end to end).

Large runs start with a small global batch and grow it as training goes on.  Megatron decides the
batch of a step from ``consumed_samples`` alone (the samples of all earlier steps), so a resumed
run knows where it is in the ramp from the one number its checkpoint already holds.  Two forms:

* **ramp-up** ``[start, increment, samples]`` — Megatron-LM's ``--rampup-batch-size`` (up to
  core_v0.17.x) and NeMo 1.x's ``model.rampup_batch_size``: ``(global − start) / increment``
  equal increments, one every ``samples / increments`` consumed samples (a float), and the full
  global batch once more than ``samples`` were consumed
  (``RampupBatchsizeNumMicroBatchesCalculator.update``, core_v0.16.1
  ``megatron/core/num_microbatches_calculator.py`` 441–464);
* **step schedule** ``"THRESHOLD:BATCH ..."`` — ``--step-batch-size-schedule`` (core_v0.18.0 on,
  which dropped the ramp-up calculator): the batch of the last entry whose threshold has been
  reached.  Megatron-LM passes ``seq_length`` to the calculator, so the thresholds are **tokens**,
  turned into samples by ``threshold // seq_length``; ``K``/``M``/``B``/``T`` suffixes multiply by
  10³ … 10¹² (``StepBatchsizeNumMicroBatchesCalculator``, core_v0.19.0, same file 481–591).

Per step, micro-batches per rank = global batch ÷ (micro batch × DP); the loss of each is divided
by that step's count, and ``consumed_samples`` grows by that step's global batch.  Validation
always uses the final global batch, as Megatron's ``evaluate`` does.  The cross-check
(``tests/crosscheck/test_batch_ramp.py``) compares every step with megatron-core's calculator.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchSchedule", "ramp_global_batch", "parse_step_schedule", "step_global_batch"]

_SUFFIX = {"K": 10 ** 3, "M": 10 ** 6, "B": 10 ** 9, "T": 10 ** 12}


def ramp_global_batch(consumed: int, start: int, increment: int, ramp_samples: int, final: int) -> int:
    """The global batch after ``consumed`` samples of a ``[start, increment, ramp_samples]`` ramp-up to
    ``final`` (Megatron's arithmetic, its float division included)."""
    if consumed > ramp_samples:
        return final
    per_increment = ramp_samples / ((final - start) // increment)
    return start + int(consumed / per_increment) * increment


def _number(text: str) -> int:
    """``"250B"`` → 250·10⁹ (Megatron's ``_parse_numeric_value``: float, then a suffix, then int)."""
    text = text.strip().upper()
    scale = _SUFFIX.get(text[-1:], 1)
    return int(float(text[:-1] if scale != 1 else text) * scale)


def parse_step_schedule(text: str, seq_length: int | None) -> list[tuple[int, int]]:
    """``"0:8 1K:16"`` → ``[(threshold in samples, global batch), …]`` sorted by threshold; with
    ``seq_length`` the thresholds are tokens (``// seq_length``).  ValueError on a malformed entry."""
    schedule = []
    for entry in text.strip().replace(",", " ").split():
        if ":" not in entry:
            raise ValueError(f"entry {entry!r} is not THRESHOLD:BATCH_SIZE")
        threshold, batch = (_number(part) for part in entry.split(":", 1))
        schedule.append((threshold // seq_length if seq_length else threshold, batch))
    return sorted(schedule)


def step_global_batch(consumed: int, schedule: list[tuple[int, int]]) -> int:
    """The batch of the last schedule entry whose threshold ``consumed`` has reached."""
    batch = schedule[0][1]
    for threshold, size in schedule:
        if consumed < threshold:
            break
        batch = size
    return batch


@dataclass(frozen=True)
class BatchSchedule:
    """The run's global batch as a function of consumed samples.

    ``final``: ``model.global_batch_size``; ``rampup``: ``(start, increment, samples)`` or None;
    ``steps``: a parsed step schedule (thresholds in samples) or None; ``group``: micro batch × DP,
    the samples one micro-batch step of all ranks reads."""

    final: int
    group: int
    rampup: tuple[int, int, int] | None = None
    steps: tuple[tuple[int, int], ...] | None = None

    def global_batch(self, consumed: int) -> int:
        """Samples in the step that starts after ``consumed`` samples."""
        if self.rampup is not None:
            return ramp_global_batch(consumed, *self.rampup, self.final)
        if self.steps is not None:
            return step_global_batch(consumed, list(self.steps))
        return self.final

    def num_microbatches(self, consumed: int) -> int:
        """Micro-batches per rank in that step (global batch ÷ group)."""
        return self.global_batch(consumed) // self.group

    def sizes(self, steps: int, consumed: int = 0) -> list[int]:
        """The global batch of each of ``steps`` steps starting after ``consumed`` samples."""
        out = []
        for _ in range(steps):
            out.append(self.global_batch(consumed))
            consumed += out[-1]
        return out

    def consumed_after(self, steps: int) -> int:
        """``consumed_samples`` after the first ``steps`` steps of a run."""
        return sum(self.sizes(steps))

    def steps_for(self, consumed: int) -> int:
        """How many steps from 0 reach ``consumed`` samples exactly; ValueError when no step boundary does
        (a checkpoint's consumed_samples that this schedule cannot have produced)."""
        step, total = 0, 0
        while total < consumed:
            total += self.global_batch(total)
            step += 1
        if total != consumed:
            raise ValueError(f"consumed_samples={consumed} falls inside step {step} of this batch schedule")
        return step
