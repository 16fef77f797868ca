"""The NeMo map of chapter 0: the data-path diagram every chapter fills in, and the memory
arithmetic that checks seed 001's GPU table (chapter 0)."""
from __future__ import annotations

from dataclasses import dataclass

#: (stage label, detail, chapter) in data-path order.
DATA_PATH: tuple[tuple[str, str, str], ...] = (
    ("raw text", "jsonl {\"text\": ...}", "data/"),
    ("tokenize", "SentencePiece / BPE\nonce, offline", "ch01"),
    ("binary index", ".bin + .idx\nmmap, random access", "ch02"),
    ("blend", "weighted domain mix\ndata_prefix", "ch03"),
    ("pack + mask", "fixed seq_length\nEOD boundaries", "ch04"),
    ("load → GPUs", "DP/TP/PP ranks\nNCCL collectives", "ch05"),
)


def draw_data_path(highlight: str | None = None, ax=None):
    """Draw the data path as a row of boxes; ``highlight`` ("ch02", ...) colours one stage.

    Returns the matplotlib Axes (the caller calls ``plt.show()``).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    if ax is None:
        _, ax = plt.subplots(figsize=(12, 2.2))
    n = len(DATA_PATH)
    width, gap = 1.75, 0.3
    for i, (label, detail, chapter) in enumerate(DATA_PATH):
        x = i * (width + gap)
        on = highlight is not None and chapter == highlight
        ax.add_patch(FancyBboxPatch((x, 0), width, 1.0, boxstyle="round,pad=0.04",
                                    facecolor="#76b900" if on else "#e8f0f8",
                                    edgecolor="#333333", linewidth=1.5 if on else 0.8))
        ax.text(x + width / 2, 0.72, label, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(x + width / 2, 0.33, detail, ha="center", va="center", fontsize=7)
        ax.text(x + width / 2, -0.18, chapter, ha="center", va="center", fontsize=8, color="#555555")
        if i < n - 1:
            ax.add_patch(FancyArrowPatch((x + width + 0.03, 0.5), (x + width + gap - 0.03, 0.5),
                                         arrowstyle="-|>", mutation_scale=12, color="#333333"))
    ax.set_xlim(-0.1, n * (width + gap) - gap + 0.1)
    ax.set_ylim(-0.35, 1.1)
    ax.axis("off")
    return ax


#: bytes per parameter held on the GPUs, before activations.
BYTES_PER_PARAM: dict[str, float] = {
    "bf16_weights": 2.0,   # inference / frozen weights
    "lora": 2.0,           # frozen bf16 base; adapters and their Adam states are ~1% extra
    "full_adam": 16.0,     # bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4
}


def training_memory_gb(n_params: float, method: str) -> float:
    """GPU memory in decimal GB (1e9 bytes) for ``n_params`` parameters, before activations.

    ``method``: ``"bf16_weights"`` (2 B/param), ``"lora"`` (2 B/param base + 1% adapters with
    Adam at 16 B/param), ``"full_adam"`` (16 B/param, mixed-precision Adam).
    """
    if method not in BYTES_PER_PARAM:
        raise ValueError(f"method must be one of {sorted(BYTES_PER_PARAM)}, got {method!r}")
    if n_params <= 0:
        raise ValueError(f"n_params must be positive, got {n_params!r}")
    total = n_params * BYTES_PER_PARAM[method]
    if method == "lora":
        total += 0.01 * n_params * BYTES_PER_PARAM["full_adam"]
    return total / 1e9


@dataclass(frozen=True)
class GpuTableRow:
    """One row of seed 001's 'GPU node requirements' table."""

    model: str
    n_params: float
    gpus: str
    gpu_memory_gb: float


#: Seed 001's table as printed there (model size, minimum GPUs, their total memory).
SEED_001_GPU_TABLE: tuple[GpuTableRow, ...] = (
    GpuTableRow("8B", 8e9, "1x A100 80GB", 80),
    GpuTableRow("13B", 13e9, "2x A100 80GB", 160),
    GpuTableRow("70B", 70e9, "8x A100 80GB", 640),
    GpuTableRow("405B", 405e9, "32x H100 80GB", 2560),
)
