"""labsupport — the helper library of the NeMo / Megatron-Core data-path workbook.

Every chapter notebook starts with ``labsupport.setup()``. The package has four parts:

* :mod:`labsupport.datasets` — the Megatron data path (tokenizer ch1, indexed/preprocess ch2,
  blending ch3, gpt_samples/bin_packing/sft_packing ch4), mirroring ``megatron.core.datasets``;
* :mod:`labsupport.distributed` — collectives and process groups (ch5), chapter 0's layout and memory arithmetic;
* :mod:`labsupport.pages` — what a chapter page draws or prints (figures, tables, panels, the environment check);
* :mod:`labsupport.workbook` — the workbook's machinery (notebook runner, grading, exercises).

Beside them: :mod:`labsupport.models` (the tiny model of ch4), :mod:`labsupport.training` (ch6's
sampler, trainer and checkpoints; ``python -m labsupport train``), :mod:`labsupport.check` (exercise
checks), and the base modules every layer may import (``env``, ``paths``, ``progress``,
``config``, ``fileio``, ``stack_facts`` with its data file ``stack.toml``).
``python -m labsupport <command>`` (:mod:`labsupport.__main__`) runs the
commands ``preprocess``, ``runall``, ``grade``, ``make-exercises`` and ``train`` from the sub-packages.
"""
from __future__ import annotations

from typing import Any

from labsupport.paths import DATA_DIR, REPO_ROOT, data_file, work_dir, display_path

__version__ = "0.1.0"

__all__ = [
    "setup", "device", "NO_GPU_NOTE", "cuda_available", "is_headless", "measured_on_gpu",
    "DATA_DIR", "REPO_ROOT", "data_file", "work_dir", "display_path", "__version__",
]

_FROM_ENV = {"setup", "device", "NO_GPU_NOTE", "cuda_available", "is_headless", "measured_on_gpu"}


def __getattr__(name: str) -> Any:
    """``labsupport.setup`` and the other :mod:`labsupport.env` names, imported on first use:
    ``python -m labsupport`` starts without numpy, so a Ctrl-C at once is its one line (PEP 562)."""
    if name in _FROM_ENV:
        from labsupport import env  # noqa: PLC0415 - lazy: the package imports no numpy until a name needs it

        return getattr(env, name)
    raise AttributeError(f"module 'labsupport' has no attribute {name!r}")
