"""The training loop of chapter 6 (end to end): config → batches → a tiny GPT, on one process
or as one rank of a data-parallel group.

``train(cfg)`` builds everything from the config (:mod:`~labsupport.training.settings`), then per
optimizer step: ``num_microbatches`` micro-batches from Megatron's sampler, each forward +
backward with its loss divided by ``num_microbatches`` (gradient accumulation, as Megatron's
``forward_step`` does); with more than one rank the gradients are flattened into one buffer and
all-reduced (sum, then ÷ DP — what DDP does per bucket); AdamW steps; ``consumed_samples`` grows
by ``global_batch_size``.  The loss of a micro-batch is ``Σ loss·mask / Σ mask`` over its tokens.

Each step returns a log record (a dict, also written as one JSON line with ``log_file``):
``step`` (1-based, after the update), ``loss`` (averaged over micro-batches and ranks), ``lr``,
``consumed_samples``, ``tokens`` (S × global batch), ``loss_tokens`` (tokens with loss mask 1),
``domain_loss`` ({name: mean loss of that domain's tokens this step}), ``domain_tokens``,
``samples`` (the blend indices this rank read), ``batch_sha256`` (of their tokens), ``allreduce_bytes`` (bytes each rank sends in a ring all-reduce of the gradients, 0 on one rank),
and timings in seconds: ``step_time``, ``data_time`` (sampler + dataset + collate),
``compute_time`` (forward + backward + optimizer), ``comm_time`` (all-reduce), plus
``tokens_per_s`` and ``memory_mb`` (peak RSS on CPU, peak allocated on CUDA).

Deliberate simplifications against NeMo/Megatron: data parallelism only (TP = PP = 1), constant
learning rate after a linear warm-up, no gradient clipping, no validation split, the dense
block-diagonal mask on CPU (chapter 4's varlen kernel is a GPU cell of the notebook).
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from labsupport.models.tiny_lm import TinyCausalLM
from labsupport.training import checkpoint as ckpt
from labsupport.training.data import Batch, build_blend, collate
from labsupport.training.sampler import MegatronPretrainingSampler
from labsupport.training.settings import ConfigError, Settings, load_settings, settings_from_config

__all__ = ["train", "TrainResult", "build_model", "token_losses", "train_worker", "ResumeError"]

ResumeError = ckpt.ResumeError


@dataclass
class TrainResult:
    """What :func:`train` returns (on every rank; ``log`` holds the global numbers)."""

    log: list[dict[str, Any]]
    settings: Settings
    model: torch.nn.Module
    consumed_samples: int
    step: int
    checkpoints: list[str] = field(default_factory=list)
    next_batch: list[int] = field(default_factory=list)   # blend indices this rank would read next
    token_losses: dict[int, np.ndarray] = field(default_factory=dict)  # blend index → per-token loss


def build_model(settings: Settings, vocab_size: int) -> TinyCausalLM:
    """Chapter 4's TinyCausalLM sized by ``model.*``, initialised from ``model.seed``."""
    m = settings.cfg.model
    torch.manual_seed(settings.seed)
    return TinyCausalLM(vocab_size=vocab_size, d_model=m.hidden_size, n_heads=m.num_attention_heads,
                        n_layers=m.num_layers, max_positions=m.max_position_embeddings,
                        ffn_hidden_size=m.ffn_hidden_size)


