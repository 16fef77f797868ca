"""Environment check of chapter 0, framed by seed 004's checklist (chapter 0).

``environment_report()`` measures this machine (CPU, memory, disk, torch, CUDA, NCCL, bf16);
``checklist_rows()`` sets each item of the book's "optimal training environment" Q&A next to
what this machine has and what the workbook itself needs.
"""
from __future__ import annotations

import os
import platform
import shutil
from typing import Any

from labsupport.paths import REPO_ROOT


def environment_report() -> dict[str, Any]:
    """Facts about this machine; sizes in decimal GB. Machine-specific: never compare them."""
    import psutil
    import torch
    import torch.distributed as dist

    report: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu_cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "disk_free_gb": round(shutil.disk_usage(REPO_ROOT).free / 1e9, 1),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "gloo_available": dist.is_available() and dist.is_gloo_available(),
        "nccl_available": dist.is_available() and dist.is_nccl_available(),
        "gpus": [],
    }
    if report["cuda_available"]:
        report["cuda"] = torch.version.cuda
        try:
            v = torch.cuda.nccl.version()
            report["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - NCCL is optional
            report["nccl"] = None
        report["bf16_supported"] = torch.cuda.is_bf16_supported()
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            report["gpus"].append({"name": props.name, "memory_gb": round(props.total_memory / 1e9, 1)})
    return report


def checklist_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(item, what seed 004 says, this machine, what the workbook needs) rows."""
    gpu = ", ".join(f"{g['name']} ({g['memory_gb']} GB)" for g in report["gpus"]) or "none"
    return [
        ("accelerator", "A100/H100-class GPUs, ≥ 40 GB VRAM each", gpu,
         "none: every chapter runs on CPU; `requires-gpu` cells use a GPU when present"),
        ("software", "Linux, PyTorch, CUDA/cuDNN, a distributed library", f"{report['platform']}, torch {report['torch']}",
         "torch, sentencepiece, numpy, Jupyter (make setup)"),
        ("communication", "NCCL over NVLink/InfiniBand (≥ 100 Gb/s)",
         f"gloo {'yes' if report['gloo_available'] else 'no'}, NCCL {'yes' if report['nccl_available'] else 'no'}",
         "gloo on CPU for chapter 5; NCCL only in GPU cells"),
        ("memory", "enough host RAM to feed the GPUs", f"{report['ram_gb']} GB RAM, {report['cpu_cores']} cores",
         "< 2 GB: datasets are memory-mapped (chapter 2)"),
        ("storage", "fast NVMe for data and checkpoints", f"{report['disk_free_gb']} GB free",
         "< 1 GB for generated .bin/.idx files"),
    ]
