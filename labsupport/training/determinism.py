"""``trainer.deterministic``: what the trainer sets for repeatable runs, and what it cannot set — chapter 6.

With ``trainer.deterministic: true`` the trainer calls :func:`setup_determinism` before it builds the
model.  It sets

* ``torch.use_deterministic_algorithms(True)`` (``warn_only=False``): an operation with only a
  nondeterministic implementation raises ``RuntimeError`` instead of running (PyTorch 2.13's docstring
  of ``torch.use_deterministic_algorithms``, which also says that this setting alone "is not always
  enough to make an application reproducible");
* ``torch.backends.cudnn.deterministic = True`` and ``torch.backends.cudnn.benchmark = False``;
* on CUDA, ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when it is unset — the value PyTorch's own test harness
  sets for its deterministic tests (``torch/testing/_internal/common_utils.py``, 2.13.0, whose comment
  starts a new process for it "because CUDA only checks the variable when the runtime initializes") and
  the value Megatron-Bridge v0.6.0's ``apply_determinism_overrides``
  (``src/megatron/bridge/recipes/utils/determinism_utils.py``) puts in a recipe's ``env_vars``.

What no switch in this process sets, said once on rank 0 (:func:`limits_line`): the order of the
gradient all-reduce's additions (NCCL's algorithm; Megatron-LM core_v0.16.1's ``--deterministic-mode``,
``megatron/training/arguments.py``, and Bridge v0.6.0's ``ConfigContainer._validate_and_apply_deterministic_mode``
refuse to start unless ``NCCL_ALGO`` is one of :data:`MEGATRON_NCCL_ALGOS`), fused or flash attention
kernels (core_v0.16.1's deterministic mode refuses flash attention), and atomics in kernels torch's flag
does not cover.  On CPU the settings are harmless (the CPU run repeats bit for bit on the same machine anyway).
"""
from __future__ import annotations

import os
import sys
from typing import MutableMapping, TextIO

import torch

__all__ = ["MEGATRON_NCCL_ALGOS", "CUBLAS_WORKSPACE", "apply_determinism", "limits_line", "setup_determinism"]

#: the NCCL_ALGO values Megatron-LM core_v0.16.1's --deterministic-mode accepts (megatron/training/arguments.py)
MEGATRON_NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")
#: cuBLAS workspace setting for deterministic cuBLAS (PyTorch's test harness; Bridge v0.6.0's determinism_utils.py)
CUBLAS_WORKSPACE = ":4096:8"
CUBLAS_VAR = "CUBLAS_WORKSPACE_CONFIG"


def apply_determinism(cuda: bool, environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Set torch's deterministic switches (and, when ``cuda``, an unset ``CUBLAS_WORKSPACE_CONFIG``).

    Returns the settings as ``name=value`` strings, in the order they were set; an existing
    ``CUBLAS_WORKSPACE_CONFIG`` is kept and listed with ``(kept)``."""
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    done = ["torch.use_deterministic_algorithms(True)", "cudnn.deterministic=True", "cudnn.benchmark=False"]
    if cuda:
        if environ.get(CUBLAS_VAR) is None:
            environ[CUBLAS_VAR] = CUBLAS_WORKSPACE
            done.append(f"{CUBLAS_VAR}={CUBLAS_WORKSPACE}")
        else:
            done.append(f"{CUBLAS_VAR}={environ[CUBLAS_VAR]} (kept)")
    return done


def _nccl_algo(environ: MutableMapping[str, str]) -> str:
    """What the environment says about ``NCCL_ALGO``, against Megatron's accepted values."""
    algo = environ.get("NCCL_ALGO")
    if algo is None:
        return "NCCL_ALGO is not set"
    verdict = "one of" if algo in MEGATRON_NCCL_ALGOS else "not one of"
    return f"NCCL_ALGO={algo}, {verdict} the values Megatron's --deterministic-mode accepts"


def limits_line(done: list[str], environ: MutableMapping[str, str] = os.environ, *, late_cuda: bool = False) -> str:
    """The one line rank 0 prints: what was set (``done``, from :func:`apply_determinism`) and what is not.

    ``late_cuda``: CUDA was initialised in this process before ``CUBLAS_WORKSPACE_CONFIG`` was set
    (then the line says to set it before Python starts)."""
    late = f" (CUDA was initialised before {CUBLAS_VAR} was set: export it before starting Python)" if late_cuda else ""
    return (f"train: trainer.deterministic=true set {', '.join(done)}{late}; it cannot set the order of the "
            f"all-reduce's additions ({_nccl_algo(environ)}; Megatron's --deterministic-mode requires one of "
            f"{', '.join(MEGATRON_NCCL_ALGOS)}), fused or flash attention kernels, or atomics in kernels "
            "torch's deterministic flag does not cover")


def setup_determinism(enabled: bool, device: torch.device, rank: int, stream: TextIO | None = None) -> list[str]:
    """``trainer.deterministic``: apply the settings (before the model is built) and, on rank 0, print
    :func:`limits_line` to ``stream`` (default stderr, where the trainer's other notices go).

    The settings are process-wide and stay after the run (a notebook kernel keeps them).  Returns what was
    set ([] when ``enabled`` is false: then nothing is touched)."""
    if not enabled:
        return []
    cuda = device.type == "cuda"
    was_set = os.environ.get(CUBLAS_VAR) is not None
    late = cuda and not was_set and torch.cuda.is_initialized()
    done = apply_determinism(cuda)
    if rank == 0:
        print(limits_line(done, late_cuda=late), file=sys.stderr if stream is None else stream)
    return done
