"""Chapter 0's pictures: the data-path diagram every chapter fills in, and the GPU grid of a
parallel layout (chapter 0). Each draw function returns the Axes; the notebook calls ``plt.show()``."""
from __future__ import annotations

from labsupport.distributed.gpu_grid import megatron_coords

#: (stage label, detail, chapter) in data-path order.
DATA_PATH: tuple[tuple[str, str, str], ...] = (
    ("raw text", "jsonl {\"text\": ...}", "data/"),
    ("tokenize", "SentencePiece / BPE\nonce, offline", "ch01"),
    ("binary index", ".bin + .idx\nmmap, random access", "ch02"),
    ("blend", "weighted domain mix\ndata_prefix", "ch03"),
    ("pack + mask", "fixed seq_length\nEOD boundaries", "ch04"),
    ("load → GPUs", "DP/TP/PP ranks\nNCCL collectives", "ch05"),
    ("train", "YAML → tiny GPT\nexact resume", "ch06"),
)


def draw_data_path(highlight: str | None = None, ax=None):
    """Draw the data path as a row of boxes; ``highlight`` ("ch02", ...) colours one stage.

    Returns the matplotlib Axes (the caller calls ``plt.show()``).
    """
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

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


def draw_parallel_grid(layout, ax=None):
    """Every GPU of ``layout`` as a box, one row per node: colour = pipeline stage, hatch = DP replica,
    label = (tp, pp, dp) rank; outlines mark the TP groups. Returns the Axes (the caller calls plt.show())."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
    from matplotlib.patches import Rectangle  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    per_node = max(layout.gpus_per_node, 1)
    nodes = -(-layout.world_size // per_node)
    tp, pp, dp = layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1.3 * per_node + 1.8, 14), 0.95 * nodes + 1.0))
    stage_colours = plt.get_cmap("tab10")
    for rank in range(layout.world_size):
        t, p, d = megatron_coords(rank, tp, pp, dp)
        node, slot = divmod(rank, per_node)
        x, y = slot * 1.2, -node
        ax.add_patch(Rectangle((x, y), 1.0, 0.8, facecolor=stage_colours(p % 10), alpha=0.35 + 0.45 * (d % 2),
                               edgecolor="#333333", linewidth=0.6))
        ax.text(x + 0.5, y + 0.52, f"GPU {rank}", ha="center", va="center", fontsize=8, weight="bold")
        ax.text(x + 0.5, y + 0.22, f"tp{t} pp{p} dp{d}", ha="center", va="center", fontsize=7.5)
    for group in range(layout.world_size // tp):                 # outline each TP group
        first = group * tp
        for start in range(first, first + tp, per_node):          # a group may wrap onto the next node
            node, slot = divmod(start, per_node)
            width = min(first + tp, (node + 1) * per_node) - start
            ax.add_patch(Rectangle((slot * 1.2 - 0.07, -node - 0.07), width * 1.2 - 0.06, 0.94, fill=False,
                                   edgecolor="crimson" if layout.tp_spans_nodes else "black", linewidth=1.6))
        first_node, last_node = first // per_node, (first + tp - 1) // per_node
        if last_node > first_node:                                # bracket the nodes one TP group spans
            x = per_node * 1.2 + 0.05
            ax.plot([x, x + 0.15, x + 0.15, x], [-first_node + 0.85, -first_node + 0.85, -last_node - 0.05,
                                                 -last_node - 0.05], color="crimson", lw=1.6)
            ax.text(x + 0.25, (-first_node - last_node + 0.8) / 2,
                    f"TP group {group}:\n{last_node - first_node + 1} nodes",
                    ha="left", va="center", fontsize=8, color="crimson")
    for node in range(nodes):
        ax.text(-0.25, -node + 0.4, f"node {node}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.5, per_node * 1.2 + (1.6 if layout.tp_spans_nodes else 0))
    ax.set_ylim(-nodes + 0.6, 1.25)
    ax.axis("off")
    ax.set_title(f"{layout.world_size} GPUs = TP {tp} × PP {pp} × DP {dp}: boxes = TP groups, "
                 "colour = pipeline stage, shade = DP replica", fontsize=10)
    return ax


