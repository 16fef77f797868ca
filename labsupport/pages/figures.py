"""Pictures of chapter 2 (binary indexing) that take more than a few lines of matplotlib.

* :func:`draw_idx_into_bin` — the ``.idx`` arrays (lengths, pointers, document indices) with an
  arrow from each pointer to the bytes of the ``.bin`` it names.
* :func:`gpu_tokens_per_second` and :func:`draw_starvation` — tokens per second a GPU consumes
  for a model of N parameters (a model: 6·N + 12·L·d·T FLOPs per token at an MFU and a peak) against what one loader
  core delivers, and where the lines cross.

Each draw function returns the Axes; the notebook calls ``plt.show()``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: NVIDIA H100 SXM, bf16 Tensor Core, dense (the datasheet's 1,979 TFLOPS is "with sparsity").
H100_BF16_DENSE_TFLOPS = 989.0


#: (parameters, layers L, width d = heads × head size) of GPT-3's models (Brown et al. 2020, table 2.1: 125M–13B)
#: and Llama 2 70B (80 layers, hidden size 8192, its released config): the shapes the attention term needs.
MODEL_SHAPES: tuple[tuple[float, int, int], ...] = (
    (125e6, 12, 768), (350e6, 24, 1024), (1.3e9, 24, 2048), (6.7e9, 32, 4096), (13e9, 40, 5140), (70e9, 80, 8192))
#: Sequence length T of the GPU runs the starvation figure models (tokens), not the loader's ``seq_length``.
TRAIN_SEQ_LENGTH = 4096


def flops_per_token(n_params, *, seq_length: int = TRAIN_SEQ_LENGTH):
    """Training FLOPs per token, a model: 6·N + 12·L·d·T (FLOPs).

    PaLM's count (Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T, with H·Q = d): 6·N for the weight
    matrices (2·N forward, 4·N backward) plus the attention scores and their weighted sum over T positions.
    L and d are interpolated (log–log) between :data:`MODEL_SHAPES`, clamped outside them; no recomputation.
    """
    n = np.asarray(n_params, dtype=np.float64)
    log_n = np.log([shape[0] for shape in MODEL_SHAPES])
    layers = np.exp(np.interp(np.log(n), log_n, np.log([shape[1] for shape in MODEL_SHAPES])))
    width = np.exp(np.interp(np.log(n), log_n, np.log([shape[2] for shape in MODEL_SHAPES])))
    return 6.0 * n + 12.0 * layers * width * seq_length


def gpu_tokens_per_second(n_params, *, mfu: float = 0.4, peak_tflops: float = H100_BF16_DENSE_TFLOPS,
                          seq_length: int = TRAIN_SEQ_LENGTH):
    """Training tokens per second one GPU consumes (a model): mfu × peak / :func:`flops_per_token`.

    Example: N = 6.7e9 (L = 32, d = 4096), T = 4096, 40 % of 989 TFLOPS → 8.0 thousand tokens/s per GPU.
    """
    return mfu * peak_tflops * 1e12 / flops_per_token(n_params, seq_length=seq_length)


def crossing_params(loader_tokens_per_s: float, *, gpus: int = 1, mfu: float = 0.4,
                    peak_tflops: float = H100_BF16_DENSE_TFLOPS, seq_length: int = TRAIN_SEQ_LENGTH) -> float:
    """Model size N at which ``gpus`` GPUs consume exactly what the loader delivers; smaller
    models starve (the GPUs want more tokens than the loader makes). Bisection on log N in [1e5, 1e14]; NaN
    when even N = 1e5 consumes less than the loader delivers (the attention term bounds what a GPU eats)."""
    lo, hi = np.log(1e5), np.log(1e14)
    if gpus * gpu_tokens_per_second(1e5, mfu=mfu, peak_tflops=peak_tflops, seq_length=seq_length) < loader_tokens_per_s:
        return float("nan")
    for _ in range(200):          # consumption falls as N grows: keep the bracket around the crossing
        mid = 0.5 * (lo + hi)
        eats = gpus * gpu_tokens_per_second(np.exp(mid), mfu=mfu, peak_tflops=peak_tflops, seq_length=seq_length)
        lo, hi = (mid, hi) if eats > loader_tokens_per_s else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def draw_starvation(loaders: dict[str, float], *, mfu: float = 0.4, peak_tflops: float = H100_BF16_DENSE_TFLOPS,
                    gpus_per_node: int = 8, sizes: Sequence[float] = (125e6, 350e6, 1.3e9, 7e9, 13e9, 70e9), ax=None):
    """Tokens/s consumed by one GPU and by one node vs model size (log–log), with a horizontal line per
    loader (label → tokens/s on one core) and a marker where each loader line crosses the GPU line."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    if ax is None:
        _, ax = plt.subplots(figsize=(9.6, 4.8), layout="constrained")
    n = np.geomspace(min(sizes) / 1.5, max(sizes) * 1.5, 200)
    one = gpu_tokens_per_second(n, mfu=mfu, peak_tflops=peak_tflops)
    ax.plot(n, one, color="black", lw=2,
            label=f"one H100, a model ({mfu:.0%} of {peak_tflops:.0f} TFLOPS, 6N+12LdT FLOPs/token)")
    ax.plot(n, one * gpus_per_node, color="gray", lw=1.5, ls="--", label=f"one {gpus_per_node}-GPU node consumes")
    ax.scatter(sizes, gpu_tokens_per_second(np.array(sizes), mfu=mfu, peak_tflops=peak_tflops), color="black", zorder=3)
    for s in sizes:   # model sizes, on a white box so that a loader line passing behind never covers them
        label = f"{s / 1e9:g}B" if s >= 1e9 else f"{s / 1e6:g}M"
        ax.annotate(label, (s, gpu_tokens_per_second(s, mfu=mfu, peak_tflops=peak_tflops)), textcoords="offset points",
                    xytext=(5, 5), fontsize=9, zorder=4,
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.85))
    colours = ["tab:red", "tab:green", "tab:blue", "tab:purple"]
    for (label, rate), colour in zip(loaders.items(), colours):
        cross = crossing_params(rate, mfu=mfu, peak_tflops=peak_tflops)
        inside = n[0] <= cross <= n[-1]
        # the crossing goes into the legend entry (outside the plot), marked on the plot by a ring and a dotted line
        where = f" — crosses one GPU at N ≈ {cross / 1e6:,.0f}M (ring)" if inside else ""
        ax.axhline(rate, color=colour, lw=1.8, label=f"{label}: {rate:,.0f} tokens/s{where}")
        if inside:
            ax.axvline(cross, color=colour, lw=0.8, ls=":")
            ax.scatter([cross], [rate], s=90, facecolors="none", edgecolors=colour, linewidths=1.8, zorder=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model parameters N (log)")
    ax.set_ylabel("tokens per second (log)")
    ax.set_title("Where a GPU line is above a loader's line, the loader cannot keep up: the GPUs starve", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return ax


def draw_idx_into_bin(lengths: Sequence[int], pointers: Sequence[int], doc_index: Sequence[int],
                      tokens: Sequence[int], itemsize: int, ax=None):
    """The three ``.idx`` arrays above the ``.bin`` tokens, with an arrow from each pointer to the
    first byte of its sequence and brackets for the documents that ``doc_index`` groups."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
    from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    n_tok = len(tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(8.0, 0.62 * n_tok + 2.5), 4.2))
    colours = plt.get_cmap("tab10")
    seq_of_token = np.repeat(np.arange(len(lengths)), lengths)
    # .bin row: one box per token, coloured by sequence, byte offset under it
    for i, t in enumerate(tokens):
        s = int(seq_of_token[i])
        ax.add_patch(Rectangle((i, 0), 1, 0.8, facecolor=colours(s % 10), alpha=0.45, edgecolor="#333333"))
        ax.text(i + 0.5, 0.4, str(t), ha="center", va="center", fontsize=9)
        ax.text(i + 0.5, -0.22, str(i * itemsize), ha="center", va="center", fontsize=7, color="#555555")
    ax.text(-0.3, 0.4, ".bin tokens", ha="right", va="center", fontsize=10, weight="bold")
    ax.text(-0.3, -0.22, "byte", ha="right", va="center", fontsize=8, color="#555555")
    # .idx rows: lengths and pointers per sequence, placed over their sequence
    for s, (length, ptr) in enumerate(zip(lengths, pointers)):
        x = ptr / itemsize
        for row_y, value in ((2.9, length), (1.9, ptr)):
            ax.add_patch(Rectangle((x, row_y), max(length, 1) - 0.1, 0.7, facecolor=colours(s % 10), alpha=0.25,
                                   edgecolor="#333333"))
            ax.text(x + max(length, 1) / 2, row_y + 0.35, f"{value}", ha="center", va="center", fontsize=9)
        ax.add_patch(FancyArrowPatch((x + 0.3, 1.9), (x + 0.3, 0.85), arrowstyle="-|>", mutation_scale=12,
                                     color=colours(s % 10), lw=1.5))
    ax.text(-0.3, 3.25, "lengths (int32)", ha="right", va="center", fontsize=9)
    ax.text(-0.3, 2.25, "pointers (int64, bytes)", ha="right", va="center", fontsize=9)
    # documents: doc_index[k]..doc_index[k+1] are the sequences of document k
    starts = [p / itemsize for p in pointers] + [n_tok]
    for k in range(len(doc_index) - 1):
        a, b = int(doc_index[k]), int(doc_index[k + 1])
        x0 = starts[a] if a < len(pointers) else n_tok
        x1 = starts[b] if b < len(pointers) else n_tok
        y = 3.95 + 0.35 * (k % 2)
        if x1 > x0:
            ax.plot([x0 + 0.05, x0 + 0.05, x1 - 0.05, x1 - 0.05], [y - 0.1, y, y, y - 0.1], color="#333333", lw=1)
        else:
            ax.plot([x0], [y], marker="v", color="#333333")
        ax.text((x0 + x1) / 2, y + 0.12, f"doc {k}: seq {a}..{b - 1}" if b > a else f"doc {k}: empty",
                ha="center", va="bottom", fontsize=8)
    ax.text(-0.3, 4.1, f"doc_index {list(map(int, doc_index))}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-5.5, n_tok + 0.5)
    ax.set_ylim(-0.6, 4.8)
    ax.axis("off")
    return ax
