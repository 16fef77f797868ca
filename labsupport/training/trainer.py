"""The training loop of chapter 6 (end to end): config → batches → a tiny GPT, on one process
or as one rank of a data-parallel group.

``train(cfg)`` builds everything from the config (:mod:`~labsupport.training.settings`), then per
optimizer step: ``num_microbatches`` micro-batches from Megatron's sampler, each forward +
backward with its loss divided by ``num_microbatches`` (gradient accumulation, as Megatron's
``forward_step`` does); with more than one rank the gradients are flattened into one buffer and
all-reduced (sum, then ÷ DP — what DDP does per bucket); AdamW steps; ``consumed_samples`` grows
by the step's global batch.  The loss of a micro-batch is ``Σ loss·mask / Σ mask`` over its tokens.
With ``model.rampup_batch_size`` or ``model.step_batch_size_schedule`` the global batch (and so
``num_microbatches``) of a step follows from ``consumed_samples`` (:mod:`~labsupport.training.batch_ramp`),
and, as Megatron-LM does, a checkpoint is also saved after the last step before the count changes.

Each step returns a log record (a dict, also written as one JSON line with ``log_file``):
``step`` (1-based, after the update), ``loss`` (averaged over micro-batches and ranks), ``lr``,
``consumed_samples``, ``global_batch_size`` and ``num_microbatches`` (this step's), ``tokens`` (S × global
batch), ``loss_tokens`` (tokens with loss mask 1),
``domain_loss`` ({name: mean loss of that domain's tokens this step}), ``domain_tokens``,
``samples`` (the blend indices this rank read), ``batch_sha256`` (of their tokens),
``allreduce_bytes`` (bytes each rank sends in a ring all-reduce of the gradients, 0 on one rank),
and timings in seconds: ``step_time``, ``data_time`` (sampler + dataset + collate),
``compute_time`` (forward + backward + optimizer), ``comm_time`` (all-reduce), plus
``tokens_per_s`` and ``memory_mb`` (peak RSS on CPU, peak allocated on CUDA).

With ``trainer.val_check_interval: N`` (and ``trainer.limit_val_batches: L``) the run validates
after every N-th step on L global batches of the validation blend, forward only, as Megatron's
``evaluate`` does (:mod:`~labsupport.training.validation`: which samples, the loss, the resume);
each validation is one more JSON line, ``{"val_step": …, "val_loss": …, …}`` (no ``step`` key), and
one record of ``TrainResult.val_log``; ``TrainResult.log`` and ``on_step`` see training steps only.
``val_check_interval: null`` (the default) validates never and changes nothing else.

``trainer.deterministic: true`` sets torch's deterministic switches before the model is built and says
once, on rank 0, what they leave open (:mod:`~labsupport.training.determinism`).

Deliberate simplifications against NeMo/Megatron: data parallelism only (TP = PP = 1), constant
learning rate after a linear warm-up, no gradient clipping, no test-split evaluation, the dense
block-diagonal mask on CPU (chapter 4's varlen kernel is a GPU cell of the notebook).
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from labsupport.datasets.tokenizer import Tokenizer
from labsupport.distributed.collectives import ring_bytes_per_rank
from labsupport.models.tiny_lm import TinyCausalLM
from labsupport.progress import progress
from labsupport.training import checkpoint as ckpt, faults, validation
from labsupport.training.data import collate
from labsupport.training.data_plan import check_plan, consumed_digest, plan_of
from labsupport.training.determinism import setup_determinism
from labsupport.training.run_log import reconcile_log
from labsupport.training.sampler import MegatronPretrainingSampler
from labsupport.training.settings import ConfigError, Settings, load_settings, settings_from_config
from labsupport.training.token_loss import token_losses

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
    val_log: list[dict[str, Any]] = field(default_factory=list)   # one record per validation (validation.py)


def build_model(settings: Settings, vocab_size: int) -> TinyCausalLM:
    """Chapter 4's TinyCausalLM sized by ``model.*``, initialised from ``model.seed``."""
    m = settings.config.model
    torch.manual_seed(m.seed)
    return TinyCausalLM(vocab_size=vocab_size, d_model=m.hidden_size, n_heads=m.num_attention_heads,
                        n_layers=m.num_layers, max_positions=m.max_position_embeddings,
                        ffn_hidden_size=m.ffn_hidden_size)


