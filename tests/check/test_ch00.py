"""labsupport.check.ch00 q1: TP across nodes is legal (a warning), an indivisible layout is not."""
from __future__ import annotations

import warnings

from labsupport.check import ch00 as check


def correct(devices, num_nodes, tp, pp):
    world = devices * num_nodes
    if world % (tp * pp):
        raise ValueError("not divisible")
    if tp > devices:
        warnings.warn("TP across nodes")
    return world // (tp * pp)


def refuses_tp_across_nodes(devices, num_nodes, tp, pp):      # the old, wrong rule
    if tp > devices:
        raise ValueError("tp must stay in one node")
    return correct(devices, num_nodes, tp, pp)


def never_warns(devices, num_nodes, tp, pp):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return correct(devices, num_nodes, tp, pp)


def always_warns(devices, num_nodes, tp, pp):
    warnings.warn("always")
    return correct(devices, num_nodes, tp, pp)


def stub(*args):
    raise NotImplementedError("exercise")


def test_q1(capsys):
    assert check.q1(correct).passed
    result = check.q1(refuses_tp_across_nodes)
    assert not result.passed and result.mistake == "refuses_tp_across_nodes" and "only slow" in result.hint
    result = check.q1(never_warns)
    assert not result.passed and result.mistake == "never_warns" and "without a warning" in result.message
    result = check.q1(always_warns)         # caught at its first layout, inside a node or across nodes
    assert result.mistake in ("warns_inside_a_node", "warns_more_than_once"), result.message
    assert check.q1(lambda d, n, t, p: (d * n) // (t * p)).status == "failed"   # never raises
    assert check.q1(stub).status == "not attempted"


def dp_group(rank, tp, pp, dp):
    return [rank % tp + tp * (d + dp * (rank // (tp * dp))) for d in range(dp)]


def test_q3_transfer(capsys):
    assert check.q3(dp_group).passed

    def tp_slowest(rank, tp, pp, dp):        # the wrong rank order: DP fastest
        return [d + dp * (rank // dp % tp) + dp * tp * (rank // (dp * tp)) for d in range(dp)]

    def the_tp_group(rank, tp, pp, dp):      # the GPUs of the same TP group instead
        return [rank // tp * tp + t for t in range(tp)]

    for wrong, name in ((tp_slowest, "dp_varies_fastest"), (the_tp_group, "tensor_parallel_group")):
        result = check.q3(wrong)
        assert not result.passed and result.mistake == name, wrong.__name__
    assert check.q3(stub).status == "not attempted"
