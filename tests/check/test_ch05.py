"""labsupport.check.ch05: each check passes a correct answer, fails plausible mistakes and
hard-coded answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

import numpy as np

from labsupport.distributed import collectives as C
from labsupport.check import _core, ch05 as check


def stub(*args):
    raise NotImplementedError("exercise")


def ring_reduce_scatter(buffers):
    n = len(buffers)
    chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
    for s in range(n - 1):
        sends = [(r, (r - s) % n, chunks[r][(r - s) % n].copy()) for r in range(n)]
        for src, c, data in sends:
            chunks[(src + 1) % n][c] += data
    return chunks


def test_q1_reduce_scatter_phase(capsys):
    assert check.q1(ring_reduce_scatter).passed

    def from_the_simulation(buffers):  # another correct route: the reference's own state
        sim = C.simulate_ring_allreduce(buffers)
        return [[sim.states[len(buffers) - 1][r][sim.bounds[c]:sim.bounds[c + 1]] for c in range(len(buffers))]
                for r in range(len(buffers))]

    def in_place(buffers):  # correct too: within a step no chunk is both sent and received
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n - 1):
            for r in range(n):
                chunks[(r + 1) % n][(r - s) % n] += chunks[r][(r - s) % n]
        return chunks

    def one_step_too_many(buffers):
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n):
            for r in range(n):
                chunks[(r + 1) % n][(r - s) % n] += chunks[r][(r - s) % n]
        return chunks

    def plus_s(buffers):  # sends chunk (r + s) instead of (r − s)
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n - 1):
            sends = [(r, (r + s) % n, chunks[r][(r + s) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                chunks[(src + 1) % n][c] += data
        return chunks

    def wrong_direction(buffers):  # sends to r−1
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n - 1):
            sends = [(r, (r - s) % n, chunks[r][(r - s) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                chunks[(src - 1) % n][c] += data
        return chunks

    def full_sums(buffers):  # skips the ring: every chunk fully reduced everywhere
        n = len(buffers)
        total = np.sum(buffers, axis=0)
        return [list(np.array_split(total, n)) for _ in range(n)]

    def mutating(buffers):
        out = ring_reduce_scatter(buffers)
        buffers[0] += 1
        return out

    assert check.q1(from_the_simulation).passed
    assert check.q1(in_place).passed
    for wrong in (one_step_too_many, plus_s, wrong_direction, full_sums, mutating):
        assert check.q1(wrong).status == "failed", wrong.__name__
    assert check.q1(stub).status == "not attempted"
    assert "hint:" in capsys.readouterr().out


def test_q2_busbw():
    assert check.q2(C.bus_bandwidth).passed
    algbw = lambda coll, s, t, n: s / t / 1e9
    bytes_per_s = lambda coll, s, t, n: C.bus_bandwidth(coll, s, t, n) * 1e9
    gib = lambda coll, s, t, n: C.bus_bandwidth(coll, s, t, n) * 1e9 / 2 ** 30
    all_reduce_factor_everywhere = lambda coll, s, t, n: s / t / 1e9 * 2 * (n - 1) / n
    hard_coded = lambda coll, s, t, n: 1.75
    for wrong in (algbw, bytes_per_s, gib, all_reduce_factor_everywhere, hard_coded):
        assert check.q2(wrong).status == "failed"
    assert check.q2(stub).status == "not attempted"
    # a wrong bus factor is named as the factor it is, not called algbw
    _core.reset()                                             # the loop above already made this mistake
    result = check.q2(all_reduce_factor_everywhere)          # right for all_reduce, wrong for all_gather
    assert result.tier == 1 and "factor is" not in result.hint
    assert result.mistake == "wrong_factor" and "all_gather" in result.message
    assert "algbw × 1.5 — all_reduce's factor on 4 ranks" in result.message
    assert check.q2(all_reduce_factor_everywhere).hint == ("busbw = algbw × factor, and all_gather's factor is "
                                                           "(n−1)/n (0.75 on 4 ranks).")      # the fix, on a repeat
    one_rank = check.q2(algbw)
    assert one_rank.mistake == "one_rank" and "on a single rank no byte crosses a link" in one_rank.message
    only_n_gt_1 = lambda coll, s, t, n: 0.0 if n == 1 else algbw(coll, s, t, n)
    result = check.q2(only_n_gt_1)
    assert result.mistake == "wrong_factor" and "algbw itself, with no bus factor" in result.message
    assert "(algbw itself) =" not in result.message           # #24: no more "algbw × 1 (algbw itself) = 2(n−1)/n"


GOOD_Q3 = {"dp_gradients": "all_reduce", "tp_row_parallel_output": "all_reduce", "tp_sp_enter": "all_gather",
           "tp_sp_exit": "reduce_scatter", "zero_gradients": "reduce_scatter", "zero_parameters": "all_gather",
           "initial_weights": "broadcast", "pp_activations": "send/recv", "zero_bytes_ratio": 1.0,
           "why": "all-reduce is reduce-scatter then all-gather, the same bytes in total."}


def test_q3_choose_collectives(capsys):
    result = check.q3(lambda: dict(GOOD_Q3))
    assert result.passed and "why" in result.manual
    for change in ({"zero_gradients": "all_reduce"}, {"pp_activations": "broadcast"}, {"zero_bytes_ratio": 2.0},
                   {"tp_sp_exit": "allreduce"}, {"why": ""}):
        assert check.q3(lambda: {**GOOD_Q3, **change}).status == "failed", change
    missing = dict(GOOD_Q3)
    del missing["tp_sp_enter"]
    assert check.q3(lambda: missing).status == "failed"
    assert check.q3(stub).status == "not attempted"
    capsys.readouterr()


def test_q4_global_std():
    def correct(stats):
        n, s, ss = np.asarray(stats, dtype=float).sum(axis=0)
        mean = s / n
        return mean, np.sqrt((ss - n * mean ** 2) / (n - 1))

    def std_of_stds(stats):  # the seed's approach, on per-rank mean/std rebuilt from the rows
        stats = np.asarray(stats, dtype=float)
        means = stats[:, 1] / stats[:, 0]
        stds = np.sqrt((stats[:, 2] - stats[:, 0] * means ** 2) / (stats[:, 0] - 1))
        return means.mean(), stds.std(ddof=1) if len(stds) > 1 else stds[0]

    def population(stats):
        n, s, ss = np.asarray(stats, dtype=float).sum(axis=0)
        mean = s / n
        return mean, np.sqrt(ss / n - mean ** 2)

    def mean_of_means(stats):
        stats = np.asarray(stats, dtype=float)
        return float(np.mean(stats[:, 1] / stats[:, 0])), correct(stats)[1]

    assert check.q4(correct).passed
    for wrong in (std_of_stds, population, mean_of_means, lambda stats: (19.67, 10.32)):
        assert check.q4(wrong).status == "failed"
    assert check.q4(stub).status == "not attempted"


def test_q1_checks_the_first_step_alone_when_asked():
    def with_steps(buffers, steps=None):
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n - 1 if steps is None else steps):
            sends = [(r, (r - s) % n, chunks[r][(r - s) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                chunks[(src + 1) % n][c] += data
        return chunks

    def first_step_wrong(buffers, steps=None):   # sends chunk r+1 in every step
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range(n - 1 if steps is None else steps):
            sends = [(r, (r + 1 - s) % n, chunks[r][(r + 1 - s) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                chunks[(src + 1) % n][c] += data
        return chunks

    assert check.q1(with_steps).passed
    result = check.q1(first_step_wrong)
    assert result.status == "failed" and "after 1 step (steps=1)" in result.message and result.mistake == "wrong_chunk"


def test_q5_comm_seconds_per_step():
    def right(collective, nbytes, ops, group, busbw):
        return ops * nbytes * C.bus_factor(collective, group) / (busbw * 1e9)

    assert check.q5(right).passed
    no_factor = check.q5(lambda c, s, o, n, b: o * s / (b * 1e9))
    assert no_factor.mistake == "no_bus_factor" and "only its S bytes on the bus" in no_factor.message
    one_op = check.q5(lambda c, s, o, n, b: right(c, s, 1, n, b))
    assert one_op.mistake == "one_operation" and "the bus bytes of ONE all_reduce" in one_op.message
    assert check.q5(lambda c, s, o, n, b: right(c, s, o, n, b) * 1e9).status == "failed"
    assert check.q5(stub).status == "not attempted"


def test_q2_hint_is_tiered(capsys):
    """First failure: a nudge, second: the idea, both without the formula; from the third on: the formula."""
    hard_coded = lambda coll, nbytes, seconds, n: 1.75 if n > 1 else 0.0     # no mistake the check names
    first, second, third = check.q2(hard_coded), check.q2(hard_coded), check.q2(hard_coded)
    assert first.status == second.status == third.status == "failed" and not first.mistake
    assert "2(n−1)/n" not in first.hint and "2(n−1)/n" not in second.hint and "2(n−1)/n" in third.hint
    out = capsys.readouterr().out
    assert out.count("hint:") == 3


def all_to_all(buffers):
    n = len(buffers)
    chunks = [np.split(np.asarray(b), n) for b in buffers]
    return [np.concatenate([chunks[src][dst] for src in range(n)]) for dst in range(n)]


def test_q6_all_to_all(capsys):
    assert check.q6(all_to_all).passed
    assert check.q6(C.all_to_all).passed
    for wrong, name in ((lambda b: [np.asarray(x).copy() for x in b], "returned_input"),
                        (lambda b: [np.split(np.asarray(x), len(b))[r] for r, x in enumerate(b)], "own_chunk_only"),
                        (lambda b: [np.concatenate(b) for _ in b], "all_gathered")):
        result = check.q6(wrong)
        assert (result.status, result.mistake) == ("failed", name), result.message
        assert "all_to_all([[0, 1], [10, 11]])" in result.message           # shown on the smallest case
    reversed_order = check.q6(lambda b: [np.concatenate([np.split(x, len(b))[j] for x in b[::-1]])
                                         for j in range(len(b))])
    assert reversed_order.status == "failed" and not reversed_order.mistake
    assert "chunk 0 of each rank, in rank order" in reversed_order.message
    assert check.q6(lambda b: [all_to_all(b)[0]] * len(b)).status == "failed"   # right for rank 0 only

    def in_place(buffers):
        buffers[0][...] = 0
        return all_to_all(buffers)

    assert "changed the input buffers" in check.q6(in_place).message
    assert check.q6(stub).status == "not attempted"
    _core.reset()
    capsys.readouterr()