def _device(settings: Settings) -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    accelerator = settings.config.trainer.accelerator
    if dist.is_initialized() or accelerator == "cpu":
        return torch.device("cpu")
    if accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError("trainer.accelerator=gpu but torch sees no CUDA device; use trainer.accelerator=cpu or auto")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _lr(settings: Settings, step: int) -> float:
    base = settings.config.model.optim.lr
    warm = settings.config.model.optim.sched.warmup_steps
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
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - tensorboard is optional
    except ImportError:  # tensorboard not installed: the JSON log is the dashboard's data
        return None
    return SummaryWriter(os.fspath(directory))


@dataclass
class _Run:
    """What the named steps of :func:`train` share: the built objects and the counters."""

    settings: Settings
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    world: int
    rank: int
    blend: Any = None
    names: list[str] = field(default_factory=list)
    batches: Any = None
    step: int = 0
    consumed: int = 0
    plan_hasher: Any = None        # sha256 over the samples trained on so far (data_plan)
    health: Any = None             # faults.RankHealth under torch.distributed
    valid_blend: Any = None        # the validation blend when trainer.val_check_interval is set
    consumed_valid: int = 0        # validation samples read so far (Megatron's consumed_valid_samples)


def _build(config: Any, overrides: Sequence[str]) -> _Run:
    """Settings → model (rank 0's weights on every rank) and optimizer."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    if isinstance(config, Settings):
        settings = config
    elif config is None or isinstance(config, (str, os.PathLike)):
        settings = load_settings(*(() if config is None else (config,)), overrides=overrides, world_size=world)
    else:
        settings = settings_from_config(config, world_size=world)
    if settings.world_size != world:
        raise ConfigError(f"trainer.devices × trainer.num_nodes = {settings.world_size} "
                          f"but this group has {world} ranks")

    device = _device(settings)
    # before anything runs on the device: CUBLAS_WORKSPACE_CONFIG must precede the first cuBLAS call
    setup_determinism(settings.config.trainer.deterministic, device, rank)
    model = build_model(settings, Tokenizer(settings.tokenizer_path).vocab_size).to(device)
    if world > 1:  # as DDP does at construction: every rank starts from rank 0's weights
        for p in model.parameters():
            dist.broadcast(p.data, 0)
    opt_cfg = settings.config.model.optim
    # fused: one kernel over all parameters (NeMo's model.optim.name is fused_adam); on this CPU model
    # it took ~1.3 ms per step against ~6-10 ms for the per-tensor loop (one thread, 1.1 M parameters)
    optimizer = torch.optim.AdamW(model.parameters(), lr=_lr(settings, 0), betas=tuple(opt_cfg.betas),
                                  weight_decay=opt_cfg.weight_decay, fused=device.type in ("cpu", "cuda"))
    return _Run(settings, model, optimizer, device, world, rank)


def _resume(run: _Run, resume: str | os.PathLike, if_exists: bool) -> bool:
    """Load the newest intact checkpoint: weights, optimizer, RNG, step, consumed samples.

    A checkpoint that already reaches ``trainer.max_steps`` is refused, except with
    ``if_exists`` (a restarted job whose last attempt finished): then it returns True, done."""
    quiet = open(os.devnull, "w") if run.rank else None
    try:
        loaded = ckpt.load_checkpoint(resume, run.settings, warn=quiet)
    finally:
        if quiet:
            quiet.close()
    max_steps = run.settings.config.trainer.max_steps
    if loaded.step >= max_steps and if_exists:
        if run.rank == 0:
            print(f"train: {loaded.path.name} is at step {loaded.step}, trainer.max_steps={max_steps}: the run is "
                  "already complete, nothing to do", file=sys.stderr)
        run.step, run.consumed = loaded.step, loaded.consumed_samples
        return True
    if loaded.step >= max_steps:
        raise ResumeError(f"{loaded.path.name} is at step {loaded.step}, which already reaches trainer.max_steps="
                          f"{max_steps}; raise trainer.max_steps to train further")
    run.model.load_state_dict(loaded.state["model"])
    run.optimizer.load_state_dict(loaded.state["optimizer"])
    ckpt.set_rng_state(loaded.state["rng"])
    run.step, run.consumed = loaded.step, loaded.consumed_samples
    if validation.enabled(run.settings):   # Megatron: checkpointing.py:1754-1755, else training.py:3351-3355
        saved = loaded.state.get("consumed_valid_samples")
        run.consumed_valid = validation.consumed_after(run.settings, run.step) if saved is None else int(saved)
    run.resumed_from = loaded  # type: ignore[attr-defined]
    return False


def _data(run: _Run, dataset: Any) -> None:
    """The blend (or ``dataset``), checked up front, and this rank's sampler from ``consumed``."""
    run.blend = faults.checked_blend(run.settings) if dataset is None else dataset
    run.names = list(getattr(run.blend, "names", run.settings.names))
    loaded = getattr(run, "resumed_from", None)
    if loaded is not None:
        run.plan_hasher, warning = check_plan(loaded.state.get("data_plan"), run.settings, run.blend,
                                              run.consumed, loaded.path.name, run.settings.config.allow_new_data_plan)
        if warning and run.rank == 0:
            print(warning, file=sys.stderr)
    else:
        run.plan_hasher = consumed_digest(run.blend, run.consumed)
    run.batches = iter(MegatronPretrainingSampler(len(run.blend), run.consumed,
                                                  run.settings.config.model.micro_batch_size, run.rank, run.world))
    if validation.enabled(run.settings):   # the config's validation blend, also with a custom ``dataset``
        run.valid_blend = validation.build_valid_blend(run.settings)
        validation.check_resume(run.settings, run.valid_blend, run.consumed_valid, run.step)


