"""Save and resume a training run exactly — chapter 6 (end to end; book §6.2.3's promise).

A checkpoint holds what the next step depends on: model weights, optimizer state (Adam's
moments and step counts), the RNG states (python, numpy, torch, CUDA) and ``consumed_samples``
— the sampler's resume point (:mod:`labsupport.training.sampler`).  Without that last number a
restarted run reads the first batches again.

Checkpoints are named as NeMo's checkpoint callback names them (``...-step=20-consumed_samples=160``).
The older single-file format: ``<dir>/step=000020-consumed_samples=160.ckpt``, written through
:func:`labsupport.fileio.atomic_open`
(a temporary name, fsynced, renamed, the folder fsynced), so neither a crash nor a host failure
leaves a half-written checkpoint under a real name; :func:`remove_stale_temporaries` deletes the
temporary files of a save that was killed.

Each checkpoint records ``content_sha256``, a digest of every tensor's bytes and every value it
holds, checked on load: ``torch.load`` itself never verifies the zip archive's CRCs, so a flipped
bit inside a tensor would otherwise load silently (measured: the loss is NaN from the first
step).  :func:`load_checkpoint` on a directory tries the checkpoints newest first and resumes from
the newest intact one, printing one line per damaged one it skipped.  It refuses a checkpoint of
another ``model`` config or another tokenizer, naming both; the data plan it recorded is checked
by :mod:`labsupport.training.data_plan`.

Two formats (``exp_manager.ckpt_format``).  ``torch_dist``, the default (Megatron-Core's): a
directory ``<dir>/step=000020-consumed_samples=160/`` written by every rank through
``torch.distributed.checkpoint`` — a shard per rank, DCP's ``.metadata`` and ``checkpoint.json``
with the digest (:mod:`labsupport.training.dist_checkpoint`: the files, the rename, async saves);
it loads on any number of ranks.  ``torch``, the older one: the single ``.ckpt`` file above,
written by rank 0; it still loads (with one warning line when the config asks for torch_dist).
Both are listed, tried newest first and verified the same way.
"""
from __future__ import annotations

import errno
import hashlib
import io
import os
import random
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from labsupport.fileio import atomic_open, remove_stale_temporaries as _remove_stale
from labsupport.training import dist_checkpoint as dcp_format
from labsupport.training.settings import Settings, config_fingerprint, model_dict

__all__ = ["ResumeError", "Checkpoint", "save_checkpoint", "load_checkpoint", "latest_checkpoint",
           "checkpoint_name", "rng_state", "set_rng_state", "content_digest", "checkpoints_newest_first",
           "remove_stale_temporaries", "check_writable", "DamagedCheckpoint"]

FORMAT = "labsupport-train-checkpoint/2"
FORMAT_DIST = "labsupport-train-checkpoint/3-torch_dist"   # the state inside a torch_dist directory
_OLD_FORMATS = ("labsupport-train-checkpoint/1",)   # no content digest: loaded unverified
_NAME = re.compile(r"^step=(\d+)-consumed_samples=(\d+)\.ckpt$")


