"""The NeMo map of chapter 0: the data-path diagram every chapter fills in, the parallel layout
of the book's config (and what tensor parallelism across nodes costs), and the memory arithmetic
that checks the GPU table of the NeMo-on-Kubernetes guide (source 001) (chapter 0)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

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


# ----------------------------------------------------------------------------- the GPU grid

def megatron_coords(rank: int, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    """(tp_rank, pp_rank, dp_rank) of global ``rank`` in Megatron-Core's default rank order.

    ``parallel_state.initialize_model_parallel(order="tp-cp-ep-dp-pp")``: TP varies fastest, then
    DP, then PP (CP = EP = 1 here), so rank = tp_rank + tp·(dp_rank + dp·pp_rank). With TP ≤ GPUs
    per node each TP group is consecutive ranks — one node's NVLink. Example (TP 8, PP 2, DP 2):
    rank 13 → (5, 0, 1); rank 16 → (0, 1, 0).
    """
    world = tp * pp * dp
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}) for tp={tp} × pp={pp} × dp={dp}, got {rank}")
    return rank % tp, rank // (tp * dp), (rank // tp) % dp


def draw_parallel_grid(layout, ax=None):
    """Every GPU of ``layout`` as a box, one row per node: colour = pipeline stage, hatch = DP replica,
    label = (tp, pp, dp) rank; outlines mark the TP groups. Returns the Axes (the caller calls plt.show())."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

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
            ax.text(x + 0.25, (-first_node - last_node + 0.8) / 2, f"TP group {group}:\n{last_node - first_node + 1} nodes",
                    ha="left", va="center", fontsize=8, color="crimson")
    for node in range(nodes):
        ax.text(-0.25, -node + 0.4, f"node {node}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.5, per_node * 1.2 + (1.6 if layout.tp_spans_nodes else 0))
    ax.set_ylim(-nodes + 0.6, 1.25)
    ax.axis("off")
    ax.set_title(f"{layout.world_size} GPUs = TP {tp} × PP {pp} × DP {dp}: boxes = TP groups, "
                 "colour = pipeline stage, shade = DP replica", fontsize=10)
    return ax


# ----------------------------------------------------------------------------- TP across nodes

#: The batch behind the TP cost: one sequence per micro-batch, 8 micro-batches per step and replica.
MICRO_BATCH, MICRO_BATCHES = 1, 8
#: Model FLOPs utilisation assumed for the compute the TP traffic competes with.
MFU = 0.4


class TensorParallelAcrossNodesWarning(UserWarning):
    """The config's TP group spans nodes: legal in Megatron-Core, but TP traffic leaves NVLink."""


@dataclass(frozen=True)
class TpCost:
    """Seconds per training step that one rank spends in tensor-parallel collectives — NCCL's model
    (ring, Simple protocol) on :data:`labsupport.distributed.hardware.H100_SXM_NODE`, not a measurement."""

    tp_bytes_per_rank: float      # bytes sent per rank per step (chapter 5's traffic table)
    ops_per_step: int             # TP collectives per step
    nodes: int                    # nodes one TP group spans
    busbw_GBps: float             # the ring's bus bandwidth where the group sits
    latency_s: float              # NCCL's per-call latency × ops
    bandwidth_s: float            # bus bytes / busbw
    nvlink_s: float               # the same collectives if the group sat on one node's NVLink
    compute_s: float              # the step's matrix maths on that rank, for scale
    tokens_per_step: int          # one replica's tokens per step: micro_batch × micro_batches × seq

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bandwidth_s

    @property
    def slowdown(self) -> float:
        return self.seconds / self.nvlink_s


def tp_step_cost(cfg, layout, *, micro_batch: int = MICRO_BATCH, micro_batches: int = MICRO_BATCHES,
                 mfu: float = MFU, vocab: int = 32000, node=None) -> TpCost:
    """TP's cost per step for ``cfg``'s model (hidden_size, num_layers, data.seq_length) on ``layout``.

    Bytes and counts: chapter 5's :func:`~labsupport.distributed.collectives.training_traffic`
    (sequence parallelism: per layer and micro-batch 4 all-gathers + 4 reduce-scatters of the
    ``micro_batch × seq × hidden`` bf16 activation). Time per collective: NCCL 2.30's model
    (:func:`labsupport.distributed.nccl_tuning.collective_seconds`): its ring latency (per-hop
    3.4 µs on NVLink, 14 µs on the network, Simple protocol) + bus bytes / busbw, busbw = one
    GPU's NVLink inside a node, and across nodes the NICs of the group's GPUs on a node (NCCL puts
    channels on different NICs: min(450, 8 × 50) = 400 GB/s for a group that fills its nodes).
    ``compute_s`` = 6·N·tokens / (TP·PP) FLOPs at ``mfu`` × the node's dense bf16 peak.
    N = 12·layers·hidden² + vocab·hidden (blocks + embedding), as in chapter 5.
    """
    from labsupport.distributed import collectives as C
    from labsupport.distributed import nccl_tuning as T
    from labsupport.distributed.hardware import H100_SXM_NODE

    node = H100_SXM_NODE if node is None else node
    h, layers, seq = int(cfg.model.hidden_size), int(cfg.model.num_layers), int(cfg.data.seq_length)
    tp, pp, dp = layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel
    params = 12 * layers * h * h + vocab * h
    rows = C.training_traffic(params=params, hidden=h, layers=layers, seq_len=seq, micro_batch=micro_batch,
                              micro_batches=micro_batches, dp=dp, tp=tp, pp=pp)
    tp_rows = [r for r in rows if r["parallelism"] == "TP"]
    nodes = layout.tp_nodes
    per_node = -(-tp // nodes)
    busbw = node.nvlink_GBps if nodes == 1 else node.internode_busbw_GBps(min(per_node, node.gpus_per_node))
    ops = sum(r["ops_per_step"] for r in tp_rows)
    latency = sum(r["ops_per_step"] * T.ring_latency_us(r["collective"], tp, nodes) * 1e-6 for r in tp_rows)
    bandwidth = sum(r["ops_per_step"] * r["message_bytes"] * C.bus_factor(r["collective"], tp) for r in tp_rows) \
        / (busbw * 1e9)
    nvlink = sum(r["ops_per_step"] * T.collective_seconds(r["collective"], r["message_bytes"], tp, 1, node.nvlink_GBps)
                 for r in tp_rows)
    tokens = micro_batch * micro_batches * seq                    # one DP replica's tokens per step
    compute = 6 * params * tokens / (tp * pp) / (mfu * node.bf16_dense_tflops * 1e12)
    return TpCost(sum(r["bytes_per_rank"] for r in tp_rows), ops, nodes, busbw, latency, bandwidth, nvlink,
                  compute, tokens)


def check_layout(cfg):
    """:func:`labsupport.config.parallel_layout` plus a warning when TP spans nodes.

    Megatron-Core accepts TP wider than a node (``initialize_model_parallel`` checks only that
    TP × PP × CP divides the world), so this is a :class:`TensorParallelAcrossNodesWarning`, not an error; the message gives the cost from
    :func:`tp_step_cost`. Returns the ``ParallelLayout``.
    """
    from labsupport.config import parallel_layout

    layout = parallel_layout(cfg)
    if layout.tp_spans_nodes:
        cost = tp_step_cost(cfg, layout)
        warnings.warn(TensorParallelAcrossNodesWarning(
            f"model.tensor_model_parallel_size={layout.tensor_parallel} > trainer.devices={layout.gpus_per_node}: "
            f"each TP group spans {layout.tp_nodes} nodes. Legal in Megatron-Core, but TP sends "
            f"{cost.tp_bytes_per_rank / 1e9:.1f} GB per GPU per step inside every layer, now over the network: "
            f"{cost.seconds:.2f} s per step in NCCL's model ({cost.busbw_GBps:.0f} GB/s over the nodes' NICs, "
            f"14 µs per network hop) vs {cost.nvlink_s:.2f} s on NVLink, against {cost.compute_s:.2f} s of compute, "
            f"before DP and PP traffic share those NICs. Keep TP ≤ trainer.devices; use PP or DP across nodes."),
            stacklevel=2)
    return layout