@dataclass
class _StepStats:
    """One optimizer step's sums: loss, loss tokens, per-domain loss sums and token counts."""

    stats: torch.Tensor
    micro: int = 1                 # micro-batches per rank this step (batch_ramp: may grow during the run)
    read: list[int] = field(default_factory=list)
    tokens: dict[int, torch.Tensor] = field(default_factory=dict)   # blend index → tokens read (S,)
    digest: Any = field(default_factory=hashlib.sha256)
    data_t: float = 0.0
    compute_t: float = 0.0
    comm_t: float = 0.0
    sent: int = 0


def _forward_backward(run: _Run, st: _StepStats, token_store: dict | None) -> None:
    """One micro-batch: read it, forward, loss ÷ this step's micro-batch count, backward; add to ``st``."""
    s, n_dom = run.settings, len(run.names)
    t0 = time.perf_counter()
    idx = next(run.batches)
    cpu_batch = collate([run.blend[i] for i in idx], idx, s.config.model.data.reset_attention_mask)
    batch = cpu_batch.to(run.device)
    st.read += [int(i) for i in idx]
    st.tokens.update((int(i), cpu_batch.tokens[j]) for j, i in enumerate(idx))   # for the data-plan digest
    st.digest.update(cpu_batch.tokens.numpy().tobytes())
    t1 = time.perf_counter()
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=s.config.trainer.bf16):
        ce = token_losses(run.model, batch)
    per_sample = (ce * batch.loss_mask).sum(1)
    count = batch.loss_mask.sum(1)
    loss = faults.inject_nan(per_sample.sum() / count.sum().clamp(min=1), run.step + 1)
    (loss / st.micro).backward()
    if token_store is not None:
        # one numpy array per micro-batch: a torch tensor kept per sample grew the process's
        # RSS by ~5 MiB per step on CPU (measured: 442 → 1,269 MiB over 150 steps; flat now)
        rows = (ce.detach() * batch.loss_mask).float().cpu().numpy().copy()
        for j, i in enumerate(idx):
            token_store[int(i)] = rows[j]
    ids = batch.dataset_id.cpu()
    st.stats[0] += loss.item() / st.micro
    st.stats[1] += count.sum().item()
    st.stats[2:2 + n_dom].index_add_(0, ids, per_sample.detach().double().cpu())
    st.stats[2 + n_dom:].index_add_(0, ids, count.detach().double().cpu())
    st.data_t += t1 - t0
    st.compute_t += time.perf_counter() - t1


def _reduce(run: _Run, st: _StepStats) -> None:
    """With DP > 1: all-reduce the gradients (mean) and the step's sums (loss: mean over ranks)."""
    if run.world == 1:
        return

    t0 = time.perf_counter()
    with run.health.collective(run.step + 1, "the gradient all-reduce"):
        nbytes = _all_reduce_grads(run.model, run.world)
        dist.all_reduce(st.stats)
    st.stats[0] /= run.world
    st.comm_t = time.perf_counter() - t0
    st.sent = int(ring_bytes_per_rank(nbytes, run.world))


