"""NCCL's tuner model, from its source: how NCCL picks an algorithm and a protocol (chapter 5;
chapter 0 prices TP collectives with it).

Read from NCCL 2.30.7 (tag ``v2.30.7-1``, commit 73cf112295c33aee2b895f329f592f2a9b4b0f97):

* ``src/init.cc`` — the names: algorithms ``Tree, Ring, CollNetDirect, CollNetChain, NVLS,
  NVLSTree, PAT``; protocols ``LL, LL128, Simple``.
* ``src/graph/tuning.cc`` — ``ncclTunerConstantsDefaults`` (base latencies and per-hop hardware
  latencies in µs, copied below) and ``ncclTopoTuneModel``, which fills a latency and a bandwidth
  for every (collective, algorithm, protocol) at communicator start-up; ``ncclTopoGetAlgoTime``:
  time = latency + bytes / bandwidth.
* ``src/enqueue.cc`` — ``topoGetAlgoInfo``: **per call** NCCL takes the (algorithm, protocol)
  with the smallest predicted time among those enabled (``NCCL_ALGO`` / ``NCCL_PROTO`` restrict
  the candidates; a tuner plugin may override). A release build logs each call's pick on rank 0
  with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`` (:data:`PICK_LOG`).

The bandwidths come from NCCL's topology search on the real machine, which cannot run here, so
this module models latencies only; callers supply bandwidth. This is NCCL's *model*, not a
measurement. Example: a ring all-reduce over 2 nodes of 8 GPUs, Simple protocol:
``ring_latency_us("all_reduce", 16, 2)`` = 8.4 + 28 × 3.4 + 2 × 14 = 131.6 µs, × 1.4 for a
large message (the "plateau effect" factor) — against ``tree_latency_us(16, 2)`` =
8.4 + 2 × (7 × 4.0 + 1 × 14) = 92.4 µs.
"""
from __future__ import annotations

import math
from labsupport.distributed.collectives import bus_factor

NCCL_VERSION = "2.30.7"
NCCL_COMMIT = "73cf112295c33aee2b895f329f592f2a9b4b0f97"
SOURCE = f"NCCL {NCCL_VERSION} (tag v2.30.7-1, commit {NCCL_COMMIT[:10]}), src/graph/tuning.cc"

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")

#: baseLatencies[algorithm][protocol], µs (tuning.cc, ncclTunerConstantsDefaults).
BASE_LATENCY_US = {
    "Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4),
    "CollNetDirect": (0, 0, 0), "CollNetChain": (0, 0, 0),
    "NVLS": (0, 0, 0), "NVLSTree": (0, 0, 0), "PAT": (8.0, 8.0, 8.0),
}
#: hwLatencies[link][algorithm][protocol], µs per hop (tuning.cc, ncclTunerConstantsDefaults).
HW_LATENCY_US = {
    "NVLINK": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "CollNetDirect": (0, 0, 3.7),
               "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 25), "NVLSTree": (0, 0, 25), "PAT": (0, 0, 4.0)},
    "PCI": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (0, 0, 3.7),
            "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 0), "NVLSTree": (0, 0, 0), "PAT": (0, 0, 4.0)},
    "NET": {"Tree": (5.0, 8.5, 14), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0, 0, 31),
            "CollNetChain": (0, 0, 30), "NVLS": (0, 0, 18), "NVLSTree": (0, 0, 20.9), "PAT": (0, 0, 14)},
}
#: The algorithms ``ncclTopoTuneModel`` gives a time for, per collective (its loop skips the others):
#: NVLS and NVLSTree run the Simple protocol only; PAT only with one GPU per node (``ncclPatEnable``);
#: NVLSTree only across nodes; CollNet needs a SHARP-capable network (``collnetEnable``).
COLLECTIVE_ALGORITHMS = {
    "Broadcast": ("Ring",), "Reduce": ("Ring",),
    "AllGather": ("Ring", "CollNetDirect", "NVLS", "PAT"),
    "ReduceScatter": ("Ring", "CollNetDirect", "NVLS", "PAT"),
    "AllReduce": ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"),
}
#: NVLS bandwidth efficiency on Hopper (tuning.cc ``nvlsEfficiency``; 0.74 on Blackwell, NVLS off before).
NVLS_EFFICIENCY_HOPPER = 0.85

