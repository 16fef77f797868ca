"""Training memory of chapter 0: bytes per parameter one model replica holds (bf16 weights, LoRA,
ZeRO's and Megatron's Adam, Megatron's distributed optimizer) and the GPU table of the
NeMo-on-Kubernetes guide (source 001) that chapter 0 checks with them (chapter 0; the checks of
chapter 0 compare learners' answers with :func:`training_memory_gb`)."""
from __future__ import annotations

from dataclasses import dataclass

#: bytes per parameter held on the GPUs, before activations (``"megatron_distopt"`` depends on the
#: data-parallel size d: see :func:`bytes_per_param`).
BYTES_PER_PARAM: dict[str, float] = {
    "bf16_weights": 2.0,   # inference / frozen weights
    "lora": 2.0,           # frozen bf16 base; adapters and their Adam states are ~1% extra
    "zero_adam": 16.0,     # ZeRO's count (Rajbhandari et al. 2019, §3.1): 16-bit weights 2 + 16-bit grads 2
                           # + fp32 master 4 + Adam m 4 + v 4
    "megatron_adam": 18.0,  # Megatron with --bf16: bf16 weights 2 + fp32 grads 4 + fp32 master 4 + m 4 + v 4
}
#: Where the counts come from.
MEMORY_SOURCES = (
    "Megatron-LM core_v0.16.1 docs/user-guide/features/dist_optimizer.md: bf16 parameters, fp32 gradients: "
    "18 bytes per parameter, 6 + 12/d with the distributed optimizer (d = data-parallel size)",
    "Megatron-LM core_v0.16.1 megatron/training/arguments.py: with --bf16, gradients are accumulated and "
    "all-reduced in fp32 unless --grad-reduce-in-bf16",
    "Rajbhandari et al., ZeRO (arXiv:1910.02054) §3.1: mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes",
)


def bytes_per_param(method: str, dp: int = 1) -> float:
    """Bytes per parameter one model replica holds, before activations.

    ``"megatron_distopt"``: Megatron's distributed optimizer shards the fp32 master weights and
    Adam's two moments over the ``dp`` data-parallel replicas: 6 + 12/dp (bf16 weights 2 + fp32
    gradients 4 stay whole). Example: dp=8 → 7.5. The other methods: :data:`BYTES_PER_PARAM`.
    """
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise ValueError(f"dp (the data-parallel size) must be an int ≥ 1, got {dp!r}")
    if method == "megatron_distopt":
        return 6.0 + 12.0 / dp
    if method not in BYTES_PER_PARAM:
        raise ValueError(f"method must be one of {sorted([*BYTES_PER_PARAM, 'megatron_distopt'])}, got {method!r}")
    return BYTES_PER_PARAM[method]


def training_memory_gb(n_params: float, method: str, dp: int = 1) -> float:
    """GPU memory in decimal GB (1e9 bytes) that one model replica needs for ``n_params`` parameters,
    before activations: n_params × :func:`bytes_per_param` / 1e9.

    ``method``: ``"bf16_weights"`` (2 B/param), ``"lora"`` (2 B/param base + 1% adapters trained
    with Megatron's Adam, 18 B/param), ``"zero_adam"`` (16, ZeRO's count), ``"megatron_adam"`` (18,
    Megatron with --bf16: fp32 gradients), ``"megatron_distopt"`` (6 + 12/dp). Example: 8e9
    parameters, ``"megatron_adam"`` → 144.0 GB.
    """
    per_param = bytes_per_param(method, dp)
    if n_params <= 0:
        raise ValueError(f"n_params must be positive, got {n_params!r}")
    total = n_params * per_param
    if method == "lora":
        total += 0.01 * n_params * BYTES_PER_PARAM["megatron_adam"]
    return total / 1e9


@dataclass(frozen=True)
class GpuTableRow:
    """One row of the 'GPU node requirements' table of the NeMo-on-Kubernetes guide (source 001)."""

    model: str
    n_params: float
    gpus: str
    gpu_memory_gb: float


#: The Kubernetes guide's table as printed there (model size, minimum GPUs, their total memory).
K8S_GUIDE_GPU_TABLE: tuple[GpuTableRow, ...] = (
    GpuTableRow("8B", 8e9, "1x A100 80GB", 80),
    GpuTableRow("13B", 13e9, "2x A100 80GB", 160),
    GpuTableRow("70B", 70e9, "8x A100 80GB", 640),
    GpuTableRow("405B", 405e9, "32x H100 80GB", 2560),
)


