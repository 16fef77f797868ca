"""The GPU grid of chapter 0: where each global rank sits in Megatron-Core's (TP, PP, DP) order,
what tensor parallelism across nodes costs per step, and :func:`check_layout`, the book config's
layout with a warning when its TP group leaves a node (chapter 0; the checks of chapter 0 compare
learners' answers with :func:`megatron_coords`; chapter 0's page draws the grid with
:func:`labsupport.pages.orientation_figures.draw_parallel_grid`)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from omegaconf import DictConfig

from labsupport.config import ParallelLayout, parallel_layout
from labsupport.distributed import collectives as C
from labsupport.distributed import nccl_tuning as T
from labsupport.distributed.hardware import H100_SXM_NODE


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
    ``compute_s`` = (6·N + 12·L·d·T)·tokens / (TP·PP) FLOPs at ``mfu`` × the node's dense bf16 peak: the
    weight matrices and attention's scores and weighted sum (PaLM's count, the model chapter 2's figure uses).
    N = 12·layers·hidden² + vocab·hidden (blocks + embedding), as in chapter 5.
    """
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
    flops_per_token = 6 * params + 12 * layers * h * seq
    compute = flops_per_token * tokens / (tp * pp) / (mfu * node.bf16_dense_tflops * 1e12)
    return TpCost(sum(r["bytes_per_rank"] for r in tp_rows), ops, nodes, busbw, latency, bandwidth, nvlink,
                  compute, tokens)


def check_layout(cfg: DictConfig) -> ParallelLayout:
    """:func:`labsupport.config.parallel_layout` plus a warning when TP spans nodes.

    Megatron-Core accepts TP wider than a node (``initialize_model_parallel`` checks only that
    TP × PP × CP divides the world), so this is a :class:`TensorParallelAcrossNodesWarning`, not an
    error; the message gives the cost from :func:`tp_step_cost`. Returns the ``ParallelLayout``.
    """
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