#: The per-call log line of the pick, as each version prints it (``src/enqueue.cc``, rank 0 only, an
#: ``INFO(NCCL_TUNING, ...)`` — no TRACE build needed): the first release that prints it, its format, read at the tag.
#: Before 2.20.3 the line was commented out and only a TRACE build (``TRACE(NCCL_COLL, ...)``) showed the pick.
PICK_LOG = (
    ("2.20.3", "v2.20.3-1", "%ld Bytes -> Algo %d proto %d time %f"),
    ("2.24.3", "v2.24.3-1", "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"),
)

#: llMaxBws[GPU generation][0] (tuning.cc), GB/s: on one node, the cap on the LL protocol's bus bandwidth.
LL_MAX_BW_ONE_NODE_GBPS = {"Volta": 39.0, "Ampere": 87.7, "Hopper": 141.0, "Blackwell": 2 * 141.0}

#: Per-call network post overhead on an Intel x86 host, µs (getNetOverhead); ×3 for Simple.
NET_OVERHEAD_US = 1.0
#: tuning.cc's "plateau effect of ring": a multi-node Simple ring all-reduce of a large message
#: (≥ 64 bytes per channel and rank) has its latency × 1.4 on compute capability ≥ 8.0.
RING_PLATEAU_FACTOR = 1.4


def _hw(link: str, algorithm: str, protocol: str) -> float:
    return float(HW_LATENCY_US[link][algorithm][PROTOCOLS.index(protocol)])