def _optimizer_step(run: _Run, st: _StepStats) -> None:
    """Refuse a non-finite loss or gradient (before anything is updated or saved), then AdamW."""
    faults.check_finite(float(st.stats[0]), run.model, run.step + 1)
    t0 = time.perf_counter()
    run.optimizer.step()
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    st.compute_t += time.perf_counter() - t0
    run.step += 1
    previous, run.consumed = run.consumed, run.consumed + st.micro * run.settings.schedule.group

    consumed_digest(run.blend, run.consumed, run.plan_hasher, start=previous, known=st.tokens)


def _record(run: _Run, st: _StepStats, elapsed: float) -> dict[str, Any]:
    """The step's log record (the module docstring lists the keys)."""
    s, n_dom = run.settings, len(run.names)
    sums, counts = st.stats[2:2 + n_dom], st.stats[2 + n_dom:]
    batch = st.micro * s.schedule.group
    tokens = batch * s.config.model.encoder_seq_length
    return {
        "step": run.step, "loss": float(st.stats[0]), "lr": _lr(s, run.step - 1), "consumed_samples": run.consumed,
        "global_batch_size": batch, "num_microbatches": st.micro, "tokens": tokens, "loss_tokens": int(st.stats[1]),
        "domain_loss": {n: (float(sums[d] / counts[d]) if counts[d] else None) for d, n in enumerate(run.names)},
        "domain_tokens": {n: int(counts[d]) for d, n in enumerate(run.names)},
        "samples": st.read, "batch_sha256": st.digest.hexdigest()[:16], "allreduce_bytes": st.sent,
        "step_time": elapsed, "data_time": st.data_t, "compute_time": st.compute_t, "comm_time": st.comm_t,
        "tokens_per_s": tokens / elapsed if elapsed else None, "memory_mb": _memory_mb(run.device),
    }


def _log(record: dict[str, Any], log_fh: Any, writer: Any, on_step: Any, model: torch.nn.Module) -> None:
    """Rank 0: one JSON line, TensorBoard scalars, the caller's hook."""
    if log_fh:
        log_fh.write(json.dumps(record) + "\n")
        log_fh.flush()
    if writer is not None:
        for key in ("loss", "tokens_per_s", "data_time", "compute_time", "comm_time", "memory_mb"):
            writer.add_scalar(f"train/{key}", record[key], record["step"])
    if on_step is not None:
        on_step(record, model)


def _validate(run: _Run, result: TrainResult, log_fh: Any, writer: Any) -> None:
    """One validation (:func:`~labsupport.training.validation.evaluate`) after ``run.step``: every rank
    its share, the sums all-reduced; rank 0 writes the line and the TensorBoard scalar."""
    def reduce(sums: torch.Tensor) -> None:
        with run.health.collective(run.step, "the validation all-reduce"):
            dist.all_reduce(sums)

    record = validation.evaluate(run.model, run.valid_blend, run.settings, step=run.step, consumed=run.consumed_valid,
                                 device=run.device, rank=run.rank, world=run.world,
                                 reduce=reduce if run.world > 1 else None)
    run.consumed_valid = record["consumed_valid_samples"]
    result.val_log.append(record)
    if run.rank == 0:
        if log_fh:
            log_fh.write(json.dumps(record) + "\n")
            log_fh.flush()
        if writer is not None and record["val_loss"] is not None:
            writer.add_scalar("val/loss", record["val_loss"], run.step)


