"""Validation during training — chapter 6 (end to end): Megatron's ``evaluate`` on the validation split.

With ``trainer.val_check_interval: N`` and ``trainer.limit_val_batches: L`` (NeMo 1.x's names;
Megatron-LM's ``--eval-interval``/``--eval-iters``, Megatron-Bridge's ``validation.eval_interval``/
``validation.eval_iters``) the trainer validates after every optimizer step whose number is a
multiple of N, on L global batches (``L × global_batch_size`` samples) of the **validation blend**.
Megatron-LM at ``core_v0.16.1`` is followed where it is clear:

* **the validation blend** — every ``data_prefix`` entry's *valid* range of
  ``model.data.splits_string``, blended with the training weights
  (``megatron/core/datasets/blended_megatron_dataset_builder.py:160-196``: one weight list, per-split
  sizes ``ceil(size × w)``), sized ``(max_steps // N + 1) × L × global_batch_size`` samples
  (``get_train_valid_test_num_samples``, ``megatron/training/training.py:3307-3308``; NeMo 1.x
  computes the same, ``megatron_gpt_model.py:1639`` at NVIDIA/NeMo v2.5.0rc0);
* **which samples** — the validation iterator *continues* from one validation to the next: the
  k-th validation reads validation samples ``[(k − 1)·L·G, k·L·G)`` (G = global batch).  Megatron
  keeps one iterator for the whole run and counts ``args.consumed_valid_samples += eval_batch_size``
  per evaluation iteration (``training.py:3144``); a resumed run reads ``consumed_valid_samples``
  from the checkpoint (``megatron/training/checkpointing.py:1754-1755``) and builds the validation
  loader from it (``training.py:3397``), and a checkpoint without it falls back to
  ``(iteration // eval_interval) × eval_iters × global_batch_size`` (``training.py:3351-3355``) —
  both are done here, so a resumed run validates on the samples an uninterrupted one does;
* **the batches** — each validation iteration is one global batch in ``G / (micro × DP)``
  micro-batches per rank, rank ``r`` reading its slice through Megatron's sampler
  (``training.py:3068-3069``; the sampler: :mod:`~labsupport.training.sampler`);
* **the loss** — forward only under ``torch.no_grad()`` with ``model.eval()`` (and the model's
  previous mode afterwards, ``training.py:3057-3058, 3077, 3174-3176``); every micro-batch contributes
  ``[Σ loss·mask, Σ mask]`` (``pretrain_gpt.py:127-130``), summed over the validation's micro-batches,
  all-reduced over the data-parallel group and divided once (``training.py:3130-3136, 3178-3180``):
  a mean over all the validation's loss tokens, the same value on every rank.  The training loss is a
  mean of per-micro-batch token means (:mod:`~labsupport.training.trainer`); the two agree whenever
  every micro-batch has as many loss tokens (``eod_mask_loss: false`` on packed samples).

Where NeMo 1.x differs, Megatron is followed: NeMo builds the validation loader with
``consumed_samples = 0`` (``megatron_gpt_model.py:1853`` at v2.5.0rc0) and Lightning iterates it afresh
at each validation, so every validation reads the *same* first ``limit_val_batches`` batches (a less
noisy curve, on fewer samples).  Megatron's ordering is the one this workbook's data path teaches,
and the one whose resume needs state (``consumed_valid_samples``).  Not done here: Megatron's extra
validation after the last step (``training.py:1068-1092``; the ``+ 1`` of the blend size leaves room
for it) and ``full_validation``/``multiple_validation_sets``.

Each validation returns one record, written by the trainer as its own JSON line:
``{"val_step", "val_loss", "val_samples", "val_loss_tokens", "consumed_valid_samples"}`` —
``val_step`` (the optimizer step just taken), ``val_loss`` (nats per loss token), ``val_samples``
(L × G), ``val_loss_tokens`` (tokens with loss mask 1, all ranks), ``consumed_valid_samples`` (after
this validation: it read ``[consumed − val_samples, consumed)``).  A validation line has no ``step``
key: :func:`~labsupport.training.run_log.training_records` keeps the training lines of a log.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from labsupport.config import ConfigError
from labsupport.datasets.blending import BlendError
from labsupport.training.data import build_blend, collate
from labsupport.training.run_log import VAL_KEY
from labsupport.training.sampler import MegatronPretrainingSampler
from labsupport.training.settings import Settings
from labsupport.training.token_loss import token_losses

__all__ = ["enabled", "due", "check_resume", "valid_num_samples", "consumed_after", "build_valid_blend", "evaluate",
           "is_validation_record", "VAL_KEY"]


def enabled(settings: Settings) -> bool:
    """True when the config validates (``trainer.val_check_interval`` is set)."""
    return settings.config.trainer.val_check_interval is not None


def due(settings: Settings, step: int) -> bool:
    """True when optimizer step ``step`` (1-based) is followed by a validation (Megatron:
    ``iteration % eval_interval == 0``, ``training.py:2914``)."""
    interval = settings.config.trainer.val_check_interval
    return interval is not None and step > 0 and step % interval == 0


def _batch_samples(settings: Settings) -> int:
    """Samples one validation reads: ``limit_val_batches × global_batch_size``."""
    return settings.config.trainer.limit_val_batches * settings.config.model.global_batch_size


def valid_num_samples(settings: Settings) -> int:
    """Samples the validation blend is built for: ``(max_steps // N + 1) × L × G``
    (Megatron's ``get_train_valid_test_num_samples``, ``training.py:3307-3308``)."""
    t = settings.config.trainer
    return (t.max_steps // t.val_check_interval + 1) * _batch_samples(settings)


def consumed_after(settings: Settings, step: int) -> int:
    """Validation samples read by the end of step ``step`` in a run that validated with this
    config from step 1: ``(step // N) × L × G`` (Megatron's fallback for a checkpoint without
    ``consumed_valid_samples``, ``training.py:3351-3355``)."""
    return (step // settings.config.trainer.val_check_interval) * _batch_samples(settings)


def build_valid_blend(settings: Settings) -> Any:
    """The validation blend (module docstring), its indices cached like the training blend's;
    a split that gives a dataset no validation documents is a ConfigError naming the keys."""
    try:
        return build_blend(settings, size=valid_num_samples(settings), cache=True, index_split="valid")
    except (BlendError, ValueError) as exc:
        raise ConfigError(f"trainer.val_check_interval={settings.config.trainer.val_check_interval}: the "
                          f"validation blend cannot be built ({exc}); give the valid split weight in "
                          "model.data.splits_string, or set trainer.val_check_interval=null") from None


def check_resume(settings: Settings, blend: Any, consumed: int, step: int) -> None:
    """Before training from ``step``: refuse a ``consumed`` (a checkpoint's) that leaves the next
    validation of this run no samples in ``blend`` (ConfigError naming ``trainer.val_check_interval``)."""
    interval = settings.config.trainer.val_check_interval
    following = (step // interval + 1) * interval
    if following <= settings.config.trainer.max_steps:
        _check_room(settings, blend, consumed, following)


def _check_room(settings: Settings, blend: Any, consumed: int, step: int) -> None:
    need = consumed + _batch_samples(settings)
    if need > len(blend):
        raise ConfigError(f"trainer.val_check_interval={settings.config.trainer.val_check_interval}: the validation "
                          f"at step {step} needs validation samples up to {need}, the validation blend holds "
                          f"{len(blend)} (consumed_valid_samples={consumed}, e.g. from a checkpoint of a run that "
                          "validated more often); keep the validation settings the run started with")


def _loss_sums(model: torch.nn.Module, blend: Any, indices: list[int], settings: Settings,
               device: torch.device) -> tuple[float, float]:
    """One micro-batch's ``(Σ loss·mask, Σ mask)`` in float64 (no gradients)."""

    batch = collate([blend[i] for i in indices], indices, settings.config.model.data.reset_attention_mask).to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=settings.config.trainer.bf16):
        ce = token_losses(model, batch)
    return float((ce.double() * batch.loss_mask.double()).sum()), float(batch.loss_mask.double().sum())


def evaluate(model: torch.nn.Module, blend: Any, settings: Settings, *, step: int, consumed: int,
             device: torch.device, rank: int = 0, world: int = 1,
             reduce: Callable[[torch.Tensor], None] | None = None) -> dict[str, Any]:
    """One validation after step ``step``: this rank's share of ``limit_val_batches`` global batches
    of ``blend`` from validation sample ``consumed`` on, forward only; returns the record
    (module docstring).  ``reduce`` sums a float64 tensor (2,) over the data-parallel group in place
    (default: ``dist.all_reduce`` when ``world > 1``).  The model is left in the mode it was in."""
    _check_room(settings, blend, consumed, step)
    micro = settings.config.model.micro_batch_size
    per_rank = settings.config.trainer.limit_val_batches * settings.num_microbatches
    batches = iter(MegatronPretrainingSampler(len(blend), consumed, micro, rank, world))
    sums = torch.zeros(2, dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(per_rank):
                loss_sum, tokens = _loss_sums(model, blend, next(batches), settings, device)
                sums[0] += loss_sum
                sums[1] += tokens
    finally:
        model.train(was_training)
    if world > 1:
        _reduce(sums, device, reduce)
    n = _batch_samples(settings)
    return {VAL_KEY: int(step), "val_loss": float(sums[0] / sums[1]) if sums[1] else None, "val_samples": n,
            "val_loss_tokens": int(sums[1]), "consumed_valid_samples": int(consumed + n)}


def _reduce(sums: torch.Tensor, device: torch.device, reduce: Callable[[torch.Tensor], None] | None) -> None:
    """Sum ``sums`` over the group (on the device for NCCL, which reduces CUDA tensors only)."""
    on = sums.to(device) if device.type == "cuda" else sums
    if reduce is None:
        torch.distributed.all_reduce(on)
    else:
        reduce(on)
    sums.copy_(on.cpu())


def is_validation_record(record: Any) -> bool:
    """True for a validation line's record (it has ``val_step``)."""
    return isinstance(record, dict) and VAL_KEY in record