def token_losses(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Cross-entropy per token, float32 (B, S) (masked positions included; multiply by loss_mask)."""
    logits = model(batch.tokens, batch.position_ids, batch.masked)
    return F.cross_entropy(logits.float().transpose(1, 2), batch.labels, reduction="none")


def _device(settings: Settings) -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if dist.is_initialized() or settings.accelerator == "cpu":
        return torch.device("cpu")
    if settings.accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError("trainer.accelerator=gpu but torch sees no CUDA device; use trainer.accelerator=cpu or auto")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _lr(settings: Settings, step: int) -> float:
    base = float(settings.cfg.model.optim.lr)
    warm = int(settings.cfg.model.optim.sched.warmup_steps)
    return base * min(1.0, (step + 1) / warm) if warm else base


def _all_reduce_grads(model: torch.nn.Module, world: int) -> int:
    """Sum the gradients of all ranks in one flat buffer, divide by ``world``; return its bytes."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return flat.numel() * flat.element_size()


def _tensorboard(directory: str | os.PathLike | None):
    if directory is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: the JSON log is the dashboard's data
        return None
    return SummaryWriter(os.fspath(directory))


def train(config: Settings | str | os.PathLike | Any = None, overrides: Sequence[str] = (), *,
          save_dir: str | os.PathLike | None = None, save_every: int = 0,
          resume: str | os.PathLike | None = None, log_file: str | os.PathLike | None = None,
          dataset: Any = None, stop_after: int | None = None, show_progress: bool = True,
          keep_token_losses: bool = False, tensorboard_dir: str | os.PathLike | None = None,
          on_step: Callable[[dict[str, Any], torch.nn.Module], None] | None = None) -> TrainResult:
    """Train the config's tiny GPT; return the per-step log.

    Args:
        config: a :class:`Settings`, a YAML path (default: ``configs/megatron_gpt_tiny.yaml``) or
            an OmegaConf config.  overrides: ``key=value`` strings (Hydra style).
        save_dir / save_every: write a checkpoint every ``save_every`` steps and at the end.
        resume: a checkpoint file or a directory (its latest checkpoint) to continue from.
        log_file: append one JSON line per step (rank 0 only).
        dataset: use this instead of the config's blend (same ``[i]`` dicts), e.g.
            :class:`~labsupport.training.data.NaiveTextDataset`.
        stop_after: stop after this many steps of *this* call (a run interrupted on purpose).
        keep_token_losses: keep every sample's per-token loss (``TrainResult.token_losses``).
        tensorboard_dir: also write TensorBoard events there, when ``tensorboard`` is installed.
        on_step: called as ``on_step(record, model)`` after each step (rank 0).

    Raises ConfigError (bad config, naming the field) and ResumeError (unusable checkpoint).
    Inside an initialised ``torch.distributed`` group, each rank trains on its slice.
    """
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    if isinstance(config, Settings):
        settings = config
    elif config is None or isinstance(config, (str, os.PathLike)):
        settings = load_settings(*(() if config is None else (config,)), overrides=overrides, world_size=world)
    else:
        settings = settings_from_config(config, world_size=world)
    if settings.world_size != world:
        raise ConfigError(f"trainer.devices × trainer.num_nodes = {settings.world_size} but this group has {world} ranks")
    from labsupport.datasets.tokenizer import Tokenizer

    device = _device(settings)
    vocab = Tokenizer(settings.tokenizer_path).vocab_size
    model = build_model(settings, vocab).to(device)
    if world > 1:  # as DDP does at construction: every rank starts from rank 0's weights
        for p in model.parameters():
            dist.broadcast(p.data, 0)
    opt_cfg = settings.cfg.model.optim
    optimizer = torch.optim.AdamW(model.parameters(), lr=_lr(settings, 0), betas=tuple(opt_cfg.betas),
                                  weight_decay=float(opt_cfg.weight_decay))
    step, consumed = 0, 0
    if resume is not None:
        loaded = ckpt.load_checkpoint(resume, settings)
        if loaded.step >= settings.max_steps:
            raise ResumeError(f"{loaded.path.name} is at step {loaded.step}, which already reaches trainer.max_steps="
                              f"{settings.max_steps}; raise trainer.max_steps to train further")
        model.load_state_dict(loaded.state["model"])
        optimizer.load_state_dict(loaded.state["optimizer"])
        ckpt.set_rng_state(loaded.state["rng"])
        step, consumed = loaded.step, loaded.consumed_samples
    blend = build_blend(settings) if dataset is None else dataset
    names = list(getattr(blend, "names", settings.names))
    sampler = MegatronPretrainingSampler(len(blend), consumed, settings.micro_batch_size, rank, world)
    batches = iter(sampler)
    dense = settings.flags["reset_attention_mask"]
    autocast = settings.precision == "bf16"
    result = TrainResult([], settings, model, consumed, step)
    writer = _tensorboard(tensorboard_dir) if rank == 0 else None
    if log_file and rank == 0:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    log_fh = open(log_file, "a", encoding="utf-8") if (log_file and rank == 0) else None
    end = settings.max_steps if stop_after is None else min(settings.max_steps, step + int(stop_after))
    from labsupport.progress import progress

    bar = progress(total=end - step, desc="train", unit="step", disable=not show_progress or rank != 0)
    n_dom = len(names)
    try:
        while step < end:
            t_step = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = _lr(settings, step)
            optimizer.zero_grad(set_to_none=True)
            data_t = compute_t = comm_t = 0.0
            stats = torch.zeros(2 + 2 * n_dom, dtype=torch.float64)  # loss, loss tokens, per domain sums, counts
            read: list[int] = []
            digest = hashlib.sha256()
            for _ in range(settings.num_microbatches):
                t0 = time.perf_counter()
                idx = next(batches)
                batch = collate([blend[i] for i in idx], idx, dense).to(device)
                read += [int(i) for i in idx]
                digest.update(batch.tokens.cpu().numpy().tobytes())
                t1 = time.perf_counter()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    ce = token_losses(model, batch)
                per_sample = (ce * batch.loss_mask).sum(1)
                count = batch.loss_mask.sum(1)
                loss = per_sample.sum() / count.sum().clamp(min=1)
                (loss / settings.num_microbatches).backward()
                if keep_token_losses:
                    # one numpy array per micro-batch: a torch tensor kept per sample grew the process's
                    # RSS by ~5 MiB per step on CPU (measured: 442 → 1,269 MiB over 150 steps; flat now)
                    rows = (ce.detach() * batch.loss_mask).float().cpu().numpy().copy()
                    for j, i in enumerate(idx):
                        result.token_losses[int(i)] = rows[j]
                ids = batch.dataset_id.cpu()
                stats[0] += loss.item() / settings.num_microbatches
                stats[1] += count.sum().item()
                stats[2:2 + n_dom].index_add_(0, ids, per_sample.detach().double().cpu())
                stats[2 + n_dom:].index_add_(0, ids, count.detach().double().cpu())
                data_t += t1 - t0
                compute_t += time.perf_counter() - t1
            sent = 0
            if world > 1:
                t0 = time.perf_counter()
                nbytes = _all_reduce_grads(model, world)
                dist.all_reduce(stats)
                stats[0] /= world
                comm_t = time.perf_counter() - t0
                from labsupport.distributed.collectives import ring_bytes_per_rank

                sent = int(ring_bytes_per_rank(nbytes, world))
            t0 = time.perf_counter()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            compute_t += time.perf_counter() - t0
            step += 1
            consumed += settings.global_batch_size
            elapsed = time.perf_counter() - t_step
            sums, counts = stats[2:2 + n_dom], stats[2 + n_dom:]
            record = {
                "step": step, "loss": float(stats[0]), "lr": _lr(settings, step - 1), "consumed_samples": consumed,
                "tokens": settings.tokens_per_step, "loss_tokens": int(stats[1]),
                "domain_loss": {n: (float(sums[d] / counts[d]) if counts[d] else None) for d, n in enumerate(names)},
                "domain_tokens": {n: int(counts[d]) for d, n in enumerate(names)},
                "samples": read, "batch_sha256": digest.hexdigest()[:16], "allreduce_bytes": sent, "step_time": elapsed, "data_time": data_t, "compute_time": compute_t,
                "comm_time": comm_t, "tokens_per_s": settings.tokens_per_step / elapsed if elapsed else None,
                "memory_mb": _memory_mb(device),
            }
            result.log.append(record)
            if rank == 0:
                if log_fh:
                    log_fh.write(json.dumps(record) + "\n")
                    log_fh.flush()
                if writer is not None:
                    for key in ("loss", "tokens_per_s", "data_time", "compute_time", "comm_time", "memory_mb"):
                        writer.add_scalar(f"train/{key}", record[key], step)
                if on_step is not None:
                    on_step(record, model)
            bar.update(1)
            if save_dir is not None and ((save_every and step % save_every == 0) or step == end):
                if rank == 0:
                    path = ckpt.save_checkpoint(save_dir, step=step, consumed_samples=consumed, model=model,
                                                optimizer=optimizer, settings=settings)
                    result.checkpoints.append(str(path))
                if world > 1:
                    dist.barrier()
    finally:
        bar.close()
        if log_fh:
            log_fh.close()
        if writer is not None:
            writer.close()
    result.step, result.consumed_samples = step, consumed
    if consumed < len(blend):
        result.next_batch = next(iter(MegatronPretrainingSampler(len(blend), consumed, settings.micro_batch_size,
                                                                 rank, world)), [])
    return result


def train_worker(config: str | None = None, overrides: Sequence[str] = (), **kwargs: Any) -> dict[str, Any]:
    """:func:`train` as a ``run_workers`` function (chapter 5's launcher): returns plain values —
    the log, the next batch of this rank, and the final weights as lists (rank 0)."""
    res = train(config, overrides, show_progress=False, **kwargs)
    weights = {k: v.detach().cpu().tolist() for k, v in res.model.state_dict().items()} if dist.get_rank() == 0 else None
    return {"log": res.log, "next_batch": res.next_batch, "weights": weights, "checkpoints": res.checkpoints}
