"""Tests of chapter 5's collectives: the numpy ring, the cost model, the NCCL fact table and the
real torch.distributed process groups started by run_workers (gloo on CPU)."""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import psutil
import pytest

from labsupport.distributed import collectives as C
from labsupport.distributed import workers as W
from labsupport.distributed.nccl_facts import (FACTS_CHECKED, FACTS_SOURCE, GUIDE_NCCL_SCRIPT, NCCL_ENV_FACTS, STATUSES,
                                              fact_check_exports)
from labsupport.distributed.launch import WorkerError, WorkerTimeout, run_workers


# ----------------------------------------------------------------------------- numpy ring

@pytest.mark.parametrize("n", range(1, 10))
def test_simulated_ring_sums_and_follows_the_schedule(n):
    rng = np.random.default_rng(n)
    for size in (0, 1, n - 1, n, 3 * n + 2, 37):
        if size < 0:
            continue
        buffers = [rng.integers(-100, 100, size=size) for _ in range(n)]
        copies = [b.copy() for b in buffers]
        sim = C.simulate_ring_allreduce(buffers)
        total = np.sum(buffers, axis=0) if size else np.zeros(0, dtype=buffers[0].dtype)
        for r in range(n):
            np.testing.assert_array_equal(sim.results[r], total)
            np.testing.assert_array_equal(buffers[r], copies[r])  # inputs untouched
        assert len(sim.states) == 2 * (n - 1) + 1
        # after the reduce-scatter phase rank r holds the fully reduced chunk (r+1) mod n
        mid = n - 1
        for r in range(n):
            c = (r + 1) % n
            lo, hi = sim.bounds[c], sim.bounds[c + 1]
            np.testing.assert_array_equal(sim.states[mid][r][lo:hi], total[lo:hi])
            assert sim.contributors[mid][r][c] == tuple(range(n))
            if n > 2:  # and the chunk it is about to send next is not complete yet
                other = (r + 2) % n
                assert len(sim.contributors[mid][r][other]) < n
        assert all(sim.contributors[-1][r][c] == tuple(range(n)) for r in range(n) for c in range(n))
        if size % n == 0:
            nbytes = size * buffers[0].itemsize
            assert sim.bytes_sent == [2 * (n - 1) * nbytes // n] * n


def test_simulated_ring_floats_and_shapes():
    rng = np.random.default_rng(0)
    buffers = [rng.standard_normal((3, 5)) for _ in range(4)]
    sim = C.simulate_ring_allreduce(buffers)
    assert sim.results[0].shape == (3, 5)
    np.testing.assert_allclose(sim.results[2], np.sum(buffers, axis=0), rtol=1e-12)
    assert [sim.phase(t) for t in range(len(sim.states))] == ["input"] + ["reduce-scatter"] * 3 + ["all-gather"] * 3


def test_ring_schedule_each_rank_sends_and_receives_once_per_step():
    for n in range(2, 9):
        steps = C.ring_schedule(n)
        assert len(steps) == 2 * (n - 1)
        for step in steps:
            assert sorted(s for s, _, _ in step) == list(range(n))
            assert sorted(d for _, d, _ in step) == list(range(n))
            assert all(d == (s + 1) % n for s, d, _ in step)


def test_simulation_rejects_bad_buffers_naming_the_rank():
    with pytest.raises(ValueError, match=r"buffers\[2\] has shape \(5,\)"):
        C.simulate_ring_allreduce([np.zeros(4), np.zeros(4), np.zeros(5)])
    with pytest.raises(ValueError, match=r"buffers\[1\] has dtype int64"):
        C.simulate_ring_allreduce([np.zeros(4), np.zeros(4, dtype=np.int64)])
    with pytest.raises(ValueError, match="non-empty list"):
        C.simulate_ring_allreduce([])
    with pytest.raises(ValueError, match="n .* must be an int"):
        C.ring_schedule(0)


def test_ring_bytes_per_rank():
    assert C.ring_bytes_per_rank(800, 4) == 1200
    assert C.ring_bytes_per_rank(800, 4, "naive") == 2400
    assert C.ring_bytes_per_rank(800, 1) == 0
    with pytest.raises(ValueError, match="algorithm"):
        C.ring_bytes_per_rank(8, 2, "tree")


# ----------------------------------------------------------------------------- cost model

def test_bus_bandwidth_uses_nccl_tests_factors():
    assert C.bus_bandwidth("all_reduce", 1e9, 1.0, 4) == pytest.approx(1.5)
    assert C.bus_bandwidth("all_reduce", 1e9, 1.0, 8) == pytest.approx(1.75)
    assert C.bus_bandwidth("all_gather", 2e9, 2.0, 4) == pytest.approx(0.75)
    assert C.bus_bandwidth("reduce_scatter", 1e9, 0.5, 2) == pytest.approx(1.0)
    assert C.bus_bandwidth("broadcast", 3e9, 1.0, 16) == pytest.approx(3.0)
    assert C.bus_bandwidth("all_reduce", 1e9, 1.0, 1) == 0.0
    assert C.algo_bandwidth(5e8, 0.25) == pytest.approx(2.0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        n, s, t = int(rng.integers(1, 64)), float(rng.uniform(1, 1e10)), float(rng.uniform(1e-6, 10))
        assert C.bus_bandwidth("all_reduce", s, t, n) == pytest.approx(s / t / 1e9 * 2 * (n - 1) / n)


def _nccl_tests_alltoall_busbw(count: int, typesize: int, sec: float, nranks: int) -> float:
    """nccl-tests v2.19.6 (commit a0b82b22) src/alltoall.cu, AlltoAllGetBw, transcribed: count is the
    per-peer element count, baseBw = count·nranks·typesize / 1e9 / sec, busBw = baseBw·(nranks−1)/nranks."""
    base_bw = (count * nranks * typesize) / 1.0e9 / sec
    return base_bw * ((nranks - 1) / nranks)


def test_all_to_all_bus_factor_is_nccl_tests_definition():
    rng = np.random.default_rng(2)
    for _ in range(50):
        n, count, typesize = int(rng.integers(1, 200)), int(rng.integers(1, 1 << 24)), int(rng.choice([1, 2, 4, 8]))
        sec = float(rng.uniform(1e-6, 5.0))
        nbytes = count * n * typesize                  # S = one rank's whole send buffer
        assert C.bus_bandwidth("all_to_all", nbytes, sec, n) == pytest.approx(
            _nccl_tests_alltoall_busbw(count, typesize, sec, n), rel=1e-12)
    assert C.bus_factor("all_to_all", 8) == 7 / 8 and C.bus_factor("all_to_all", 1) == 0.0


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_all_to_all_transposes_the_rank_chunk_grid(n):
    rng = np.random.default_rng(n)
    buffers = [rng.integers(-99, 99, size=3 * n) for _ in range(n)]
    copies = [b.copy() for b in buffers]
    out = C.all_to_all(buffers)
    for dst in range(n):
        for src in range(n):
            assert np.array_equal(out[dst][3 * src:3 * src + 3], buffers[src][3 * dst:3 * dst + 3])
    assert all(np.array_equal(b, c) for b, c in zip(buffers, copies))
    assert all(np.array_equal(a, b) for a, b in zip(C.all_to_all(out), buffers))   # its own inverse


def test_all_to_all_and_dispatch_counts_reject_bad_input():
    with pytest.raises(ValueError, match="divides by n=2"):
        C.all_to_all([np.arange(3), np.arange(3)])
    with pytest.raises(ValueError, match="rank 1 routes a token to an expert outside 0 … 3"):
        C.moe_dispatch_counts([[0, 1], [4]], 2)
    assert C.moe_dispatch_counts([[0, 3, 3], [1, 2]], 2).tolist() == [[1, 2], [1, 1]]


def test_bus_bandwidth_rejects_bad_input_naming_the_field():
    with pytest.raises(ValueError, match="'allreduce' is not one of all_reduce"):
        C.bus_bandwidth("allreduce", 1, 1, 2)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        C.bus_bandwidth("all_reduce", 1, 0, 2)
    with pytest.raises(ValueError, match="nbytes must be"):
        C.bus_bandwidth("all_reduce", -1, 1, 2)
    with pytest.raises(ValueError, match="world_size must be an int"):
        C.bus_bandwidth("all_reduce", 1, 1, 0)


def test_alpha_beta_time_and_fit_recover_the_parameters():
    alpha, beta, n = 20e-6, 1 / 5e9, 8
    assert C.alpha_beta_time("all_reduce", 0, n, alpha, beta) == pytest.approx(14 * alpha)
    assert C.alpha_beta_time("all_gather", 8e6, n, alpha, beta) == pytest.approx(7 * alpha + 7 / 8 * 8e6 * beta)
    assert C.alpha_beta_time("broadcast", 1e6, n, alpha, beta) == pytest.approx(7 * alpha + 1e6 * beta)
    sizes = [2 ** k for k in range(10, 27, 2)]
    times = [C.alpha_beta_time("all_reduce", s, n, alpha, beta) for s in sizes]
    a, b = C.fit_alpha_beta("all_reduce", sizes, times, n)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)
    # busbw of the model tends to the link bandwidth 1/β
    big = 1e12
    assert C.bus_bandwidth("all_reduce", big, C.alpha_beta_time("all_reduce", big, n, alpha, beta), n) == \
        pytest.approx(1 / beta / 1e9, rel=1e-4)
    with pytest.raises(ValueError, match="same length"):
        C.fit_alpha_beta("all_reduce", [1, 2], [1.0], 2)


def test_training_traffic_bytes():
    cfg = dict(params=8e9, hidden=4096, layers=32, seq_len=4096, micro_batch=1, micro_batches=8, dp=8, tp=4, pp=2)
    rows = C.training_traffic(**cfg)
    by = {(r["parallelism"], r["collective"]): r for r in rows}
    grads = 8e9 / 8 * 4                     # fp32 gradients: Megatron's default with --bf16
    assert by[("DP", "all_reduce")]["bytes_per_rank"] == pytest.approx(2 * 7 / 8 * grads)
    bf16 = {(r["parallelism"], r["collective"]): r for r in C.training_traffic(**cfg, grad_bytes=2)}
    assert bf16[("DP", "all_reduce")]["bytes_per_rank"] == pytest.approx(by[("DP", "all_reduce")]["bytes_per_rank"] / 2)
    act = 4096 * 4096 * 2
    tp_total = by[("TP", "all_gather")]["bytes_per_rank"] + by[("TP", "reduce_scatter")]["bytes_per_rank"]
    # the same as 4 all-reduces per layer and micro-batch without sequence parallelism
    assert tp_total == pytest.approx(4 * 16 * 8 * 2 * 3 / 4 * act)
    # PP = 2: the first stage sends 8 activations (its 1/tp slice with sequence parallelism), the last 8 gradients
    pp_rows = {r["stage"]: r for r in rows if r["parallelism"] == "PP"}
    assert set(pp_rows) == {"first", "last"}
    for stage in ("first", "last"):
        assert pp_rows[stage]["ops_per_step"] == 8
        assert pp_rows[stage]["bytes_per_rank"] == pytest.approx(8 * act / 4)
        assert pp_rows[stage]["received_bytes"] == pytest.approx(8 * act / 4)
    no_sp = {r["stage"]: r for r in C.training_traffic(**cfg, sequence_parallel=False) if r["parallelism"] == "PP"}
    assert no_sp["first"]["bytes_per_rank"] == pytest.approx(8 * act)
    zero = C.training_traffic(**cfg, distributed_optimizer=True)
    # fp32 gradients reduce-scattered, bf16 parameters all-gathered: 3/4 of the all-reduce's bytes
    assert sum(r["bytes_per_rank"] for r in zero if r["parallelism"].startswith("DP")) == \
        pytest.approx(0.75 * by[("DP", "all_reduce")]["bytes_per_rank"])
    same = C.training_traffic(**cfg, distributed_optimizer=True, grad_bytes=2)
    assert sum(r["bytes_per_rank"] for r in same if r["parallelism"].startswith("DP")) == \
        pytest.approx(by[("DP", "all_reduce")]["bytes_per_rank"] / 2)
    with pytest.raises(ValueError, match="layers .* must divide by pp"):
        C.training_traffic(**{**cfg, "pp": 3})
    assert not [r for r in C.training_traffic(**{**cfg, "pp": 1}) if r["parallelism"] == "PP"]


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_pipeline_traffic_per_stage_bytes(pp):
    """First stage: activations out, gradients in; last: the opposite; interior: both ways."""
    m = 6
    cfg = dict(params=1e9, hidden=1024, layers=8 * pp, seq_len=1024, micro_batch=1, micro_batches=m,
               dp=1, tp=1, pp=pp, act_bytes=2)
    pp_rows = [r for r in C.training_traffic(**cfg) if r["parallelism"] == "PP"]
    msg = 1024 * 1024 * 2
    sent = {r["stage"]: r["bytes_per_rank"] for r in pp_rows}
    got = {r["stage"]: r["received_bytes"] for r in pp_rows}
    assert sent["first"] == got["first"] == m * msg
    assert sent["last"] == got["last"] == m * msg
    assert ("interior" in sent) == (pp > 2)
    if pp > 2:
        assert sent["interior"] == got["interior"] == 2 * m * msg
    # every boundary between stages carries m activations and m gradients: the stages' sends add up to that
    per_stage = [sent["first"]] + [sent.get("interior", 0)] * (pp - 2) + [sent["last"]]
    assert sum(per_stage) == 2 * m * (pp - 1) * msg
    assert C.pipeline_traffic(1, m, msg) == []


# ----------------------------------------------------------------------------- NCCL variables

def test_fact_check_covers_every_export_of_the_nccl_guide():
    rows = fact_check_exports(GUIDE_NCCL_SCRIPT)
    assert len(rows) == 21  # 18 NCCL_* (every one in the table) + 3 FI_*
    assert all(r["status"] in STATUSES for r in rows)
    by = {r["variable"]: r for r in rows}
    assert set(NCCL_ENV_FACTS) == {v for v in by if v.startswith("NCCL_")}
    assert by["NCCL_BUFFSIZE"]["value"] == "2097152" and "4194304" in by["NCCL_BUFFSIZE"]["fact"]
    assert by["NCCL_CHECKS_DISABLE"]["status"] == "obsolete"
    assert by["NCCL_ASYNC_ERROR_HANDLING"]["status"] == "PyTorch's"
    assert {v for v, r in by.items() if r["status"] == "does not exist"} == {
        "NCCL_ALGO_ALL", "NCCL_ALGO_TREE", "NCCL_COMM_BLOCKING_WAIT", "NCCL_COMM_WAIT_TIMEOUT"}
    assert by["NCCL_MIN_NCHANNELS"]["status"] == "deprecated" and "NCCL_MIN_CTAS" in by["NCCL_MIN_NCHANNELS"]["fact"]
    assert by["FI_PROVIDER"]["status"] == "not NCCL's"
    assert by["NCCL_ALGO"]["line"] == "4" and by["NCCL_ALGO"]["guide_says"].startswith("Ring")
    # NCCL's env.rst lists NCCL_IB_DISABLE under "Debugging"; the guide's BLOCKING_WAIT is NCCL_COMM_BLOCKING
    assert by["NCCL_IB_DISABLE"]["status"] == "exists, debug only" and "Debugging" in by["NCCL_IB_DISABLE"]["fact"]
    assert "NCCL_COMM_BLOCKING " in by["NCCL_COMM_BLOCKING_WAIT"]["fact"]
    assert "v2.30.7-1" in FACTS_SOURCE and FACTS_CHECKED.year >= 2026


def test_fact_check_reports_unknown_variables():
    rows = fact_check_exports("export NCCL_SOMETHING_NEW=1\nexport FOO=2  # bar\nnot an export\n")
    assert [(r["line"], r["variable"], r["status"]) for r in rows] == [("1", "NCCL_SOMETHING_NEW", "unchecked"),
                                                                       ("2", "FOO", "unchecked")]


# ----------------------------------------------------------------------------- real process groups

def _leftovers(before: set[int]) -> set[int]:
    """Children of this process (recursively) that were not there before, after a short grace."""
    for _ in range(40):
        now = {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
        extra = now - before
        if not extra:
            return set()
        time.sleep(0.05)
    return extra


def _pg_folders() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("labsupport-pg-")}


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """run_workers makes its folder with tempfile.mkdtemp: give it a temp dir no other process shares,
    so "nothing is left behind" cannot be spoiled by another run's folders on a shared machine."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def warm():
    """Start the forkserver once; returns the set of child pids that legitimately stay (it)."""
    run_workers(W.whoami, 1)
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_results_come_back_in_rank_order(warm):
    out = run_workers(W.whoami, 3)
    assert out == [{"rank": r, "world_size": 3, "backend": "gloo"} for r in range(3)]


def test_the_four_collectives_reproduce_the_nccl_guide(warm):
    out = run_workers(W.guide_collectives, 4)
    assert [o["all_reduce"]["after"] for o in out] == [[22, 26, 30]] * 4
    assert [o["all_gather"]["after"] for o in out] == [list(range(1, 9))] * 4
    assert [o["reduce_scatter"]["after"] for o in out] == [[52, 56], [60, 64], [68, 72], [76, 80]]
    assert [o["reduce_scatter"]["before"][0] for o in out] == [1, 9, 17, 25]
    assert [o["broadcast"]["after"] for o in out] == [[1, 2, 3, 4]] * 4
    assert [o["broadcast"]["before"] for o in out] == [[1, 2, 3, 4]] + [[0, 0, 0, 0]] * 3


@pytest.mark.parametrize("n", [2, 3, 4])
def test_gloo_all_to_all_single_equals_the_numpy_all_to_all(warm, n):
    out = run_workers(W.all_to_all_demo, n, (3,))
    want = C.all_to_all([np.array(o["before"]) for o in out])
    assert [o["after"] for o in out] == [w.tolist() for w in want]


def test_moe_dispatch_and_combine_over_gloo():
    routes = [[0, 3, 3, 1, 2], [2, 2, 0], [5, 4, 1, 0]]           # 3 ranks, 2 experts each
    out = run_workers(W.moe_dispatch_demo, 3, (routes, 2))
    counts = C.moe_dispatch_counts(routes, 2)
    assert [o["input_splits"] for o in out] == counts.tolist()
    assert [o["output_splits"] for o in out] == counts.T.tolist()
    assert out[1]["received"] == [1.0, 2.0, 4.0, 1000.0, 1001.0]   # rank 0's tokens 1, 2, 4; rank 1's 0, 1
    for r, o in enumerate(out):
        assert o["combined"] == [1000.0 * r + t + 0.5 for t in range(len(routes[r]))]


def test_guide_snippets_as_written_and_corrected(warm):
    rs = run_workers(W.guide_reduce_scatter_snippet, 4)
    assert all(isinstance(r["as_written"], str) and "RuntimeError" in r["as_written"] for r in rs)
    assert all(r["unsplit"] == [52, 56, 60, 64, 68, 72, 76, 80] for r in rs)
    assert [r["corrected"] for r in rs] == [[52, 56], [60, 64], [68, 72], [76, 80]]
    bc = run_workers(W.guide_broadcast_snippet, 3)
    assert bc[0]["as_written"] is not None and [b["as_written"] for b in bc[1:]] == [None, None]
    assert all(b["corrected"] == bc[0]["as_written"] for b in bc)
    st = run_workers(W.guide_all_gather_stats_snippet, 4)
    s = st[0]
    assert s["corrected"] == s["truth"]
    assert abs(s["as_written"]["std_of_stds"] - s["truth"]["std"]) > 1.0
    assert abs(s["as_written"]["mean"] - s["truth"]["mean"]) > 1.0
    ar = run_workers(W.guide_all_reduce_snippet, 2)
    assert all(a["max_diff_vs_mean"] < 1e-12 for a in ar) and ar[0]["first3"] == ar[1]["first3"]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_all_reduce_equals_dist_all_reduce(warm, n):
    numel = 1000 if n == 8 else 4 * n * 7 + (n == 3)   # divisible by n, except 85 on 3 ranks
    for dtype, seed in (("int64", 1), ("float64", 2), ("float32", 3)):
        out = run_workers(W.ring_vs_all_reduce, n, (numel, dtype, seed))
        S = out[0]["tensor_bytes"]
        for rank, o in enumerate(out):
            if dtype == "int64":
                assert o["ring"]["exact"] and o["naive"]["exact"], (n, rank)
            else:
                tol = 1e-12 if dtype == "float64" else 1e-4
                assert o["ring"]["max_abs_diff"] < tol and o["naive"]["max_abs_diff"] < tol, (n, rank, o)
            assert o["naive"]["bytes_sent"] == (n - 1) * S
        if numel % n == 0:
            assert all(o["ring"]["bytes_sent"] == 2 * (n - 1) * S // n for o in out)
        assert sum(o["ring"]["bytes_sent"] for o in out) == 2 * (n - 1) * S


@pytest.mark.parametrize("n,numel", [(3, 10), (4, 3), (6, 25)])
def test_ring_over_send_recv_matches_the_numpy_simulation(warm, n, numel):
    for phase in ("reduce_scatter", "all"):
        out = run_workers(W.ring_trace, n, (numel, "int64", 7, phase))
        sim = C.simulate_ring_allreduce([np.array(o["input"], dtype=np.int64) for o in out])
        state = sim.states[n - 1] if phase == "reduce_scatter" else sim.results
        for r, o in enumerate(out):
            assert o["output"] == state[r].tolist(), (phase, r)
        if phase == "all":
            assert [o["bytes_sent"] for o in out] == sim.bytes_sent


def test_a_raising_worker_is_named_and_nothing_is_left_behind(warm, private_tmp):
    folders = _pg_folders()
    with pytest.raises(WorkerError) as info:
        run_workers(W.fail_on_rank, 4, (2,), timeout=30)
    exc = info.value
    assert exc.rank == 2
    assert str(exc).startswith("rank 2 raised ValueError: rank 2 found a NaN")
    assert "workers.py" in str(exc) and "fail_on_rank" in exc.worker_traceback
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in exc.pids)
    assert _leftovers(warm) == set()
    assert _pg_folders() == folders


def test_a_dying_worker_is_named(warm):
    with pytest.raises(WorkerError, match=r"^rank 1 exited with code 3 before returning a result"):
        run_workers(W.exit_on_rank, 3, (1, 3), timeout=30)
    assert _leftovers(warm) == set()


def test_a_hanging_worker_times_out_naming_the_rank(warm, private_tmp):
    folders = _pg_folders()
    start = time.monotonic()
    with pytest.raises(WorkerTimeout) as info:
        # 8 s: under heavy load a shorter deadline can fire before every rank reached its place
        run_workers(W.hang_on_rank, 3, (1,), timeout=8)
    elapsed = time.monotonic() - start
    exc = info.value
    assert isinstance(exc, TimeoutError) and exc.ranks == [0, 1, 2]
    text = str(exc)
    assert "did not finish within 8 s" in text
    assert "rank 1: workers.py" in text and "in its own code (not in a collective)" in text
    assert "rank 0: workers.py" in text and "waiting in torch.distributed.all_reduce" in text
    # the deadline is the launcher's contract, not a speed claim: generous margin for a loaded machine
    assert elapsed < 8 + 15
    assert _leftovers(warm) == set()
    assert _pg_folders() == folders


def test_measure_all_reduce_and_worker_argument_errors(warm):
    seconds = C.measure_all_reduce(2, [1024, 65536], reps=[3, 2])
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    with pytest.raises(WorkerError, match=r"^rank \d raised ValueError: impl must be one of"):
        C.measure_all_reduce(2, [1024], impl="tree")
    medians = C.measure_all_reduce(2, [1024, 4096], reps=5, warmup=2, stat="median")
    assert len(medians) == 2 and all(s > 0 for s in medians)
    with pytest.raises(WorkerError, match="stat must be 'mean' or 'median'"):
        C.measure_all_reduce(2, [1024], stat="mode")
    with pytest.raises(WorkerError, match="phase must be 'all' or 'reduce_scatter'"):
        run_workers(W.ring_trace, 2, (4, "int64", 0, "gather"))


def _local_worker():  # pragma: no cover - never runs
    return 1


def test_functions_the_workers_cannot_import_are_refused():
    with pytest.raises(ValueError, match="importable module"):
        run_workers(lambda: 1, 2)

    def inner():
        return 1

    with pytest.raises(ValueError, match="importable module"):
        run_workers(inner, 2)
    _local_worker.__module__ = "__main__"
    with pytest.raises(ValueError, match=r"defined in __main__.*a notebook cell is not one"):
        run_workers(_local_worker, 2)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="world_size must be an int ≥ 1"):
        run_workers(W.whoami, 0)
    with pytest.raises(ValueError, match="backend must be one of"):
        run_workers(W.whoami, 2, backend="mpi")
    with pytest.raises(ValueError, match="timeout must be a positive"):
        run_workers(W.whoami, 2, timeout=0)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only message")
def test_nccl_without_gpu_says_so():
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA GPUs"):
        run_workers(W.whoami, 1, backend="nccl")


def test_worker_output_is_echoed_in_rank_order(warm, capsys):
    run_workers(W.print_rank_lines, 3, (2,))
    assert capsys.readouterr().out.splitlines() == [f"[rank {r}] line {i} of rank {r}"
                                                    for r in range(3) for i in range(2)]


def test_ring_figure_draws_every_send_as_an_arrow_in_legible_type():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.patches import FancyArrowPatch

    from labsupport.pages import collectives_plots as P

    n = 4
    fig = P.plot_ring_steps(C.simulate_ring_allreduce([np.ones(n)] * n))
    arrows = [p for ax in fig.axes for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 2 * (n - 1) * n                     # n sends in each of the 2(n−1) steps
    sizes = [t.get_fontsize() for ax in fig.axes if ax.get_visible()
             for t in ax.texts + ax.get_xticklabels() + ax.get_yticklabels() + [ax.title]]
    assert min(sizes) >= 8


def test_measure_local_add_reports_a_bandwidth_per_size():
    sizes = [1 << 12, 1 << 16]
    rates = C.measure_local_add(sizes, reps=2)
    assert len(rates) == 2 and all(np.isfinite(r) and r > 0 for r in rates)


def test_sweep_plot_draws_the_spread_band():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labsupport.pages import collectives_plots as P
    sizes = [1024, 4096, 16384]
    fig = P.plot_allreduce_sweep(sizes, [3e-4, 3.1e-4, 3.5e-4], 2, 1.5e-4, 1e-9,
                                 spread=([2e-4, 2.5e-4, 3e-4], [5e-4, 4e-4, 9e-4]))
    assert any("min–max" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    plt.close(fig)