class ResumeError(ValueError):
    """A checkpoint that cannot be resumed here; the message names it and says why."""


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` read: the file, step, consumed samples and the raw dict."""

    path: Path
    step: int
    consumed_samples: int
    state: dict[str, Any]


def checkpoint_name(step: int, consumed_samples: int, fmt: str = "torch_dist") -> str:
    """``step=000020-consumed_samples=160`` (a torch_dist directory), or with ``fmt="torch"`` the
    single file ``step=000020-consumed_samples=160.ckpt`` (zero-padded so names sort by step)."""
    name = dcp_format.dir_name(step, consumed_samples)
    return name if fmt == "torch_dist" else f"{name}.ckpt"


def rng_state() -> dict[str, Any]:
    """Every RNG a step may draw from, as tensors and ints (loadable with weights_only)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(tuple(v if not isinstance(v, list) else tuple(v) for v in state["python"]))
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def content_digest(value: Any) -> str:
    """sha256 over a checkpoint's content: keys, tensors (dtype, shape, bytes) and plain values,
    walked in a fixed order.  The ``content_sha256`` entry itself is left out."""
    h = hashlib.sha256()

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(v, dict):
            keys = sorted((k for k in v if k != "content_sha256"), key=repr)
            h.update(b"D%d" % len(keys))
            for k in keys:
                h.update(repr(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(b"L%d" % len(v))
            for x in v:
                walk(x)
        else:
            h.update(repr(v).encode())

    walk(value)
    return h.hexdigest()


_PROBE = re.compile(r"^\.write-probe\.\d+\.tmp$")


def remove_stale_temporaries(directory: str | os.PathLike, locked: bool = False) -> list[Path]:
    """Delete the temporary files (and torch_dist directories) of checkpoint saves whose process was
    killed; return them.

    ``locked``: the caller holds the save dir's lock (:func:`labsupport.fileio.hold_lock`), so no other
    run writes there and every temporary is a killed run's, whatever process now has its pid —
    the write probes of :func:`check_writable` included."""
    removed = _remove_stale(directory, re.compile(_NAME.pattern.strip("^$")), locked=locked)
    removed += dcp_format.remove_stale_dirs(directory, locked=locked)   # a killed torch_dist save
    folder = Path(directory)
    if locked and folder.is_dir():
        for p in sorted(folder.iterdir()):
            if _PROBE.match(p.name):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def check_writable(directory: str | os.PathLike, need_bytes: int = 0) -> None:
    """Before training: ``directory`` can be created and written, with ``need_bytes`` free.

    Raises OSError (``errno`` EACCES/EROFS/ENOSPC, ``filename`` the folder) so the command's
    one line names the folder before any step runs, not after the last."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-probe.{os.getpid()}.tmp"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"0")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(folder)) from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    free = shutil.disk_usage(folder).free
    if need_bytes and free < need_bytes:
        raise OSError(errno.ENOSPC, f"No space left on device ({free:,} bytes free, a checkpoint needs about "
                      f"{need_bytes:,})", os.fspath(folder))


def _state(fmt_string: str, step: int, consumed_samples: int, model: torch.nn.Module,
           optimizer: torch.optim.Optimizer, settings: Settings, data_plan: dict[str, Any] | None,
           consumed_valid_samples: int | None) -> dict[str, Any]:
    """What a checkpoint holds (both formats), ``content_sha256`` included."""
    state = {
        "format": fmt_string, "step": int(step), "consumed_samples": int(consumed_samples),
        "config_fingerprint": config_fingerprint(settings.config),
        "model_config": model_dict(settings.config),
        "tokenizer_fingerprint": settings.tokenizer_fingerprint,
        "data_plan": data_plan,
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(),
    }
    if consumed_valid_samples is not None:
        state["consumed_valid_samples"] = int(consumed_valid_samples)
    state["content_sha256"] = content_digest(state)
    return state


def _same_on_every_rank(state: dict[str, Any]) -> dict[str, Any]:
    """Under torch.distributed: rank 0's RNG states and plain values on every rank (the ranks' Python RNGs
    differ; DCP stores each replicated item once, from any rank), and a check that the weights and
    optimizer state, replicated by data parallelism, are bitwise the same on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return state
    small = [{k: v for k, v in state.items() if k not in ("model", "optimizer", "content_sha256")}]
    dist.broadcast_object_list(small, src=0)
    state = {**state, **small[0]}
    state["content_sha256"] = content_digest(state)
    digests: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(digests, state["content_sha256"])
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        raise RuntimeError(f"saving step {state['step']}: rank(s) {differ} hold other weights or optimizer state "
                           "than rank 0, so no checkpoint is written; data-parallel ranks must stay identical")
    return state


def save_checkpoint(directory: str | os.PathLike, *, step: int, consumed_samples: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, settings: Settings,
                    data_plan: dict[str, Any] | None = None, consumed_valid_samples: int | None = None,
                    fmt: str = "torch_dist", async_save: bool = False) -> Any:
    """Write the checkpoint of ``step`` atomically and durably; return its path (or, async, a pending save).

    Call it on every rank (a collective under torch.distributed).  ``fmt="torch_dist"``: the
    directory ``<directory>/step=…-consumed_samples=…/``, a shard per rank
    (:mod:`~labsupport.training.dist_checkpoint`); ``async_save``: written in the background —
    returns a :class:`~labsupport.training.dist_checkpoint.PendingSave` whose ``wait()`` (every
    rank, before the next save) finishes it and returns the path.  ``fmt="torch"``: rank 0 writes
    the single file ``….ckpt``; the other ranks write nothing and return the same path.
    ``data_plan``: what fixes the sample order (:func:`labsupport.training.data_plan.plan_of`);
    ``consumed_valid_samples``: validation samples read so far (stored only when given: a run
    that validates, :mod:`~labsupport.training.validation`; Megatron keeps it in the checkpoint's args)."""
    if fmt not in ("torch_dist", "torch"):
        raise ValueError(f"save_checkpoint: fmt={fmt!r}; use 'torch_dist' or 'torch'")
    folder = Path(directory)
    path = folder / checkpoint_name(step, consumed_samples, fmt)
    if fmt == "torch_dist":
        state = _same_on_every_rank(_state(FORMAT_DIST, step, consumed_samples, model, optimizer, settings,
                                           data_plan, consumed_valid_samples))
        sidecar = {"format": FORMAT_DIST, "step": int(step), "consumed_samples": int(consumed_samples),
                   "content_sha256": state["content_sha256"]}
        pending = dcp_format.save_sharded(path, state, sidecar, async_save=async_save)
        return pending if async_save else pending.final
    if dist.is_initialized() and dist.get_rank() != 0:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    state = _state(FORMAT, step, consumed_samples, model, optimizer, settings, data_plan, consumed_valid_samples)
    buffer = io.BytesIO()  # serialised first: a full disk is then a plain OSError from write()
    torch.save(state, buffer)
    with atomic_open(path, "wb") as fh:
        fh.write(buffer.getbuffer())
    return path


def checkpoints_newest_first(directory: str | os.PathLike) -> list[Path]:
    """The checkpoints in ``directory`` — torch_dist directories and ``.ckpt`` files — highest step
    first (of one step, the directory first); ``[]`` when none or no folder."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        if (m := _NAME.match(p.name)) and not p.is_dir():
            found.append((int(m.group(1)), 0, p))
        elif (m := dcp_format.DIR_NAME.match(p.name)) and p.is_dir():
            found.append((int(m.group(1)), 1, p))
    return [p for *_, p in sorted(found, reverse=True)]


def latest_checkpoint(directory: str | os.PathLike) -> Path:
    """The checkpoint with the highest step in ``directory``; ResumeError when there is none."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ResumeError(f"--resume {folder}: no such directory (give the --save-dir of the earlier run)")
    found = checkpoints_newest_first(folder)
    if not found:
        raise ResumeError(f"--resume {folder}: no checkpoint there (expected directories like "
                          f"{checkpoint_name(20, 160)}/ or files like {checkpoint_name(20, 160, 'torch')})")
    return found[0]


def _diff(old: Any, new: Any, prefix: str = "model") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(key, "<absent>"), new.get(key, "<absent>"), f"{prefix}.{key}")
        return out
    return [] if old == new else [f"{prefix}: {old!r} in the checkpoint, {new!r} now"]


class DamagedCheckpoint(ResumeError):
    """A checkpoint file that cannot be read back as it was written (empty, truncated, bit-flipped)."""


def _read_verified(path: Path) -> dict[str, Any]:
    """A checkpoint's state, its content digest checked: a torch_dist directory or a ``.ckpt`` file;
    DamagedCheckpoint naming it and what is wrong."""
    return _read_dir(path) if path.is_dir() else _read_file(path)


def _read_dir(folder: Path) -> dict[str, Any]:
    """Every shard of a torch_dist checkpoint read back (any world size) and checked against its digest."""
    try:
        sidecar, state = dcp_format.read_sharded(folder)
    except dcp_format.UnreadableShards as exc:
        raise DamagedCheckpoint(f"{folder.name}: damaged — {exc}") from None
    digest = content_digest(state)   # first: it covers the format string too
    if "content_sha256" in sidecar and digest != sidecar["content_sha256"]:
        raise DamagedCheckpoint(f"{folder.name}: damaged — its shards do not match the checksum they were saved with "
                                f"(content_sha256 {str(sidecar.get('content_sha256'))[:12]}…)")
    if state.get("format") != FORMAT_DIST or "content_sha256" not in sidecar:
        raise ResumeError(f"{folder.name}: not a labsupport training checkpoint (format "
                          f"{str(state.get('format'))[:60]!r}); give one that python -m labsupport train wrote")
    if sidecar.get("format") != FORMAT_DIST or sidecar.get("step") != state.get("step"):
        raise DamagedCheckpoint(f"{folder.name}: damaged — its {dcp_format.SIDECAR} does not match its shards")
    return state


def _read_file(file: Path) -> dict[str, Any]:
    """torch.load + the content digest; DamagedCheckpoint naming the file and what is wrong."""
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise DamagedCheckpoint(f"{file.name}: cannot be read ({exc.strerror})") from None
    if size == 0:
        raise DamagedCheckpoint(f"{file.name}: empty file (0 bytes), damaged (a crash before it reached the disk?)")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem for the user
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise DamagedCheckpoint(f"{file.name}: not a readable checkpoint, damaged "
                                f"({type(exc).__name__}: {first})") from None
    if (isinstance(state, dict) and state.get("format") not in (FORMAT, *_OLD_FORMATS)
            and "content_sha256" in state and content_digest(state) != state["content_sha256"]):
        # the digest covers the format string: a flipped bit there is damage like any other
        raise DamagedCheckpoint(f"{file.name}: damaged — format {str(state.get('format'))[:60]!r} and its content "
                                "do not match the checksum it was saved with")
    if not isinstance(state, dict) or state.get("format") not in (FORMAT, *_OLD_FORMATS):
        raise ResumeError(f"{file.name}: not a labsupport training checkpoint (format "
                          f"{state.get('format') if isinstance(state, dict) else None!r})")
    if state["format"] == FORMAT and content_digest(state) != state.get("content_sha256"):
        raise DamagedCheckpoint(f"{file.name}: damaged — its content does not match the checksum it was saved with "
                                f"(content_sha256 {str(state.get('content_sha256'))[:12]}…)")
    return state


def _newest_intact(folder: Path, warn: Any) -> tuple[Path, dict[str, Any]]:
    candidates = checkpoints_newest_first(folder)
    if not candidates:
        latest_checkpoint(folder)  # raises the "no checkpoint there" line
    damaged: list[str] = []
    for file in candidates:
        try:
            state = _read_verified(file)
        except DamagedCheckpoint as exc:
            damaged.append(file.name)
            print(f"warning: {exc}; trying an older checkpoint", file=warn)
            continue
        if damaged:
            print(f"warning: resuming from {file.name}, the newest intact checkpoint in {folder} "
                  f"(skipped {', '.join(damaged)})", file=warn)
        return file, state
    raise DamagedCheckpoint(f"--resume {folder}: every checkpoint there is damaged ({', '.join(damaged[:3])}"
                            f"{', …' if len(damaged) > 3 else ''}); start again without --resume")


def load_checkpoint(path: str | os.PathLike, settings: Settings, warn: Any = None) -> Checkpoint:
    """Read a checkpoint (a torch_dist directory or ``.ckpt`` file, or a save dir → its newest intact
    one) and check it fits ``settings``.  Works on any world size, with or without a process group:
    each rank reads the whole state.

    Raises ResumeError naming the file when it is damaged (a file given by name), of another
    format, written with another ``model`` config (listing the keys that differ) or another
    tokenizer; in a directory a damaged checkpoint is skipped with one line on ``warn`` (stderr).
    """
    warn = sys.stderr if warn is None else warn
    p = Path(path)
    if not p.exists():
        raise ResumeError(f"--resume {p}: no such file or directory (give the --save-dir of the earlier run)")
    if p.is_dir() and not dcp_format.DIR_NAME.match(p.name):
        file, state = _newest_intact(p, warn)
    else:
        file, state = p, _read_verified(p)
    if state["format"] in _OLD_FORMATS:
        print(f"warning: {file.name}: saved in the older format {state['format']} without a content checksum, "
              "so it is loaded unverified; the next save writes a verified one", file=warn)
    elif not file.is_dir() and settings.config.exp_manager.ckpt_format == "torch_dist":
        print(f"warning: {file.name}: a checkpoint in the older single-file format (torch); it loads as before, "
              "and the next save writes torch_dist (a directory, a shard per rank)", file=warn)
    if state["tokenizer_fingerprint"] != settings.tokenizer_fingerprint:
        raise ResumeError(f"{file.name} was trained with tokenizer {state['tokenizer_fingerprint'][:12]}… but "
                          f"model.tokenizer.model is {settings.tokenizer_fingerprint[:12]}… "
                          f"({settings.tokenizer_path.name}); resume with the same tokenizer")
    if state["config_fingerprint"] != config_fingerprint(settings.config):
        now = model_dict(settings.config)
        diffs = _diff(state["model_config"], now)
        raise ResumeError(f"{file.name} was written with another model config (fingerprint "
                          f"{state['config_fingerprint'][:12]}… vs {config_fingerprint(settings.config)[:12]}…): "
                          + "; ".join(diffs[:3]) + ("; …" if len(diffs) > 3 else "")
                          + ". Resume with the original model.* values (trainer.* may change)")
    for key in ("model", "optimizer"):  # a checkpoint saved before the NaN guard existed
        bad = next((k for k, v in _tensors(state[key])
                    if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
        if bad is not None:
            raise ResumeError(f"{file.name}: {key} tensor {bad} holds NaN or inf; resume from an earlier checkpoint")
    return Checkpoint(file, int(state["step"]), int(state["consumed_samples"]), state)


def _tensors(value: Any, prefix: str = "") -> Any:
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{prefix}[{i}]")
