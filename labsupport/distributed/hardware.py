"""The one hardware profile the workbook prices communication with (chapters 0 and 5).

Chapter 0's cost of tensor parallelism across nodes, chapter 5's "time in TP collectives"
(exercise 5) and their checks all read :data:`H100_SXM_NODE`, so the same traffic is never
priced at two different link speeds. Every number names its source.

Units: bandwidths in decimal GB/s (1e9 bytes/s) **per direction**; compute in dense TFLOPS.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeProfile:
    """One GPU node: its GPUs, their NVLink, and the network adapters that leave the node.

    nvlink_GBps: one GPU's NVLink bandwidth, one direction. nic_GBps: one adapter, one direction.
    A ring that crosses nodes leaves each node through its adapters; NCCL puts different channels
    on different adapters, so a group that fills a node can use all ``nics_per_node`` of them.
    """

    name: str
    gpus_per_node: int
    nvlink_GBps: float
    nics_per_node: int
    nic_GBps: float
    bf16_dense_tflops: float
    sources: tuple[str, ...]

    def internode_busbw_GBps(self, group_gpus_per_node: int) -> float:
        """Bus bandwidth a ring gets across nodes when ``group_gpus_per_node`` of its GPUs sit on
        each node: the adapters of those GPUs (one per GPU on this node) carry all of the node's
        outgoing ring traffic, capped by one GPU's NVLink. Example (8 per node): min(450, 8 × 50) = 400."""
        if not 1 <= group_gpus_per_node <= self.gpus_per_node:
            raise ValueError(f"group_gpus_per_node must be in 1..{self.gpus_per_node}, got {group_gpus_per_node!r}")
        nics = self.nics_per_node * group_gpus_per_node / self.gpus_per_node
        return min(self.nvlink_GBps, nics * self.nic_GBps)


#: DGX H100-class node: 8 × H100 SXM on NVLink 4 / NVSwitch, 8 × 400 Gb/s InfiniBand NDR adapters.
H100_SXM_NODE = NodeProfile(
    name="H100 SXM node: 8 × H100 SXM, NVLink 4 (450 GB/s per GPU each way) + 8 × 400 Gb/s NICs (50 GB/s each)",
    gpus_per_node=8,
    nvlink_GBps=450.0,
    nics_per_node=8,
    nic_GBps=50.0,
    bf16_dense_tflops=989.0,
    sources=(
        "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM NVLink 900 GB/s (both directions together → 450 each way), "
        "BF16 Tensor Core 1,979 TFLOPS with sparsity → 989 dense",
        "NVIDIA DGX H100 User Guide, 'Network Modules': eight single-port ConnectX-7 400 Gb/s (50 GB/s) adapters "
        "for the compute fabric, one per GPU",
        "NCCL 2.30.7 docs/userguide/source/env.rst, NCCL_CROSS_NIC: with several NICs NCCL uses the same NIC "
        "(network rail) per ring/tree on every node; src/graph/tuning.cc: a ring's busBw = nChannels × per-channel bw",
    ),
)