def _check(n_ranks: int, n_nodes: int, protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if not (isinstance(n_ranks, int) and isinstance(n_nodes, int) and 1 <= n_nodes <= n_ranks
            and n_ranks % n_nodes == 0):
        raise ValueError(f"need 1 ≤ n_nodes ≤ n_ranks with the same GPUs per node, got n_ranks={n_ranks!r}, "
                         f"n_nodes={n_nodes!r}")


def ring_latency_us(collective: str, n_ranks: int, n_nodes: int, protocol: str = "Simple",
                    link: str = "NVLINK", large: bool = True) -> float:
    """NCCL's latency (µs) of one ring ``collective`` ("all_reduce", "all_gather", "reduce_scatter").

    As ``ncclTopoTuneModel`` computes it: base + (steps − inter-node steps) × intra-node hop +
    inter-node steps × network hop, steps = 2(n−1) for all_reduce and n−1 otherwise, inter-node
    steps 2(nodes−1) or nodes−1; a hop inside a node is at least the network post overhead when
    the ring leaves the node. ``large``: apply the multi-node plateau factor (all_reduce, Simple).
    The network's own adapter latency (``graph->latencyInter``) is taken as 0.
    """
    _check(n_ranks, n_nodes, protocol)
    if collective not in ("all_reduce", "all_gather", "reduce_scatter"):
        raise ValueError(f"collective must be all_reduce, all_gather or reduce_scatter, got {collective!r}")
    ar = collective == "all_reduce"
    steps = 2 * (n_ranks - 1) if ar else n_ranks - 1
    inter_steps = 0 if n_nodes == 1 else (2 * (n_nodes - 1) if ar else n_nodes - 1)
    intra = _hw(link, "Ring", protocol)
    if n_nodes > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    per_node = n_ranks // n_nodes
    inter = _hw("NET", "Tree" if per_node == 1 else "Ring", protocol)   # ppn = 1: the tree's network latency
    lat = BASE_LATENCY_US["Ring"][PROTOCOLS.index(protocol)] + (steps - inter_steps) * intra + inter_steps * inter
    if ar and large and protocol == "Simple" and n_nodes > 1:
        lat *= RING_PLATEAU_FACTOR
    return lat


def tree_latency_us(n_ranks: int, n_nodes: int, protocol: str = "Simple", link: str = "NVLINK") -> float:
    """NCCL's latency (µs) of a Tree all-reduce (Tree serves all-reduce only): base + 2 × ((GPUs per
    node − 1) × intra-node hop + log2(nodes) × network hop) — a chain inside each node, a tree of
    depth log2(nodes) across them, up and back down."""
    _check(n_ranks, n_nodes, protocol)
    per_node = n_ranks // n_nodes
    intra = _hw(link, "Tree", protocol)
    inter = _hw("NET", "Tree", protocol)
    log2_nodes = int(math.log2(n_nodes))          # NCCL's log2i: floor
    return BASE_LATENCY_US["Tree"][PROTOCOLS.index(protocol)] + 2 * ((per_node - 1) * intra + log2_nodes * inter)


def nvls_latency_us(n_nodes: int = 1) -> float:
    """NCCL's latency (µs) of an NVLS all-reduce (NVLink SHARP: the NVSwitch reduces; Simple only):
    one NVLink latency of 25 µs whatever the number of GPUs, plus one network hop across nodes
    (multi-node NVLS needs CollNet/SHARP; NVLSTree is the other multi-node form)."""
    lat = _hw("NVLINK", "NVLS", "Simple")
    return lat + (_hw("NET", "NVLS", "Simple") if n_nodes > 1 else 0.0)


def collective_seconds(collective: str, nbytes: float, n_ranks: int, n_nodes: int, busbw_GBps: float,
                       protocol: str = "Simple") -> float:
    """Predicted seconds of one ring collective in NCCL's form: latency + bytes on the bus / busbw.

    nbytes: S as nccl-tests counts it; the bus bytes are S × the busbw factor (2(n−1)/n for
    all_reduce, (n−1)/n for all_gather and reduce_scatter), which is how NCCL turns a bus
    bandwidth into an algorithm bandwidth (ratio nRanks / nsteps in ``ncclTopoTuneModel``)."""

    if busbw_GBps <= 0:
        raise ValueError(f"busbw_GBps must be > 0, got {busbw_GBps!r}")
    lat = ring_latency_us(collective, n_ranks, n_nodes, protocol) * 1e-6
    return lat + nbytes * bus_factor(collective, n_ranks) / (busbw_GBps * 1e9)


def ring_bus_bandwidth_GBps(busbw_GBps: float, protocol: str = "Simple", gpu: str = "Hopper") -> float:
    """NCCL's ring bus bandwidth (GB/s) on one node for ``protocol``, from the Simple protocol's ``busbw_GBps``.

    ``ncclTopoTuneModel``: LL gets half of it, capped at :data:`LL_MAX_BW_ONE_NODE_GBPS` (LL sends a flag
    with every 8 bytes); Simple keeps it. LL128's cap is per channel, which needs the channel count NCCL's
    topology search finds, so it is not modelled here.
    """
    if busbw_GBps <= 0:
        raise ValueError(f"busbw_GBps must be > 0, got {busbw_GBps!r}")
    if protocol == "Simple":
        return float(busbw_GBps)
    if protocol == "LL":
        if gpu not in LL_MAX_BW_ONE_NODE_GBPS:
            raise ValueError(f"gpu must be one of {tuple(LL_MAX_BW_ONE_NODE_GBPS)}, got {gpu!r}")
        return min(LL_MAX_BW_ONE_NODE_GBPS[gpu], busbw_GBps * 0.5)
    raise ValueError(f"protocol must be 'LL' or 'Simple' here (LL128 needs the channel count), got {protocol!r}")


def one_node_ring_all_reduce_us(nbytes: float, n_ranks: int, busbw_GBps: float, protocol: str = "Simple",
                                gpu: str = "Hopper") -> float:
    """NCCL's predicted time (µs) of a ring all-reduce of ``nbytes`` on ``n_ranks`` GPUs of one NVLink node.

    ``ncclTopoGetAlgoTime``: latency + nbytes / algorithm bandwidth, the algorithm bandwidth being the bus
    bandwidth × n / (2(n − 1)) (:func:`ring_bus_bandwidth_GBps`); bytes / (GB/s × 1000) is µs.
    """
    lat = ring_latency_us("all_reduce", n_ranks, 1, protocol)
    algbw = ring_bus_bandwidth_GBps(busbw_GBps, protocol, gpu) * n_ranks / (2 * (n_ranks - 1))
    return lat + nbytes / (algbw * 1e3)