def _save(run: _Run, save_dir: str | os.PathLike, result: TrainResult) -> None:
    """Every rank writes the checkpoint (with the data plan) in ``exp_manager.ckpt_format``: its torch_dist
    shard, or with ``torch`` rank 0 the single file; every rank then waits for it.  With
    ``exp_manager.async_save`` the previous background save is finished first and this one goes on in
    the background (:func:`_wait_saved` finishes the last).  Weights that are not finite stop the run
    first, on every rank (they hold the same weights), and nothing is written."""
    faults.check_finite_weights(run.model, run.step)
    _wait_saved(run, result)
    exp = run.settings.config.exp_manager
    plan = plan_of(run.settings, run.blend, run.consumed, run.plan_hasher.copy().hexdigest())
    valid = run.consumed_valid if validation.enabled(run.settings) else None

    def write() -> Any:   # a collective: under RankHealth, a silent peer is named in one line
        return ckpt.save_checkpoint(save_dir, step=run.step, consumed_samples=run.consumed, model=run.model,
                                    optimizer=run.optimizer, settings=run.settings, data_plan=plan,
                                    consumed_valid_samples=valid, fmt=exp.ckpt_format,
                                    async_save=exp.async_save and exp.ckpt_format == "torch_dist")
    if run.world > 1:
        with run.health.collective(run.step, "saving the checkpoint"):
            saved = write()
    else:
        saved = write()
    if not isinstance(saved, os.PathLike):
        run.pending_save = saved  # type: ignore[attr-defined]
        return
    if run.rank == 0:
        result.checkpoints.append(str(saved))
    if run.world > 1:
        with run.health.collective(run.step, "the barrier after saving"):
            dist.barrier()


def _wait_saved(run: _Run, result: TrainResult) -> None:
    """Finish the background save still under way, if any (every rank): its directory gets its final name."""
    pending = getattr(run, "pending_save", None)
    if pending is None:
        return
    run.pending_save = None  # type: ignore[attr-defined]
    if run.world > 1:
        with run.health.collective(run.step, "finishing the background save"):
            path = pending.wait()
    else:
        path = pending.wait()
    if run.rank == 0:
        result.checkpoints.append(str(path))


def train(config: Settings | str | os.PathLike | Any = None, overrides: Sequence[str] = (), *,
          save_dir: str | os.PathLike | None = None, save_every: int = 0,
          resume: str | os.PathLike | None = None, log_file: str | os.PathLike | None = None,
          dataset: Any = None, stop_after: int | None = None, show_progress: bool = True,
          keep_token_losses: bool = False, tensorboard_dir: str | os.PathLike | None = None,
          on_step: Callable[[dict[str, Any], torch.nn.Module], None] | None = None,
          resume_if_exists: bool = False) -> TrainResult:
    """Train the config's tiny GPT; return the per-step log.

    Args:
        config: a :class:`Settings`, a YAML path (default: ``configs/megatron_gpt_tiny.yaml``) or
            an OmegaConf config (read as a :class:`~labsupport.training.schema.RunConfig`).
        overrides: ``key=value`` strings (Hydra style).
        save_dir / save_every: write a checkpoint every ``save_every`` steps and at the end.
        resume: a checkpoint file or a directory (its newest intact checkpoint) to continue from.
        resume_if_exists: resume from ``resume`` (default ``save_dir``) when it holds a
            checkpoint, else start at step 0 — what a restarted job needs (NeMo's
            ``exp_manager.resume_if_exists`` + ``resume_ignore_no_checkpoint``; the config's
            ``exp_manager.resume_if_exists: true`` does the same).
        log_file: append one JSON line per step and one per validation (rank 0 only); once every check passed, the log
            is reconciled with the step the run starts from (:mod:`~labsupport.training.run_log`:
            later steps' lines dropped, a run from step 0 starts an empty log, the old one kept
            aside as ``<log>.old``).  The save dir and the log are locked for the run
            (:func:`~labsupport.training.faults.run_lock`).
        dataset: use this instead of the config's blend (same ``[i]`` dicts), e.g.
            :class:`~labsupport.training.data.NaiveTextDataset`.
        stop_after: stop after this many steps of *this* call (a run interrupted on purpose).
        keep_token_losses: keep every sample's per-token loss (``TrainResult.token_losses``).
        tensorboard_dir: also write TensorBoard events there, when ``tensorboard`` is installed.
        on_step: called as ``on_step(record, model)`` after each step (rank 0).

    Raises ConfigError (bad config or data, naming the field), ResumeError (unusable checkpoint,
    or a changed data plan: :mod:`~labsupport.training.data_plan`), ``faults.TrainingError``
    (a non-finite loss, a rank that stopped responding, a save dir or log another run holds) and
    OSError (save dir or log unwritable, checked before the first step).  Inside an initialised
    ``torch.distributed`` group, each rank trains on its slice.
    """
    run = _build(config, overrides)
    with faults.run_lock(run.rank, save_dir, log_file):
        return _train_locked(run, save_dir=save_dir, save_every=save_every, resume=resume, log_file=log_file,
                             dataset=dataset, stop_after=stop_after, show_progress=show_progress,
                             keep_token_losses=keep_token_losses, tensorboard_dir=tensorboard_dir, on_step=on_step,
                             resume_if_exists=resume_if_exists or run.settings.config.exp_manager.resume_if_exists)


