"""Environment check of chapter 0, framed by the training-environment Q&A (source 004) (chapter 0).

``environment_report()`` measures this machine (CPU, memory, disk, torch, CUDA, NCCL, bf16);
``checklist_rows()`` sets each item of the Q&A's "optimal training environment" next to what this
machine has and what the workbook itself needs. ``FRAMEWORK_STATUS`` dates the Q&A's framework
advice (Horovod, DeepSpeed, FairScale, FP16) against each project's own repository, and
``pytorch_builtins()`` shows what PyTorch itself now ships in their place.
"""
from __future__ import annotations

import os
import platform
import shutil
from typing import Any

from labsupport.stack_facts import load_stack
from labsupport.paths import REPO_ROOT
import psutil


def environment_report() -> dict[str, Any]:
    """Facts about this machine; sizes in decimal GB. Machine-specific: never compare them."""
    import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)
    import torch.distributed as dist  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

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
    """(item, what the training-environment Q&A (source 004) says, this machine, what the workbook needs) rows."""
    gpu = ", ".join(f"{g['name']} ({g['memory_gb']} GB)" for g in report["gpus"]) or "none"
    return [
        ("accelerator", "A100/H100-class GPUs, ≥ 40 GB VRAM each", gpu,
         "none: every chapter runs on CPU; `requires-gpu` cells use a GPU when present"),
        ("software", "Linux, PyTorch, CUDA/cuDNN, Horovod/DeepSpeed/FairScale",
         f"{report['platform']}, torch {report['torch']}",
         "torch, sentencepiece, numpy, Jupyter (make setup); distribution: torch.distributed (see below)"),
        ("precision", "mixed precision (FP16 etc.)",
         f"bf16 {'supported' if report.get('bf16_supported') else 'on CPU only (autocast)'}",
         "bf16 (book §1.14): fp32's exponent range, so no loss scaling"),
        ("communication", "NCCL over NVLink/InfiniBand (≥ 100 Gb/s)",
         f"gloo {'yes' if report['gloo_available'] else 'no'}, NCCL {'yes' if report['nccl_available'] else 'no'}",
         "gloo on CPU for chapter 5; NCCL only in GPU cells"),
        ("memory", "enough host RAM to feed the GPUs", f"{report['ram_gb']} GB RAM, {report['cpu_cores']} cores",
         "< 2 GB: datasets are memory-mapped (chapter 2)"),
        ("storage", "fast NVMe for data and checkpoints", f"{report['disk_free_gb']} GB free",
         "< 1 GB for generated .bin/.idx files"),
    ]


_DEEPSPEED = load_stack().entry("deepspeed")

#: The Q&A's framework advice, dated: (project, what the Q&A says, what its own repository says, source).
#: Horovod and FairScale checked on 2026-11-30 against each repository's default branch; DeepSpeed's row is
#: its entry in labsupport/stack.toml (status, source and the day it was checked).
FRAMEWORK_STATUS: tuple[tuple[str, str, str, str], ...] = (
    ("Horovod", "a distributed-training library",
     "last release v0.28.1 on 2023-06-12; later commits are CI fixes (the scheduled CI run was disabled "
     "in June 2026)", "github.com/horovod/horovod: CHANGELOG.md, git tags"),
    ("FairScale", "a distributed-training library",
     "last release v0.4.13 (2022-12); its README: FSDP 'has been upstreamed to PyTorch', the copy in "
     "FairScale is 'for historical references'", "github.com/facebookresearch/fairscale: README.md, git tags"),
    ("DeepSpeed", "a distributed-training library", _DEEPSPEED.status,
     f"{_DEEPSPEED.source}; checked {_DEEPSPEED.checked.isoformat()}"),
    ("FP16 mixed precision", "mixed precision 'FP16 etc.'",
     "A100/H100 run bf16 at the fp16 rate; bf16 keeps fp32's 8-bit exponent, so no loss scaling — "
     "the book's own configs use bf16 (§1.14, trainer.precision: bf16)", "book §1.14; H100 datasheet"),
)


def pytorch_builtins() -> dict[str, str]:
    """What the installed PyTorch ships in place of the Q&A's libraries, each shown by using it.

    DDP and FSDP are looked up in their modules; bf16 autocast runs a CPU matmul and reports the
    result's dtype. Keys: ``torch``, ``DDP``, ``FSDP (fully_shard)``, ``bf16 autocast``.
    """
    import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)
    import torch.distributed.fsdp as fsdp  # noqa: PLC0415 - torch only when called (start-up time of the importing command)
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

    a = torch.ones(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = a @ a
    return {
        "torch": torch.__version__,
        "DDP": f"{DistributedDataParallel.__module__}.{DistributedDataParallel.__name__}",
        "FSDP (fully_shard)": f"torch.distributed.fsdp.fully_shard: {'yes' if hasattr(fsdp, 'fully_shard') else 'no'}",
        "bf16 autocast": f"fp32 @ fp32 under torch.autocast('cpu', dtype=torch.bfloat16) → {out.dtype}",
    }
