"""Save and resume a training run exactly — chapter 6 (end to end; book §6.2.3's promise).

A checkpoint holds what the next step depends on: model weights, optimizer state (Adam's
moments and step counts), the RNG states (python, numpy, torch, CUDA) and ``consumed_samples``
— the sampler's resume point (:mod:`labsupport.training.sampler`).  Without that last number a
restarted run reads the first batches again.

Files are named like NeMo's checkpoint callback names them (``...-step=20-consumed_samples=160``):
``<dir>/step=000020-consumed_samples=160.ckpt``, written to a temporary name and renamed, so a
crash never leaves a half-written checkpoint under a real name.  :func:`load_checkpoint` refuses
a checkpoint of another ``model`` config or another tokenizer, naming both.
"""
from __future__ import annotations

import os
import random
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from labsupport.training.settings import Settings, config_fingerprint

__all__ = ["ResumeError", "Checkpoint", "save_checkpoint", "load_checkpoint", "latest_checkpoint",
           "checkpoint_name", "rng_state", "set_rng_state"]

FORMAT = "labsupport-train-checkpoint/1"
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


def checkpoint_name(step: int, consumed_samples: int) -> str:
    """``step=000020-consumed_samples=160.ckpt`` (zero-padded so names sort by step)."""
    return f"step={step:06d}-consumed_samples={consumed_samples}.ckpt"


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


def save_checkpoint(directory: str | os.PathLike, *, step: int, consumed_samples: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, settings: Settings) -> Path:
    """Write ``<directory>/step=…-consumed_samples=….ckpt`` atomically; return its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        "format": FORMAT, "step": int(step), "consumed_samples": int(consumed_samples),
        "config_fingerprint": config_fingerprint(settings.cfg),
        "model_config": OmegaConf.to_container(settings.cfg.model, resolve=True),
        "tokenizer_fingerprint": settings.tokenizer_fingerprint,
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(),
    }
    path = folder / checkpoint_name(step, consumed_samples)
    tmp = folder / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def latest_checkpoint(directory: str | os.PathLike) -> Path:
    """The checkpoint with the highest step in ``directory``; ResumeError when there is none."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ResumeError(f"--resume {folder}: no such directory (give the --save-dir of the earlier run)")
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name)))
    if not found:
        raise ResumeError(f"--resume {folder}: no checkpoint there (expected files like {checkpoint_name(20, 160)})")
    return found[-1][1]


def _diff(old: Any, new: Any, prefix: str = "model") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(key, "<absent>"), new.get(key, "<absent>"), f"{prefix}.{key}")
        return out
    return [] if old == new else [f"{prefix}: {old!r} in the checkpoint, {new!r} now"]


def load_checkpoint(path: str | os.PathLike, settings: Settings) -> Checkpoint:
    """Read a checkpoint (a file, or a directory → its latest) and check it fits ``settings``.

    Raises ResumeError naming the file when it is unreadable, of another format, written with
    another ``model`` config (listing the keys that differ) or another tokenizer.
    """
    p = Path(path)
    if not p.exists():
        raise ResumeError(f"--resume {p}: no such file or directory (give the --save-dir of the earlier run)")
    file = latest_checkpoint(p) if p.is_dir() else p
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem for the user
        raise ResumeError(f"{file.name}: not a readable checkpoint ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ResumeError(f"{file.name}: not a labsupport training checkpoint (format {state.get('format') if isinstance(state, dict) else None!r})")
    if state["tokenizer_fingerprint"] != settings.tokenizer_fingerprint:
        raise ResumeError(f"{file.name} was trained with tokenizer {state['tokenizer_fingerprint'][:12]}… but "
                          f"model.tokenizer.model is {settings.tokenizer_fingerprint[:12]}… "
                          f"({settings.tokenizer_path.name}); resume with the same tokenizer")
    if state["config_fingerprint"] != config_fingerprint(settings.cfg):
        now = OmegaConf.to_container(settings.cfg.model, resolve=True)
        diffs = _diff(state["model_config"], now)
        raise ResumeError(f"{file.name} was written with another model config (fingerprint "
                          f"{state['config_fingerprint'][:12]}… vs {config_fingerprint(settings.cfg)[:12]}…): "
                          + "; ".join(diffs[:3]) + ("; …" if len(diffs) > 3 else "")
                          + ". Resume with the original model.* values (trainer.* may change)")
    return Checkpoint(file, int(state["step"]), int(state["consumed_samples"]), state)
