"""Exercise checks of chapter 5 (NCCL collectives): ``from labsupport.check import ch05 as check``.

q1 the reduce-scatter phase of the ring · q2 busbw from a measured time · q3 which collective for DP, TP and
ZeRO · q4 the NCCL guide's "global std" snippet, corrected · q5 the time a TP group spends in its collectives
per step, from the chapter's traffic table and a busbw (transfer) · q6 all-to-all from scratch (MoE token
dispatch).  Each check compares the learner's function
with ``labsupport.distributed.collectives`` on fresh random inputs; the mistakes it names are :data:`RULES`.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from labsupport.distributed import collectives as C
from labsupport.distributed.hardware import H100_SXM_NODE
from labsupport.check._core import chapter_summary, check, check_seed, expect, plain, Sealed, short
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import Rule, Rules, explain

CHAPTER = "ch05"
TEXTS = load_texts(CHAPTER)
summary = chapter_summary(CHAPTER)

#: The scenario keys of q3 and the allowed answers.
SCENARIOS = {
    "dp_gradients": "data parallel: make every replica's gradients the average of all replicas'",
    "tp_row_parallel_output": "tensor parallel without sequence parallelism: sum the partial outputs of a "
                              "row-parallel linear layer so every TP rank has the full result",
    "tp_sp_enter": "tensor + sequence parallel: each rank holds a slice of the sequence and the next "
                   "column-parallel layer needs the whole sequence",
    "tp_sp_exit": "tensor + sequence parallel: sum the partial outputs of a row-parallel layer and leave "
                  "each rank with its slice of the sequence",
    "zero_gradients": "ZeRO / distributed optimizer: each rank must end with the summed gradients of the "
                      "parameter shard it owns",
    "zero_parameters": "ZeRO / distributed optimizer: after each rank updated its shard, every rank needs all "
                       "the updated parameters",
    "initial_weights": "at start-up, rank 0 loaded a checkpoint and every rank needs the same weights",
    "pp_activations": "pipeline parallel: stage k hands its output activations to stage k+1",
}
CHOICES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send/recv")
#: q3's [scenario, collective] pairs, sealed (see _core.Sealed).
_ANSWERS = Sealed.load("labsupport:ch05:q3")


def _n(x: float) -> str:
    """A number as a learner writes it: 2097152, not 2.09715e+06; 0.4942 for a time."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:.4g}"


def _same(a: Any, b: Any) -> bool:   # the same number, within a relative 1e-6 (never for a non-number)
    try:
        return bool(np.isclose(float(a), float(b), rtol=1e-6))
    except (TypeError, ValueError):
        return False