def _train_locked(run: _Run, *, save_dir: Any, save_every: int, resume: Any, log_file: Any, dataset: Any,
                  stop_after: int | None, show_progress: bool, keep_token_losses: bool, tensorboard_dir: Any,
                  on_step: Any, resume_if_exists: bool) -> TrainResult:
    """:func:`train` once the save dir and log are locked."""
    if resume_if_exists:
        resume = faults.resume_source(resume, save_dir, run.rank)
    faults.preflight(run, save_dir, log_file)
    if resume is not None and _resume(run, resume, resume_if_exists):   # already complete: nothing to train
        if log_file and run.rank == 0:
            reconcile_log(log_file, run.step, warn=sys.stderr)
        return TrainResult([], run.settings, run.model, run.consumed, run.step)
    _data(run, dataset)
    if log_file and run.rank == 0:  # every refusal is behind us: the log now matches the start step
        reconcile_log(log_file, run.step, warn=sys.stderr)
    run.health = faults.RankHealth.create(run) if run.world > 1 else None
    result = TrainResult([], run.settings, run.model, run.consumed, run.step)
    writer = _tensorboard(tensorboard_dir) if run.rank == 0 else None
    log_fh = open(log_file, "a", encoding="utf-8") if (log_file and run.rank == 0) else None
    max_steps = run.settings.config.trainer.max_steps
    end = max_steps if stop_after is None else min(max_steps, run.step + int(stop_after))

    bar = progress(total=end - run.step, desc="train", unit="step", disable=not show_progress or run.rank != 0)
    try:
        while run.step < end:
            t_step = time.perf_counter()
            faults.inject_rank_fault(run.rank, run.step + 1)
            for group in run.optimizer.param_groups:
                group["lr"] = _lr(run.settings, run.step)
            run.optimizer.zero_grad(set_to_none=True)
            st = _StepStats(torch.zeros(2 + 2 * len(run.names), dtype=torch.float64),
                            run.settings.schedule.num_microbatches(run.consumed))
            for _ in range(st.micro):
                _forward_backward(run, st, result.token_losses if keep_token_losses else None)
            _reduce(run, st)
            _optimizer_step(run, st)
            record = _record(run, st, time.perf_counter() - t_step)
            result.log.append(record)
            if run.rank == 0:
                _log(record, log_fh, writer, on_step, run.model)
            if validation.due(run.settings, run.step):   # after the step's log, before its save (Megatron's order)
                _validate(run, result, log_fh, writer)
            bar.update(1)
            ramp_changes = run.settings.schedule.num_microbatches(run.consumed) != st.micro   # Megatron saves then
            if save_dir is not None and ((save_every and run.step % save_every == 0) or run.step == end
                                         or ramp_changes):
                _save(run, save_dir, result)
        _wait_saved(run, result)   # an async save still writing: finish it before the run ends
    finally:
        bar.close()
        if log_fh:
            log_fh.close()
        if writer is not None:
            writer.close()
    result.step, result.consumed_samples = run.step, run.consumed
    if run.consumed < len(run.blend):
        micro = run.settings.config.model.micro_batch_size
        result.next_batch = next(iter(MegatronPretrainingSampler(len(run.blend), run.consumed, micro, run.rank,
                                                                 run.world)), [])
    return result


def train_worker(config: str | None = None, overrides: Sequence[str] = (), **kwargs: Any) -> dict[str, Any]:
    """:func:`train` as a ``run_workers`` function (chapter 5's launcher): returns plain values —
    the log, the validation records, the next batch of this rank, and the final weights as lists (rank 0)."""
    res = train(config, overrides, show_progress=False, **kwargs)
    weights = ({k: v.detach().cpu().tolist() for k, v in res.model.state_dict().items()}
               if dist.get_rank() == 0 else None)
    return {"log": res.log, "next_batch": res.next_batch, "weights": weights, "checkpoints": res.checkpoints,
            "val_log": res.val_log}
