"""labsupport.distributed.nccl_tuning (NCCL 2.30.7's tuner model) and the hardware profile."""
from __future__ import annotations

import pytest

from labsupport.distributed import nccl_tuning as T
from labsupport.distributed.hardware import H100_SXM_NODE


def test_names_and_constants_as_in_nccl_2_30_7():
    assert T.ALGORITHMS == ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
    assert T.PROTOCOLS == ("LL", "LL128", "Simple")
    assert T.HW_LATENCY_US["NVLINK"]["Ring"] == (0.6, 1.9, 3.4)
    assert T.HW_LATENCY_US["NET"]["Ring"] == (2.7, 4.0, 14.0)
    assert T.BASE_LATENCY_US["Ring"][2] == 8.4 and T.BASE_LATENCY_US["Tree"][2] == 8.4
    assert "PAT" not in T.COLLECTIVE_ALGORITHMS["AllReduce"] and T.COLLECTIVE_ALGORITHMS["Broadcast"] == ("Ring",)


def test_ring_latency_follows_the_tuners_formula():
    # one node of 8: base + 7 NVLink hops (all_gather) or 14 (all_reduce)
    assert T.ring_latency_us("all_gather", 8, 1) == pytest.approx(8.4 + 7 * 3.4)
    assert T.ring_latency_us("all_reduce", 8, 1) == pytest.approx(8.4 + 14 * 3.4)
    # 2 nodes of 8: 2 of the 30 steps are network hops; large messages get the 1.4 plateau factor
    assert T.ring_latency_us("all_reduce", 16, 2, large=False) == pytest.approx(8.4 + 28 * 3.4 + 2 * 14)
    assert T.ring_latency_us("all_reduce", 16, 2) == pytest.approx(1.4 * (8.4 + 28 * 3.4 + 2 * 14))
    assert T.ring_latency_us("reduce_scatter", 16, 2) == pytest.approx(8.4 + 14 * 3.4 + 14)
    # LL on NVLink: the smallest per-hop latency
    assert T.ring_latency_us("all_reduce", 8, 1, "LL") == pytest.approx(6.6 + 14 * 0.6)


def test_tree_latency_is_log_depth_and_beats_the_ring_across_many_nodes():
    assert T.tree_latency_us(16, 2) == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14))
    steps = [T.tree_latency_us(8 * n, n) for n in (2, 4, 8, 16)]
    assert [b - a for a, b in zip(steps, steps[1:])] == pytest.approx([28.0, 28.0, 28.0])
    assert T.tree_latency_us(8, 1) > T.ring_latency_us("all_reduce", 8, 1)        # one node: the ring is cheaper
    assert T.tree_latency_us(8 * 64, 64) < T.ring_latency_us("all_reduce", 8 * 64, 64) / 10
    assert T.nvls_latency_us(1) == 25.0


@pytest.mark.parametrize("bad", [dict(n_ranks=8, n_nodes=3), dict(n_ranks=4, n_nodes=8), dict(n_ranks=8, n_nodes=0)])
def test_bad_layouts_are_refused(bad):
    with pytest.raises(ValueError, match="n_nodes"):
        T.ring_latency_us("all_reduce", **bad)


def test_bad_protocol_and_collective():
    with pytest.raises(ValueError, match="protocol"):
        T.ring_latency_us("all_reduce", 8, 1, "LL64")
    with pytest.raises(ValueError, match="collective"):
        T.ring_latency_us("broadcast", 8, 1)
    with pytest.raises(ValueError, match="busbw"):
        T.collective_seconds("all_reduce", 1e6, 8, 1, 0)


def test_collective_seconds_is_latency_plus_bus_bytes():
    t = T.collective_seconds("all_gather", 33.6e6, 8, 1, 450.0)
    assert t == pytest.approx((8.4 + 7 * 3.4) * 1e-6 + 33.6e6 * 7 / 8 / 450e9)


def test_one_hardware_profile():
    node = H100_SXM_NODE
    assert (node.gpus_per_node, node.nvlink_GBps, node.nics_per_node, node.nic_GBps) == (8, 450.0, 8, 50.0)
    assert node.internode_busbw_GBps(8) == 400.0 and node.internode_busbw_GBps(1) == 50.0
    assert node.sources and all(isinstance(s, str) for s in node.sources)
    with pytest.raises(ValueError, match="group_gpus_per_node"):
        node.internode_busbw_GBps(9)


def test_ll_halves_the_bandwidth_up_to_its_cap_and_wins_small_messages():
    """tuning.cc: Ring/LL busBw = min(llMaxBw, busBw × 0.5); Hopper one node: llMaxBw = 141 GB/s."""
    assert T.ring_bus_bandwidth_GBps(450.0, "LL") == 141.0 and T.ring_bus_bandwidth_GBps(200.0, "LL") == 100.0
    assert T.ring_bus_bandwidth_GBps(450.0, "Simple") == 450.0
    small = {p: T.one_node_ring_all_reduce_us(8 * 1024, 8, 450.0, p) for p in ("LL", "Simple")}
    assert small["LL"] == pytest.approx(6.6 + 14 * 0.6 + 8192 / (141.0 * 8 / 14 * 1e3))
    assert small["Simple"] == pytest.approx(8.4 + 14 * 3.4 + 8192 / (450.0 * 8 / 14 * 1e3))
    assert small["LL"] < small["Simple"] / 3                       # 8 KiB: NCCL's model picks LL
    big = {p: T.one_node_ring_all_reduce_us(2 ** 30, 8, 450.0, p) for p in ("LL", "Simple")}
    assert big["Simple"] < big["LL"]                               # 1 GiB: Simple
    with pytest.raises(ValueError, match="LL128"):
        T.ring_bus_bandwidth_GBps(450.0, "LL128")
    with pytest.raises(ValueError, match="gpu"):
        T.ring_bus_bandwidth_GBps(450.0, "LL", gpu="Pascal")


def test_the_pick_log_is_dated_by_release():
    assert [v for v, *_ in T.PICK_LOG] == ["2.20.3", "2.24.3"]
    assert all(tag == f"v{v}-1" and "Bytes -> Algo" in fmt for v, tag, fmt in T.PICK_LOG)