def _trace(fn: Callable, n: int, steps: int | None) -> list[list[list[int]]] | None:
    """For each rank and chunk of the learner's ring on tracer buffers, how often each rank's data is in it."""
    base, buffers = 16, [np.full(n, 16 ** r, dtype=np.int64) for r in range(n)]   # a sum's hex digits count ranks
    try:
        got = fn(buffers, steps=steps) if steps is not None else fn(buffers)
        sums = [[int(np.asarray(got[r][c]).reshape(-1).item()) for c in range(n)] for r in range(n)]
    except Exception:  # noqa: BLE001 - the learner's code on the tracer input, or a chunk of another size
        return None
    if any(not 0 <= v < base ** n for row in sums for v in row):
        return None
    return [[[v // base ** q % base for q in range(n)] for v in row] for row in sums]


def _ranks_words(counts: Sequence[int]) -> str:
    held = [f"{r}" + (f" ({k} times)" if k > 1 else "") for r, k in enumerate(counts) if k]
    if len(held) < 2:
        return f"rank {held[0]}" if held else "no rank's data"
    return "ranks " + ", ".join(held[:-1]) + " and " + held[-1]


def _ring_model(send: Callable = lambda r, s, n: r - s, to: Callable = lambda r, n: r + 1, add: bool = True,
                extra: int = 0) -> Callable:
    """The ring's reduce-scatter (rank r sends chunk r − s in step s to rank r + 1, which adds it), or one
    with one thing changed: the chunk sent, the receiver, overwrite, or ``extra`` steps (q1's mistakes)."""
    def ring(buffers: list, steps: int | None = None) -> list:
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for step in range((n - 1 if steps is None else steps) + extra):
            sends = [(r, send(r, step, n) % n, chunks[r][send(r, step, n) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                into = chunks[to(src, n) % n]
                into[c] = into[c] + data if add else data
        return chunks
    return ring


_Q1_FORMULA = ("n − 1 steps; in step s (from 0) rank r sends chunk (r − s) mod n to rank (r + 1) mod n, which adds it "
               "to its own copy of that chunk")
_Q1_SAID = ("ring_reduce_scatter on {n} ranks (each rank's buffer filled with its own marker), {after}: rank {r}'s "
            "chunk {c} holds {held}; the ring's schedule gives it {want} — ")


def _q1_named(fn: Callable, n: int, steps: int | None) -> None:
    """Fail with the rule of q1 whose wrong ring the learner's follows on ``n`` ranks, told from a tracer run."""
    got, want = _trace(fn, n, steps), _trace(_ring_model(), n, steps)
    if got is None or got == want:
        return
    for rule in RULES["q1"].values():
        if any(got == _trace(wrong, n, steps) for wrong in (rule.wrong, *_ALSO.get(rule.name, ()))):
            r, c = next((r, c) for r in range(n) for c in range(n) if got[r][c] != want[r][c])
            after = "after 1 step (steps=1)" if steps else f"after {n - 1} step{'s' if n > 2 else ''}"
            rule.fail(n=n, after=after, r=r, c=c, held=_ranks_words(got[r][c]), want=_ranks_words(want[r][c]))


def _q1_chunks(fn: Callable, got: Any, sim: Any, steps: int | None, size: int) -> None:
    """Every chunk of ``got`` as after ``steps`` steps of the ring (None: all); else name the mistake."""
    n = len(sim.bounds) - 1
    where, step = (f"after ONE step (steps=1) with n={n}", 1) if steps else (f"with n={n} ranks", n - 1)
    expect(isinstance(got, (list, tuple)) and len(got) == n,
           f"{where}, expected a list of {n} per-rank chunk lists, got {short(got)}")
    for r in range(n):
        expect(isinstance(got[r], (list, tuple)) and len(got[r]) == n,
               f"rank {r}: expected a list of {n} chunks (np.array_split(buffer, {n})), got {short(got[r])}")
        for c in range(n):
            want, have = sim.states[step][r][sim.bounds[c]:sim.bounds[c + 1]], np.asarray(got[r][c])
            if have.shape == want.shape and np.array_equal(have, want):
                continue
            for ranks in (n,) if steps else sorted({4, n}):   # 4 ranks: the smallest ring that shows every mistake
                _q1_named(fn, ranks, steps)
            traced, held = _trace(fn, n, steps), sim.contributors[step][r][c]
            if traced is not None:                            # in words: whose data the chunk holds
                expect(False, f"{where}, rank {r}'s chunk {c} holds {_ranks_words(traced[r][c])} (run with each "
                       f"rank's buffer filled with its own marker); the ring's schedule gives it "
                       f"{_ranks_words([int(q in held) for q in range(n)])}")
            expect(False, f"{where} (size {size}), rank {r}'s chunk {c} is {short(have.tolist(), 60)}, expected "
                          f"{short(want.tolist(), 60)}, the sum of ranks {short(list(held))}' chunk {c}")


#: q1's world sizes always checked, and how many rings it checks in all (the rest drawn from 2 … 8): the count its
#: success line states
_Q1_RINGS, Q1_RINGS = (2, 3, 4, 5, 8), 15


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the schedule
    "reread chapter 5's 'The ring all-reduce from scratch': in the first step, which chunk does each rank send, "
    "and to which neighbour? (the check runs steps=1 first and says whether that step alone is right)",
    "split every buffer into n chunks; in each of the n − 1 steps every rank passes ONE chunk to its right-hand "
    "neighbour, which adds it into its own copy; the chunk a rank passes moves back by one each step, so after "
    "n − 1 steps every chunk is fully summed on exactly one rank. All sends of a step use the values from before "
    "that step; work on copies of the inputs.",
    "split with np.array_split(buffer, n); " + _Q1_FORMULA))
def q1(ring_reduce_scatter: Callable) -> str:
    """``ring_reduce_scatter(buffers, steps=None)`` → per-rank lists of n chunks after the n−1 reduce-scatter
    steps (or after ``steps`` of them, when the function takes that argument: step 1 is checked first, on its own)."""
    rng = np.random.default_rng(check_seed())
    try:
        with_steps = "steps" in inspect.signature(ring_reduce_scatter).parameters
    except (TypeError, ValueError):
        with_steps = False
    if with_steps:
        buffers = [rng.integers(-50, 50, size=8) for _ in range(4)]    # 4 ranks, 8 elements each
        got = ring_reduce_scatter([b.copy() for b in buffers], steps=1)
        _q1_chunks(ring_reduce_scatter, got, C.simulate_ring_allreduce(buffers), 1, 8)
    for n in list(_Q1_RINGS) + list(rng.integers(2, 9, size=Q1_RINGS - len(_Q1_RINGS))):
        n = int(n)
        size = int(rng.choice([n, 2 * n, 3 * n + 1, int(rng.integers(n, 6 * n))]))
        buffers = [rng.integers(-50, 50, size=size) for _ in range(n)]
        copies = [b.copy() for b in buffers]
        got = ring_reduce_scatter([b for b in buffers])     # steps left out: the whole phase
        expect(all(np.array_equal(b, c) for b, c in zip(buffers, copies)),
               "your function changed the input buffers (rank 0's buffer is not what it was); work on copies")
        _q1_chunks(ring_reduce_scatter, got, C.simulate_ring_allreduce(copies), None, size)
    return (f"{Q1_RINGS} random rings, every chunk of every rank as in the ring's schedule"
            + ("; step 1 first, on a ring of its own" if with_steps else ""))


_FACTOR_TEXT = {"all_reduce": "2(n−1)/n", "all_gather": "(n−1)/n", "reduce_scatter": "(n−1)/n", "broadcast": "1"}
_FACTORS = "2(n−1)/n for all_reduce, (n−1)/n for all_gather and reduce_scatter, 1 for broadcast"
#: q2's smallest cases: a broadcast on 2 ranks at algbw 1 GB/s or 1 GiB/s; on 4 ranks at 1 GB/s, busbw IS the factor
_Q2_SMALL = {"bytes_per_second": ("broadcast", 1e9, 1.0, 2), "gibibytes": ("broadcast", 2.0 ** 30, 1.0, 2)}


def _q2_facts(case: tuple, got: float) -> dict[str, Any]:
    collective, nbytes, seconds, n = case
    used = got / (nbytes / seconds / 1e9)              # the multiple of algbw the learner's busbw is
    like = " and ".join(sorted({f"{k}'s" for k in _FACTOR_TEXT if _same(used, C.bus_factor(k, n))}))
    return {"call": f"busbw_from_time({collective!r}, {_n(nbytes)}, {_n(seconds)}, {n})", "got": got, "n": n,
            "shown": _n(got), "S": _n(nbytes), "t": _n(seconds), "want": C.bus_bandwidth(*case), "used": used,
            "coll": collective, "an": ("an " if collective[0] in "aeiou" else "a ") + collective,
            "factor": _FACTOR_TEXT[collective], "right": C.bus_factor(collective, n), "small": case[1:] == (1e9, 1, 4),
            "like": "algbw itself, with no bus factor" if _same(used, 1.0) else f"{like} factor on {n} ranks"}


@check(CHAPTER, "q2", hint=(  # tiered: a nudge, the idea, then the formula
    "busbw is algbw (bytes ÷ seconds, in decimal GB/s) times a factor that depends on the collective and on n: "
    "how often does each byte cross a link of the ring?",
    "reread chapter 5's 'The cost model: algbw, busbw and α–β': the bus factor counts the share of S each rank "
    "sends over its link. reduce_scatter and all_gather each send n − 1 of n chunks; all_reduce is a "
    "reduce_scatter followed by an all_gather; broadcast forwards every byte once; one rank alone sends nothing.",
    "algbw = S / t / 1e9; busbw = algbw × " + _FACTORS))
def q2(busbw_from_time: Callable) -> str:
    """``busbw_from_time(collective, nbytes, seconds, world_size)`` → decimal GB/s."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        for n in (1, 2, 8, int(rng.integers(3, 200))):
            nbytes = float(2 ** int(rng.integers(10, 34)))
            seconds = float(rng.uniform(1e-5, 2.0))
            case = (collective, nbytes, seconds, n)
            want, got = C.bus_bandwidth(*case), busbw_from_time(*case)
            call = f"busbw_from_time({collective!r}, nbytes={_n(nbytes)}, seconds={_n(seconds)}, world_size={n})"
            expect(isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool)
                   and np.isfinite(float(got)), f"{call} returned {short(got)}; expected a number of GB/s")
            got = float(got)
            if not np.isclose(got, want, rtol=1e-9, atol=1e-12):
                if n == 1 and want == 0:                  # one rank: no byte crosses a link (broadcast aside)
                    RULES["q2"].fail("one_rank", **_q2_facts(case, got))
                rules = [rule for rule in RULES["q2"].values() if n > 1 or rule.name != "wrong_factor"]
                explain(busbw_from_time, rules, case, got, C.bus_bandwidth, _same,
                        lambda rule: [_Q2_SMALL.get(rule.name, (case[0], 1e9, 1.0, 4))], _q2_facts, _ALSO)
                expect(False, f"{call} = {got:.6g}, expected {want:.6g} GB/s (algbw there is "
                       f"{nbytes / seconds / 1e9:.6g} GB/s)")
            cases += 1
    return f"{cases} random measurements, 4 collectives"


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
def q3(choose_collectives: Callable):
    """``choose_collectives()`` → ``{scenario: collective, ..., "zero_bytes_ratio": float, "why": str}``."""
    answer = choose_collectives()
    expect(isinstance(answer, dict), f"expected a dict, got {short(answer)}")
    missing = [k for k in SCENARIOS if k not in answer]
    expect(not missing, f"missing scenario keys: {missing}")
    bad = [k for k in SCENARIOS if answer[k] not in CHOICES]
    expect(not bad, f"answers must be one of {CHOICES}; not so for {[(k, plain(answer[k])) for k in bad]}")
    wrong = [k for k in SCENARIOS if [k, answer[k]] not in _ANSWERS]
    expect(not wrong, f"{len(wrong)} of {len(SCENARIOS)} scenarios have another collective: {wrong}")
    ratio = answer.get("zero_bytes_ratio")
    number = isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
    for rule in RULES["q3"].values():         # each rule's wrong answer is a ratio
        if number and np.isclose(float(ratio), rule.wrong()):
            rule.fail(ratio=short(ratio))
    expect(number and np.isclose(float(ratio), 1.0),
           f"zero_bytes_ratio = {short(ratio)}: bytes per rank of reduce_scatter + all_gather over those of one "
           "all_reduce of the same gradients, with ring costs")
    why = str(answer.get("why", "")).strip()
    expect(len(why.split()) >= 5, "write a sentence or two in 'why'")
    return (f"{len(SCENARIOS)} scenarios and the byte ratio. Compare your reasons with this model answer: "
            + MODEL_ANSWER_Q3, {"why": why})


#: Shown once q3 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q3 = (
    "Every rank needs the same sum of gradients (DP) or of partial outputs (row-parallel TP): all_reduce. Sequence "
    "parallelism and ZeRO split that all_reduce into its halves — reduce_scatter where each rank keeps only its "
    "shard, all_gather where every rank needs the whole — which move the same bytes in all ((n−1)/n·S each). One "
    "rank's weights to all is a broadcast; pipeline stages hand activations to their neighbour with send/recv.")


#: q4's smallest case: rank 0 holds 0, 2 and rank 1 holds 1, 2, 3 ([count, sum, sum of squares] rows).
_Q4_SMALL = np.array([[2.0, 2.0, 4.0], [3.0, 6.0, 14.0]])


def _q4_stats(stats: np.ndarray) -> dict[str, Any]:
    """The facts of q4's rows: per-rank means, stds and their spread; the data's mean, std and population std."""
    (n, s, ss), (total, sums, squares) = stats.T, stats.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        stds = np.sqrt((ss - n * (s / n) ** 2) / (n - 1))
    mean = sums / total
    return {"means": s / n, "stds": stds, "spread": float(np.std(stds, ddof=1)) if len(stds) > 1 else np.nan,
            "mean": float(mean), "std": float(np.sqrt((squares - total * mean ** 2) / (total - 1))),
            "population": float(np.sqrt((squares - total * mean ** 2) / total)), "k": len(stats), "N": int(total),
            "counts": short(n.tolist()), "mean_r": short(float(mean)), "means_r": short((s / n).tolist()),
            "stds_r": short([round(v, 6) for v in stds.tolist()]), "small": stats is _Q4_SMALL,
            "call": "global_mean_std([[2, 2, 4], [3, 6, 14]])", "data": "rank 0 holds 0, 2 and rank 1 holds 1, 2, 3"}


#: the number of (mean, std) each rule of q4 is about: its wrong implementation gives that one number
_Q4_PART = {"mean_of_means": (0, "mean"), "spread_of_stds": (1, "std"), "population_std": (1, "std")}


@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
def q4(global_mean_std: Callable) -> str:
    """``global_mean_std(stats)``: stats is a (world_size, 3) array of per-rank ``[count, sum, sum of
    squares]`` (what all_gather returns); returns the global (mean, unbiased std)."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for _ in range(20):
        n = int(rng.integers(1, 9))
        parts = [rng.normal(rng.uniform(-20, 20), rng.uniform(0.1, 5), size=int(rng.integers(2, 400)))
                 for _ in range(n)]
        stats = np.array([[len(p), p.sum(), (p ** 2).sum()] for p in parts], dtype=np.float64)
        data = np.concatenate(parts)
        got = global_mean_std(stats.copy())
        expect(isinstance(got, (tuple, list)) and len(got) == 2, f"expected (mean, std), got {short(got)}")
        mean, std = float(got[0]), float(got[1])
        want_mean, want_std = float(data.mean()), float(data.std(ddof=1))
        if not (np.isclose(mean, want_mean, rtol=1e-6, atol=1e-9) and np.isclose(std, want_std, rtol=1e-6, atol=1e-9)):
            for rule in RULES["q4"].values():
                i, part = _Q4_PART[rule.name]
                explain(lambda s: global_mean_std(s)[i], [rule], (stats,), (mean, std)[i], lambda s: _q4_stats(s)[part],
                        _same, lambda rule: [(_Q4_SMALL,)],
                        lambda case, got: {**_q4_stats(*case), "got": got, "got_r": short(got)}, _ALSO)
        expect(np.isclose(mean, want_mean, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {short([len(p) for p in parts])} samples: mean {mean:.6g}, expected {want_mean:.6g}")
        expect(np.isclose(std, want_std, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {short([len(p) for p in parts])} samples: std {std:.6g}, expected {want_std:.6g}")
        cases += 1
    return f"{cases} random splits of data over ranks"


_Q5_SMALL = ("all_reduce", 1e9, 2, 4, 1.0)   # 2 all_reduces of 1 GB on 4 ranks at 1 GB/s: 2 × 1e9 × 1.5 / 1e9 = 3 s


def _q5_time(collective: str, message: float, ops: int, group: int, busbw: float) -> float:
    return ops * message * C.bus_factor(collective, group) / (busbw * 1e9)


def _q5_facts(case: tuple, got: float) -> dict[str, Any]:
    collective, message, ops, group, busbw = case
    f = C.bus_factor(collective, group)
    return {"call": f"comm_seconds_per_step({collective!r}, {_n(message)}, {ops}, {group}, {_n(busbw)}) returned "
            f"{got:.6g} s: at busbw {_n(busbw)} GB/s that is the time of {got * busbw * 1e9:.4g} bytes on the bus",
            "ops": ops, "bytes": f"{ops * message:.4g}", "coll": collective, "group": group, "f": f, "more": f > 1,
            "an": ("an " if collective[0] in "aeiou" else "a ") + collective, "factor": _FACTOR_TEXT[collective]}


@check(CHAPTER, "q5", hint=TEXTS["q5"].hint)
def q5(comm_seconds_per_step: Callable) -> str:
    """``comm_seconds_per_step(collective, message_bytes, ops_per_step, group, busbw_GBps)`` → seconds per
    training step spent in that collective (bandwidth term only: busbw already includes the algorithm)."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for collective in ("all_gather", "reduce_scatter", "all_reduce", "broadcast"):
        for _ in range(5):
            group = int(rng.choice([2, 4, 8, int(rng.integers(3, 65))]))
            message = float(rng.choice([33.6e6, 821.7e6, float(2 ** int(rng.integers(16, 31)))]))
            ops = int(rng.choice([1, 8, 512, int(rng.integers(2, 2000))]))
            busbw = float(rng.choice([H100_SXM_NODE.nvlink_GBps, H100_SXM_NODE.internode_busbw_GBps(8),
                                      H100_SXM_NODE.nic_GBps, float(rng.uniform(1, 900))]))
            case = (collective, message, ops, group, busbw)
            want, got = _q5_time(*case), comm_seconds_per_step(*case)
            call = f"comm_seconds_per_step({collective!r}, {_n(message)}, {ops}, {group}, {_n(busbw)})"
            expect(isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool)
                   and np.isfinite(float(got)), f"{call} returned {short(got)}; expected a number of seconds")
            got = float(got)
            if not np.isclose(got, want, rtol=1e-9):
                explain(comm_seconds_per_step, RULES["q5"].values(), case, got, _q5_time, _same,
                        lambda rule: [_Q5_SMALL], _q5_facts, _ALSO)
                expect(False, f"{call} = {got:.6g} s, expected {want:.6g} s: at busbw {busbw:g} GB/s your time moves "
                       f"{got * busbw * 1e9:.4g} bytes over the bus, {got * busbw * 1e9 / (ops * message):.4g} × the "
                       f"{ops} × {message:g} bytes of the step's messages")
            cases += 1
    return f"{cases} random collectives, group sizes and links"


#: q6's smallest case: 2 ranks of 2 elements each
_Q6_SMALL = [np.array([0, 1]), np.array([10, 11])]


def _q6_own_chunk(buffers: list) -> list:
    n = len(buffers)
    return [np.split(np.asarray(b), n)[r] for r, b in enumerate(buffers)]


def _q6_facts(fn: Callable, buffers: list, got: list, rule: Rule) -> dict[str, Any]:
    """Show the mistake on _Q6_SMALL when the learner makes it there too, else on the failing case."""
    try:
        small = fn([b.copy() for b in _Q6_SMALL])
        if _q6_same(small, rule.wrong(_Q6_SMALL)):
            buffers, got = _Q6_SMALL, small
    except Exception:  # noqa: BLE001 - the learner's code on the small case: fall back to the failing case
        pass
    want = C.all_to_all(buffers)
    return {"call": f"all_to_all({short([b.tolist() for b in buffers], 80)})", "n": len(buffers),
            "got": short([np.asarray(g).tolist() for g in got], 80), "want": short([w.tolist() for w in want], 80)}


def _q6_same(got: Any, want: list) -> bool:
    try:
        return len(got) == len(want) and all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want))
    except TypeError:
        return False


@check(CHAPTER, "q6", hint=TEXTS["q6"].hint)
def q6(all_to_all: Callable) -> str:
    """``all_to_all(buffers)``: n 1-D arrays whose length divides by n → n arrays, rank j's holding chunk j of
    every rank in rank order (``dist.all_to_all_single`` with equal splits)."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for n in [1, 2, 3, 4, 8] + [int(k) for k in rng.integers(2, 9, size=5)]:
        k = int(rng.integers(1, 5))
        buffers = [rng.integers(-99, 99, size=n * k) for _ in range(n)]
        copies = [b.copy() for b in buffers]
        got = all_to_all([b for b in buffers])
        expect(all(np.array_equal(b, c) for b, c in zip(buffers, copies)),
               "your function changed the input buffers; work on copies")
        want = C.all_to_all(copies)
        expect(isinstance(got, (list, tuple)) and len(got) == n,
               f"{n} ranks: expected a list of {n} arrays (one per rank), got {short(got)}")
        if not _q6_same(got, want):
            for rule in RULES["q6"].values():
                if _q6_same(got, rule.wrong(copies)):
                    rule.fail(**_q6_facts(all_to_all, copies, got, rule))
            r = next(r for r in range(n) if not np.array_equal(np.asarray(got[r]), want[r]))
            expect(False, f"{n} ranks of {n * k} elements: rank {r} holds {short(np.asarray(got[r]).tolist(), 60)}, "
                   f"expected {short(want[r].tolist(), 60)} (chunk {r} of each rank, in rank order)")
        cases += 1
    return f"{cases} random all-to-alls, every rank's buffer as dist.all_to_all_single leaves it"


# The named mistakes, by question: Rule(name, symptom, ask, fix, wrong=a wrong implementation); formulas per table.
RULES: dict[str, Rules] = {
    "q1": Rules(
        Rule("replaced_not_added",
             symptom=_Q1_SAID + "rank {r}'s own data is gone from it: the chunk that arrived replaced "
             "its copy",
             wrong=_ring_model(add=False)),
        Rule("wrong_direction",
             symptom=_Q1_SAID + "the data travelled the other way round the ring, from higher ranks to "
             "lower ones",
             wrong=_ring_model(to=lambda r, n: r - 1)),
        Rule("one_step_too_many",
             symptom=_Q1_SAID + "the ring ran one step more than the phase has, so data went on round "
             "the ring",
             wrong=_ring_model(extra=1)),
        Rule("wrong_chunk",
             symptom=_Q1_SAID + "the right neighbours, but another chunk travelled",
             wrong=_ring_model(send=lambda r, s, n: r + s)),
        formula=_Q1_FORMULA,
        texts=TEXTS["q1"]),
    "q2": Rules(
        Rule("bytes_per_second", wrong=lambda coll, s, t, n: C.bus_bandwidth(coll, s, t, n) * 1e9),
        Rule("gibibytes", wrong=lambda coll, s, t, n: C.bus_bandwidth(coll, s, t, n) * 1e9 / 2 ** 30),
        Rule("one_rank"),
        Rule("wrong_factor", wrong=lambda coll, s, t, n: s / t / 1e9),
        formula="busbw = S / t / 1e9 × factor, factor = " + _FACTORS,
        texts=TEXTS["q2"]),
    "q3": Rules(   # a rule's wrong answer is the ratio it names
        Rule("ratio_one_half", wrong=lambda: 0.5),
        Rule("ratio_doubled", wrong=lambda: 2.0),
        texts=TEXTS["q3"]),
    "q4": Rules(   # shown on _Q4_SMALL where the learner makes the mistake there too, else on the check's case
        Rule("mean_of_means", wrong=lambda stats: float(_q4_stats(stats)["means"].mean())),
        Rule("spread_of_stds", wrong=lambda stats: _q4_stats(stats)["spread"]),
        Rule("population_std", wrong=lambda stats: _q4_stats(stats)["population"]),
        texts=TEXTS["q4"]),
    "q5": Rules(
        Rule("no_bus_factor", wrong=lambda c, s, o, n, b: o * s / (b * 1e9)),
        Rule("divided_by_factor", wrong=lambda c, s, o, n, b: o * s / C.bus_factor(c, n) / (b * 1e9)),
        Rule("one_operation", wrong=lambda c, s, o, n, b: _q5_time(c, s, 1, n, b)),
        Rule("units", wrong=lambda c, s, o, n, b: _q5_time(c, s, o, n, b) * 1e9),     # GB/s taken for bytes/s
        formula="t = ops_per_step × S × factor / (busbw_GBps × 1e9); factor " + _FACTORS,
        texts=TEXTS["q5"]),
    "q6": Rules(
        Rule("returned_input", wrong=lambda buffers: [np.asarray(b).copy() for b in buffers]),
        Rule("own_chunk_only", wrong=_q6_own_chunk),
        Rule("all_gathered", wrong=lambda buffers: [np.concatenate(buffers) for _ in buffers]),
        formula=("cut each buffer into n equal chunks; rank j's output = chunk j of rank 0, chunk j of rank 1, …, "
                 "chunk j of rank n − 1, concatenated"),
        texts=TEXTS["q6"]),
}
#: further wrong implementations a rule names (the same mistake written another way)
_ALSO: dict[str, tuple[Callable, ...]] = {
    "wrong_direction": (_ring_model(lambda r, s, n: r + s, lambda r, n: r - 1),),
    "wrong_chunk": tuple(_ring_model(send=f) for f in (lambda r, s, n: r + 1 - s, lambda r, s, n: r,
                                                        lambda r, s, n: s)),
    "wrong_factor": tuple(lambda coll, s, t, n, k=k: s / t / 1e9 * C.bus_factor(k, n) for k in _FACTOR_TEXT),
    "units": (lambda c, s, o, n, b: _q5_time(c, s, o, n, b) / 1e9,),             # bytes/s taken for GB/s
}
