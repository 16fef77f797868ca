"""labsupport — the helper library of the NeMo / Megatron-Core data-path workbook.

Every chapter notebook starts with ``labsupport.setup()``; chapter topics live in their own
modules (``tokenizer`` ch1, ``indexed``/``preprocess`` ch2, ``blending`` ch3, ``packing`` ch4,
``collectives`` ch5) and exercise checks in ``labsupport.check``.
"""
from __future__ import annotations

from .env import NO_GPU_NOTE, cuda_available, device, is_headless, setup
from .paths import DATA_DIR, REPO_ROOT, data_file, work_dir, display_path

__version__ = "0.1.0"

__all__ = [
    "setup", "device", "NO_GPU_NOTE", "cuda_available", "is_headless",
    "DATA_DIR", "REPO_ROOT", "data_file", "work_dir", "display_path", "__version__",
]
