"""Seeds, print options and device choice — the first cell of every chapter (all chapters).

``setup()`` makes a run reproducible (fixed seeds, fixed print widths, small figures) and
reports the device; ``device()`` picks CUDA when it is there, else the CPU.
"""
from __future__ import annotations

import os
import random

import numpy as np

_DEVICE_CHOICES = ("auto", "cpu", "cuda")

#: What a `requires-gpu` cell prints on a machine without CUDA.
NO_GPU_NOTE = "No CUDA device here: this cell runs on a GPU machine (make test-gpu)."


def cuda_available() -> bool:
    """True when torch is importable and sees at least one CUDA device."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return bool(torch.cuda.is_available())


def is_headless() -> bool:
    """True when the notebook runs unattended (papermill, nbval, ``make outputs``).

    Headless runs use plain-text progress bars on stderr and the static fallback of
    interactive panels, so their stored output is deterministic.
    """
    return os.environ.get("LABSUPPORT_HEADLESS", "") not in ("", "0")


def device(prefer: str = "auto"):
    """The torch device to use: ``"auto"`` → cuda if available else cpu.

    ``prefer="cuda"`` without a GPU raises RuntimeError saying so (instead of failing
    later inside a kernel launch).
    """
    import torch

    if prefer not in _DEVICE_CHOICES:
        raise ValueError(f"device must be one of {_DEVICE_CHOICES}, got {prefer!r}")
    if prefer == "cpu":
        return torch.device("cpu")
    if cuda_available():
        return torch.device("cuda")
    if prefer == "cuda":
        raise RuntimeError(
            "device='cuda' was requested but torch sees no CUDA device "
            f"(torch {torch.__version__}); use device='auto' or 'cpu'"
        )
    return torch.device("cpu")


_resolve_device = device  # setup() takes a parameter of the same name


def setup(seed: int = 0, device: str = "auto", quiet: bool = False):
    """Fix seeds (random, numpy, torch), print options and figure defaults; return the device.

    Prints one line such as ``labsupport ready · seed 0 · device cpu`` unless ``quiet``.
    """
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    np.set_printoptions(linewidth=100, precision=4, suppress=True, threshold=200)
    torch.set_printoptions(linewidth=100, precision=4, sci_mode=False)
    try:
        import matplotlib as mpl

        mpl.rcParams.update({"figure.dpi": 96, "savefig.dpi": 96, "figure.figsize": (7.0, 3.6),
                             "axes.grid": True, "grid.alpha": 0.3})
    except ImportError:  # pragma: no cover
        pass
    dev = _resolve_device(device)
    if not quiet:
        print(f"labsupport ready · seed {seed} · device {dev.type}")
    return dev
