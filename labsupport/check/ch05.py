"""Exercise checks of chapter 5 (NCCL collectives): ``from labsupport.check import ch05 as check``.

q1 the reduce-scatter phase of the ring · q2 busbw from a measured time · q3 which collective
for DP, TP and ZeRO · q4 the NCCL guide's "global std" snippet, corrected · q5 the time a TP
group spends in its collectives per step, from the chapter's traffic table and a busbw (transfer).
Each check calls the learner's function on fresh random inputs and compares with
``labsupport.distributed.collectives``.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from labsupport.distributed import collectives as C
from labsupport.distributed.hardware import H100_SXM_NODE
from labsupport.check._core import chapter_summary, check, check_seed, expect, mistake, plain, Sealed, short

CHAPTER = "ch05"


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
_ANSWERS = Sealed("labsupport:ch05:q3", [
    "1d0264600539e77470b32fffc9041e079b505660d45ef89cda9f1a63ddfa0860",
    "6862e8edf8d29dc41003b5a725a5cce57a3c2308b9428f953348f83ad3ce96a8",
    "a48f2223db233fec02574097242c206ae7ece0325a0648be7521e59767053e0c",
    "d53776dba53ccd1db1e3bd4da9710ec3d5404a99f78921d07dce5a412bd56c91",
    "f32851fd784f7c6832c9866a17dbe8d689384cd838c75de05fa63ab0ad604b4c",
    "f5ec83a62754de360fdb94314a7c4eb92e865d97918dc102ad0757a4b835c4b5",
    "f7abcda3f2a4656f17882058f3e0dd9367071fa5a3f1a14c5edf4a79d37a2d54",
    "fc871b1252160a43bfcc930171999b985a2a50549a5b8998931acd41e8e1ddf4",
])


_TRACE_BASE = 16   # q1's tracer: rank r's buffer is 16**r everywhere, so a sum's hex digits count each rank


def _trace(fn: Callable, n: int, steps: int | None) -> list[list[list[int]]] | None:
    """Run the learner's ring on tracer buffers (one element per chunk): for each rank and chunk, how
    many times each rank's data is in it; None when the result cannot be read that way."""
    buffers = [np.full(n, _TRACE_BASE ** r, dtype=np.int64) for r in range(n)]
    try:
        got = fn(buffers, steps=steps) if steps is not None else fn(buffers)
        out = []
        for r in range(n):
            row = []
            for c in range(n):
                value = np.asarray(got[r][c]).reshape(-1)
                if value.size != 1 or value[0] < 0:
                    return None
                v, counts = int(value[0]), []
                for _ in range(n):
                    v, digit = divmod(v, _TRACE_BASE)
                    counts.append(digit)
                if v:
                    return None
                row.append(counts)
            out.append(row)
        return out
    except Exception:  # noqa: BLE001 - the learner's code on the tracer input
        return None


def _ranks_words(counts: Sequence[int]) -> str:
    held = [f"{r}" + (f" ({k} times)" if k > 1 else "") for r, k in enumerate(counts) if k]
    if not held:
        return "no rank's data"
    return ("rank " if len(held) == 1 else "ranks ") + (held[0] if len(held) == 1 else ", ".join(held[:-1]) + " and " + held[-1])


def _ring_model(send: Callable[[int, int, int], int], to: Callable[[int, int], int], add: bool = True,
                extra: int = 0) -> Callable:
    """A ring reduce-scatter with one thing changed: the chunk sent, the receiver, add or overwrite, or
    ``extra`` steps more (the recognised mistakes of q1)."""
    def ring(buffers: list, steps: int | None = None) -> list:
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for step in range((n - 1 if steps is None else steps) + extra):
            sends = [(r, send(r, step, n) % n, chunks[r][send(r, step, n) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                if add:
                    chunks[to(src, n) % n][c] += data
                else:
                    chunks[to(src, n) % n][c] = data
        return chunks
    return ring


_RIGHT = lambda r, n: r + 1          # noqa: E731 - the ring's receiver
_BACK = lambda r, s, n: r - s        # noqa: E731 - the chunk rank r sends in step s
_Q1_MODELS = {   # name: the wrong rings it recognises
    "replaced_not_added": [_ring_model(_BACK, _RIGHT, add=False)],
    "wrong_direction": [_ring_model(_BACK, lambda r, n: r - 1), _ring_model(lambda r, s, n: r + s, lambda r, n: r - 1)],
    "one_step_too_many": [_ring_model(_BACK, _RIGHT, extra=1)],
    "wrong_chunk": [_ring_model(lambda r, s, n: r + s, _RIGHT), _ring_model(lambda r, s, n: r + 1 - s, _RIGHT),
                    _ring_model(lambda r, s, n: r, _RIGHT), _ring_model(lambda r, s, n: s, _RIGHT)],
}
_Q1_TEXT = {
    "replaced_not_added": ("rank {r}'s own data is gone from it: the chunk that arrived replaced its copy",
                           "When a chunk arrives, what happens to the receiving rank's own copy of that chunk?",
                           "Add the received chunk into the receiver's copy (+=); do not overwrite it."),
    "wrong_direction": ("the data travelled the other way round the ring, from higher ranks to lower ones",
                        "To which neighbour does each rank send: the next rank (r + 1) or the previous one (r − 1)?",
                        "Every rank sends to rank (r + 1) mod n and receives from rank (r − 1) mod n."),
    "one_step_too_many": ("the ring ran one step more than the phase has, so data went on round the ring",
                          "How many steps does the reduce-scatter phase take on n ranks?",
                          "Run n − 1 steps (or `steps` of them): after n − 1 every chunk is summed once on one rank."),
    "wrong_chunk": ("the right neighbours, but another chunk travelled",
                    "In step s, which of its n chunks does rank r send — and how does that chunk move from one step "
                    "to the next?",
                    "In step s rank r sends chunk (r − s) mod n: in step 0 its own-numbered chunk, then one chunk "
                    "back per step."),
}


def _q1_trace_mistake(fn: Callable, n: int, steps: int | None) -> None:
    """Name a recognised wrong ring, told in words from a tracer run: whose data each chunk holds."""
    got = _trace(fn, n, steps)
    if got is None:
        return
    for name, models in _Q1_MODELS.items():
        if not any(got == _trace(model, n, steps) for model in models):
            continue
        want = _trace(_ring_model(_BACK, _RIGHT), n, steps)
        bad = [(r, c) for r in range(n) for c in range(n) if got[r][c] != want[r][c]]
        if not bad:
            return
        r, c = bad[0]
        done = n - 1 if steps is None else steps
        after = f"after {done} step{'s' if done != 1 else ''}" + (" (steps=1)" if steps == 1 else "")
        said, ask, fix = _Q1_TEXT[name]
        mistake(name, symptom=f"ring_reduce_scatter on {n} ranks (each rank's buffer filled with its own marker), "
                f"{after}: rank {r}'s chunk {c} holds {_ranks_words(got[r][c])}; the ring's schedule gives it "
                f"{_ranks_words(want[r][c])} — " + said.format(r=r),
                ask=ask, fix=fix, formula="n − 1 steps; in step s (from 0) rank r sends chunk (r − s) mod n to rank "
                                          "(r + 1) mod n, which adds it to its own copy of that chunk")


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the schedule
    "reread chapter 5's 'The ring all-reduce from scratch': in the first step, which chunk does each rank send, "
    "and to which neighbour? (the check runs steps=1 first and says whether that step alone is right)",
    "split every buffer into n chunks; in each of the n − 1 steps every rank passes ONE chunk to its right-hand "
    "neighbour, which adds it into its own copy; the chunk a rank passes moves back by one each step, so after "
    "n − 1 steps every chunk is fully summed on exactly one rank. All sends of a step use the values from before "
    "that step; work on copies of the inputs.",
    "split with np.array_split(buffer, n); n − 1 steps; in step s (from 0) rank r sends "
    "chunk (r − s) mod n to rank (r + 1) mod n, which adds it to its own copy of that chunk"))
def q1(ring_reduce_scatter: Callable) -> str:
    """``ring_reduce_scatter(buffers, steps=None)`` → per-rank lists of n chunks after the n−1
    reduce-scatter steps (or after ``steps`` of them, when the function takes that argument:
    step 1 is checked first, on its own)."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    if "steps" in _parameters(ring_reduce_scatter):
        n, size = 4, 8
        buffers = [rng.integers(-50, 50, size=size) for _ in range(n)]
        sim = C.simulate_ring_allreduce([b.copy() for b in buffers])
        got = ring_reduce_scatter([b.copy() for b in buffers], steps=1)
        for r in range(n):
            for c in range(n):
                want = sim.states[1][r][sim.bounds[c]:sim.bounds[c + 1]]
                have = np.asarray(got[r][c]) if isinstance(got, (list, tuple)) and len(got) == n else None
                if have is None or have.shape != want.shape or not np.array_equal(have, want):
                    _q1_trace_mistake(ring_reduce_scatter, n, 1)
                    traced = _trace(ring_reduce_scatter, n, 1)
                    held = sim.contributors[1][r][c]
                    if traced is not None:                # in words: whose data the chunk holds
                        expect(False, f"after ONE step (steps=1) with n={n}, rank {r}'s chunk {c} holds "
                               f"{_ranks_words(traced[r][c])} (run with each rank's buffer filled with its own "
                               f"marker); the ring's schedule gives it {_ranks_words([int(q in held) for q in range(n)])}")
                    expect(False, f"after ONE step (steps=1) with n={n}, rank {r}'s chunk {c} is "
                                  f"{short(None if have is None else have.tolist(), 60)}, expected {short(want.tolist())}, "
                                  f"the sum of ranks {short(list(held))}' chunk {c}")
        cases += 1
    for n in [2, 3, 4, 5, 8] + list(rng.integers(2, 9, size=10)):
        n = int(n)
        size = int(rng.choice([n, 2 * n, 3 * n + 1, int(rng.integers(n, 6 * n))]))
        buffers = [rng.integers(-50, 50, size=size) for _ in range(n)]
        copies = [b.copy() for b in buffers]
        got = ring_reduce_scatter([b for b in buffers])     # steps left out: the whole phase
        sim = C.simulate_ring_allreduce(copies)
        expect(all(np.array_equal(b, c) for b, c in zip(buffers, copies)),
               "your function changed the input buffers (rank 0's buffer is not what it was); work on copies")
        expect(isinstance(got, (list, tuple)) and len(got) == n,
               f"with n={n} ranks, expected a list of {n} per-rank chunk lists, got {short(got)}")
        for r in range(n):
            expect(isinstance(got[r], (list, tuple)) and len(got[r]) == n,
                   f"rank {r}: expected a list of {n} chunks (np.array_split(buffer, {n})), got {short(got[r])}")
            for c in range(n):
                want = sim.states[n - 1][r][sim.bounds[c]:sim.bounds[c + 1]]
                have = np.asarray(got[r][c])
                if have.shape != want.shape or not np.array_equal(have, want):
                    for ranks in sorted({4, n}):      # 4 ranks first: the smallest ring that shows every mistake
                        _q1_trace_mistake(ring_reduce_scatter, ranks, None)
                    got_trace = _trace(ring_reduce_scatter, n, None)
                    who = sim.contributors[n - 1][r][c]
                    if got_trace is not None:             # in words: whose data the chunk holds
                        expect(False, f"with n={n} ranks, rank {r}'s chunk {c} holds {_ranks_words(got_trace[r][c])} "
                               f"(run with each rank's buffer filled with its own marker); the ring's schedule gives "
                               f"it ranks {short(list(who))}")
                    who = sim.contributors[n - 1][r][c]
                    expect(False, f"with n={n} ranks (size {size}), rank {r} chunk {c} is {short(have.tolist(), 60)}, "
                                  f"expected {short(want.tolist(), 60)}, the sum of ranks {short(list(who))}' chunk {c}")
        cases += 1
    return f"{cases} random rings, every chunk of every rank as in the ring's schedule"


def _parameters(fn: Callable) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


# ---------------------------------------------------------------------------------------------
_FACTOR_TEXT = {"all_reduce": "2(n−1)/n", "all_gather": "(n−1)/n", "reduce_scatter": "(n−1)/n", "broadcast": "1"}
_BUSBW_FORMULA = ("busbw = S / t / 1e9 × factor, factor = 2(n−1)/n for all_reduce, (n−1)/n for all_gather and "
                  "reduce_scatter, 1 for broadcast")


def _n(x: float) -> str:
    """A number as a learner writes it: 2097152, not 2.09715e+06; 0.4942 for a time."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:.4g}"


def _an(collective: str) -> str:
    return ("an " if collective[0] in "aeiou" else "a ") + collective


def _try(fn: Callable, *args: Any) -> float | None:
    try:
        return float(fn(*args))
    except Exception:  # noqa: BLE001 - the learner's code on an input the check chose
        return None


def _q2_mistake(fn: Callable, collective: str, nbytes: float, seconds: float, n: int, got: float) -> None:
    want = C.bus_bandwidth(collective, nbytes, seconds, n)
    if want and np.isclose(got, want * 1e9, rtol=1e-6):
        small = _try(fn, "broadcast", 1e9, 1.0, 2)
        args = ("broadcast", 1e9, 1.0, 2) if small is not None and np.isclose(small, 1e9) else (collective, nbytes, seconds, n)
        shown = small if args[0] == "broadcast" else got
        mistake("bytes_per_second", symptom=f"busbw_from_time({args[0]!r}, {_n(args[1])}, {_n(args[2])}, {args[3]}) "
                f"returned {_n(shown)} — for {_n(args[1])} bytes in {_n(args[2])} s, in the unit nccl-tests prints",
                ask="In which unit is your number: bytes per second, or GB per second?",
                fix="Divide by 1e9: nccl-tests reports decimal GB/s (1 GB = 10⁹ bytes).", formula=_BUSBW_FORMULA)
    if want and np.isclose(got, want * 1e9 / 2 ** 30, rtol=1e-6):
        small = _try(fn, "broadcast", 2.0 ** 30, 1.0, 2)
        args = ("broadcast", 2 ** 30, 1.0, 2) if small is not None and np.isclose(small, 1.0) else (collective, nbytes, seconds, n)
        shown = small if args[0] == "broadcast" else got
        mistake("gibibytes", symptom=f"busbw_from_time({args[0]!r}, {_n(args[1])}, {_n(args[2])}, {args[3]}) returned "
                f"{shown:.6g}; nccl-tests prints {C.bus_bandwidth(args[0], args[1], args[2], args[3]):.6g} there",
                ask="How many bytes is one GB in nccl-tests' output: 10⁹ or 2³⁰?",
                fix="Divide bytes per second by 1e9 (decimal GB), not by 2**30 (GiB).", formula=_BUSBW_FORMULA)
    if n == 1 and want == 0 and got != 0:
        mistake("one_rank", symptom=f"busbw_from_time({collective!r}, {_n(nbytes)}, {_n(seconds)}, 1) returned "
                f"{got:.6g}, but on a single rank no byte crosses a link",
                ask="On a single rank, how many bytes cross a link — and what does that make busbw?",
                fix=f"Use {collective}'s bus factor {_FACTOR_TEXT[collective]} for every n, n = 1 included: it is 0 "
                    "there, and so is busbw.", formula=_BUSBW_FORMULA)
    if n > 1 and got > 0 and want > 0:
        small = _try(fn, collective, 1e9, 1.0, 4)           # algbw = 1 GB/s: the result IS the factor used
        used, n_shown = (small, 4) if small is not None and small > 0 else (got / (nbytes / seconds / 1e9), n)
        right = C.bus_factor(collective, n_shown)
        if np.isclose(used, right, rtol=1e-9):               # the factor is right on 4 ranks: show the check's case
            used, n_shown, right = got / (nbytes / seconds / 1e9), n, C.bus_factor(collective, n)
        same = [f"{k}'s" for k in _FACTOR_TEXT if np.isclose(used, C.bus_factor(k, n_shown), rtol=1e-6)]
        known = np.isclose(used, 1.0, rtol=1e-6) or same
        if not known:
            return
        like = ("algbw itself, with no bus factor" if np.isclose(used, 1.0, rtol=1e-6)
                else " and ".join(sorted(set(same))) + f" factor on {n_shown} ranks")
        head = (f"busbw_from_time({collective!r}, 1000000000, 1, 4) returned {used:.6g}: algbw is 1 GB/s there, so yours is "
                f"algbw × {used:.4g}" if n_shown == 4 and small is not None and used == small else
                f"busbw_from_time({collective!r}, {_n(nbytes)}, {_n(seconds)}, {n}) returned {got:.6g} = algbw × "
                f"{used:.4g}")
        mistake("wrong_factor", symptom=f"{head} — {like}",
                ask=f"In {_an(collective)} of S bytes on a ring of {n_shown}, what multiple of S does each rank put on "
                    "its link?",
                fix=f"busbw = algbw × factor, and {collective}'s factor is {_FACTOR_TEXT[collective]} "
                    f"({right:.4g} on {n_shown} ranks).", formula=_BUSBW_FORMULA)


@check(CHAPTER, "q2", hint=(  # tiered: a nudge, the idea, then the formula
    "busbw is algbw (bytes ÷ seconds, in decimal GB/s) times a factor that depends on the collective and on n: "
    "how often does each byte cross a link of the ring?",
    "reread chapter 5's 'The cost model: algbw, busbw and α–β': the bus factor counts the share of S each rank "
    "sends over its link. reduce_scatter and all_gather each send n − 1 of n chunks; all_reduce is a "
    "reduce_scatter followed by an all_gather; broadcast forwards every byte once; one rank alone sends nothing.",
    "algbw = S / t / 1e9; busbw = algbw × 2(n−1)/n for all_reduce, (n−1)/n for all_gather "
    "and reduce_scatter, 1 for broadcast"))
def q2(busbw_from_time: Callable) -> str:
    """``busbw_from_time(collective, nbytes, seconds, world_size)`` → decimal GB/s."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        for n in (1, 2, 8, int(rng.integers(3, 200))):
            nbytes = float(2 ** int(rng.integers(10, 34)))
            seconds = float(rng.uniform(1e-5, 2.0))
            want = C.bus_bandwidth(collective, nbytes, seconds, n)
            got = busbw_from_time(collective, nbytes, seconds, n)
            call = f"busbw_from_time({collective!r}, nbytes={_n(nbytes)}, seconds={_n(seconds)}, world_size={n})"
            expect(isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool)
                   and np.isfinite(float(got)), f"{call} returned {short(got)}; expected a number of GB/s")
            got = float(got)
            if not np.isclose(got, want, rtol=1e-9, atol=1e-12):
                _q2_mistake(busbw_from_time, collective, nbytes, seconds, n, got)
                expect(False, f"{call} = {got:.6g}, expected {want:.6g} GB/s (algbw there is "
                       f"{nbytes / seconds / 1e9:.6g} GB/s)")
            cases += 1
    return f"{cases} random measurements, 4 collectives"


# ---------------------------------------------------------------------------------------------
@check(CHAPTER, "q3", hint=(
    "reread chapter 5's 'Where each collective appears in training' and 'The four collectives': for each "
    "scenario, ask what every rank holds before, and what it must hold after",
    "every rank needs the same full sum → all_reduce; each rank keeps only its own summed shard → reduce_scatter; "
    "every rank needs all the shards → all_gather; one rank's data to all → broadcast; one stage to the next → "
    "send/recv. For the ratio, use the ring's bytes per rank of each collective.",
    "all_reduce = reduce_scatter + all_gather; sequence parallelism and ZeRO split it into "
    "its two halves; weights from one rank to all is a broadcast; pipeline stages talk pairwise. Bytes per rank "
    "on a ring: (n−1)/n·S for reduce_scatter and for all_gather, 2(n−1)/n·S for all_reduce."))
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
    formula = "(n−1)/n·S (reduce_scatter) + (n−1)/n·S (all_gather) over 2(n−1)/n·S (all_reduce) = 1"
    if number and np.isclose(float(ratio), 0.5):
        mistake("ratio_one_half", symptom=f"zero_bytes_ratio = {short(ratio)}: that is the bytes of ONE of ZeRO's "
                "two collectives over an all_reduce's", ask="ZeRO runs a reduce_scatter of the gradients AND an "
                "all_gather of the parameters: what do the two send together?",
                fix="Add both halves: (n−1)/n·S + (n−1)/n·S, then divide by the all_reduce's 2(n−1)/n·S.",
                formula=formula)
    if number and np.isclose(float(ratio), 2.0):
        mistake("ratio_doubled", symptom=f"zero_bytes_ratio = {short(ratio)}: ZeRO would then move twice an "
                "all_reduce's bytes, as if each of its halves cost a whole all_reduce",
                ask="On a ring, how many bytes per rank does a reduce_scatter send, compared with an all_reduce?",
                fix="A reduce_scatter and an all_gather send (n−1)/n·S each; an all_reduce sends 2(n−1)/n·S.",
                formula=formula)
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


# ---------------------------------------------------------------------------------------------
#: q4's smallest case: rank 0 holds 0, 2 and rank 1 holds 1, 2, 3 ([count, sum, sum of squares] rows).
_Q4_SMALL = np.array([[2.0, 2.0, 4.0], [3.0, 6.0, 14.0]])
_Q4_DATA = "rank 0 holds 0, 2 and rank 1 holds 1, 2, 3"
_Q4_CALL = "global_mean_std([[2, 2, 4], [3, 6, 14]])"
_Q4_FORMULA = "N = Σ counts; mean = Σ sums / N; var = (Σ sums of squares − N·mean²) / (N − 1); std = √var"


def _rank_stats(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-rank means and sample stds from [count, sum, sum of squares] rows."""
    n, s, ss = stats[:, 0], stats[:, 1], stats[:, 2]
    means = s / n
    with np.errstate(invalid="ignore", divide="ignore"):
        stds = np.sqrt((ss - n * means ** 2) / (n - 1))
    return means, stds


def _global(stats: np.ndarray) -> tuple[float, float, float]:
    n, s, ss = stats.sum(axis=0)
    mean = s / n
    return float(mean), float(np.sqrt((ss - n * mean ** 2) / (n - 1))), float(np.sqrt((ss - n * mean ** 2) / n))


def _q4_small(fn: Callable, index: int) -> float | None:
    try:
        return float(fn(_Q4_SMALL.copy())[index])
    except Exception:  # noqa: BLE001 - the learner's code on the check's small case
        return None


def _q4_mistake(fn: Callable, stats: np.ndarray, mean: float, std: float) -> None:
    means, stds = _rank_stats(stats)
    want_mean, want_std, population = _global(stats)
    small_means, small_stds = _rank_stats(_Q4_SMALL)
    s_mean, s_std, s_population = _global(_Q4_SMALL)
    if len(stats) > 1 and np.isclose(mean, means.mean(), rtol=1e-9) and not np.isclose(mean, want_mean, rtol=1e-6):
        got = _q4_small(fn, 0)
        shown = (f"{_Q4_CALL} gave mean {short(got)}: {_Q4_DATA}, five values "
                 f"whose mean is {short(s_mean)}; {short(got)} is halfway between the two ranks' means "
                 f"{short(small_means.tolist())}") if got is not None and np.isclose(got, small_means.mean()) else \
            (f"{len(stats)} ranks with {short(stats[:, 0].tolist())} samples: mean {mean:.6g} is the mean of the "
             f"per-rank means, the data's mean is {want_mean:.6g}")
        mistake("mean_of_means", symptom=shown,
                ask="The ranks hold different numbers of values: should each rank count equally, or each value?",
                fix="Add the counts and the sums over all ranks first: mean = Σ sums / Σ counts.", formula=_Q4_FORMULA)
    if len(stats) > 1 and np.isclose(std, float(np.std(stds, ddof=1)), rtol=1e-9) and not np.isclose(std, want_std, rtol=1e-6):
        got = _q4_small(fn, 1)
        shown = (f"{_Q4_CALL} gave std {got:.6g}: {_Q4_DATA}; the two ranks' "
                 f"stds are {short([round(v, 6) for v in small_stds.tolist()])} and yours is how much they differ "
                 f"from each other, while the five values themselves have std {s_std:.6g}") \
            if got is not None and np.isclose(got, float(np.std(small_stds, ddof=1))) else \
            f"std {std:.6g} is the spread of the {len(stats)} per-rank stds, the data's std is {want_std:.6g}"
        mistake("spread_of_stds", symptom=shown,
                ask="Does the spread of the per-rank stds measure how spread out the data are?",
                fix="Add up counts, sums and sums of squares over the ranks and compute the std of all N values "
                    "from those totals.", formula=_Q4_FORMULA)
    if np.isclose(std, population, rtol=1e-9) and not np.isclose(std, want_std, rtol=1e-6):
        got = _q4_small(fn, 1)
        shown = (f"{_Q4_CALL} gave std {got:.6g}: {_Q4_DATA}; the sum of "
                 f"squared deviations of those 5 values is 5.2, and {got:.6g} = √(5.2 / 5)") \
            if got is not None and np.isclose(got, s_population) else \
            f"std {std:.6g} = √(Σ(x − mean)² / N) for N = {int(stats[:, 0].sum())} values"
        mistake("population_std", symptom=shown, ask="torch.std divides the sum of squared deviations by which "
                "count: N or N − 1?", fix="Divide by N − 1 (the sample std, like torch.std), not by N.",
                formula=_Q4_FORMULA)


@check(CHAPTER, "q4", hint=(
    "reread chapter 5's 'AllGather for \"global statistics\" — wrong': why is the spread of per-rank stds not "
    "the std of all the data, and what could each rank send instead?",
    "counts, sums and sums of squares ADD across ranks, means and stds do not: total them over the ranks, then "
    "take the mean and the sample variance (N − 1, like torch.std) of all N values from those totals",
    "std of per-rank stds is not the data's std: sum counts, sums and sums of squares over "
    "ranks, then mean = Σx/N and var = (Σx² − N·mean²)/(N − 1)"))
def q4(global_mean_std: Callable) -> str:
    """``global_mean_std(stats)``: stats is a (world_size, 3) array of per-rank ``[count, sum, sum of
    squares]`` (what all_gather returns); returns the global (mean, unbiased std)."""
    rng = np.random.default_rng(check_seed())
    cases = 0
    for _ in range(20):
        n = int(rng.integers(1, 9))
        parts = [rng.normal(rng.uniform(-20, 20), rng.uniform(0.1, 5), size=int(rng.integers(2, 400))) for _ in range(n)]
        stats = np.array([[len(p), p.sum(), (p ** 2).sum()] for p in parts], dtype=np.float64)
        data = np.concatenate(parts)
        got = global_mean_std(stats.copy())
        expect(isinstance(got, (tuple, list)) and len(got) == 2, f"expected (mean, std), got {short(got)}")
        mean, std = float(got[0]), float(got[1])
        want_mean, want_std = float(data.mean()), float(data.std(ddof=1))
        if not (np.isclose(mean, want_mean, rtol=1e-6, atol=1e-9) and np.isclose(std, want_std, rtol=1e-6, atol=1e-9)):
            _q4_mistake(global_mean_std, stats, mean, std)
        expect(np.isclose(mean, want_mean, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {short([len(p) for p in parts])} samples: mean {mean:.6g}, expected {want_mean:.6g}")
        expect(np.isclose(std, want_std, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {short([len(p) for p in parts])} samples: std {std:.6g}, expected {want_std:.6g}")
        cases += 1
    return f"{cases} random splits of data over ranks"


# ---------------------------------------------------------------------------------------------
_Q5_SMALL = ("all_reduce", 1e9, 2, 4, 1.0)   # 2 all_reduces of 1 GB on 4 ranks at 1 GB/s: 2 × 1e9 × 1.5 / 1e9 = 3 s
_Q5_FORMULA = ("t = ops_per_step × S × factor / (busbw_GBps × 1e9); factor 2(n−1)/n for all_reduce, (n−1)/n for "
               "all_gather and reduce_scatter, 1 for broadcast")


def _q5_rules(collective: str, message: float, ops: int, group: int, busbw: float) -> dict[str, float]:
    f = C.bus_factor(collective, group)
    right = ops * message * f / (busbw * 1e9)
    return {"no_bus_factor": right / f, "divided_by_factor": right / f ** 2, "one_operation": right / ops,
            "units_GB": right * 1e9, "units_GB_inverse": right / 1e9}


def _q5_mistake(fn: Callable, args: tuple, got: float) -> None:
    collective, message, ops, group, busbw = args
    want = ops * message * C.bus_factor(collective, group) / (busbw * 1e9)
    for name, value in _q5_rules(*args).items():
        if np.isclose(value, want, rtol=1e-9) or not np.isclose(got, value, rtol=1e-6):
            continue
        small = _try(fn, *_Q5_SMALL)
        if small is not None and np.isclose(small, _q5_rules(*_Q5_SMALL)[name], rtol=1e-6):
            args, got = _Q5_SMALL, small
            collective, message, ops, group, busbw = args
        f = C.bus_factor(collective, group)
        on_bus = got * busbw * 1e9
        call = (f"comm_seconds_per_step({collective!r}, {_n(message)}, {ops}, {group}, {_n(busbw)}) returned "
                f"{got:.6g} s: at busbw {_n(busbw)} GB/s that is the time of {on_bus:.4g} bytes on the bus")
        name = "units" if name.startswith("units") else name
        if name == "no_bus_factor":
            mistake(name, symptom=f"{call}, exactly the {ops} × S = {ops * message:.4g} bytes of the messages — as "
                    f"if {_an(collective)} on {group} ranks put only its S bytes on the bus",
                    ask=f"busbw counts the bytes a collective puts on the bus: how many does one {collective} of S "
                        f"bytes on {group} ranks count as?",
                    fix=f"Multiply S by the bus factor ({_FACTOR_TEXT[collective]} = {f:.4g} here) before "
                        "dividing by busbw.", formula=_Q5_FORMULA)
        if name == "divided_by_factor":
            mistake(name, symptom=f"{call}, fewer than the {ops} × S = {ops * message:.4g} bytes of the messages "
                    f"(the bus factor here is {f:.4g} > 1)" if f > 1 else f"{call}, more than the {ops} × S = "
                    f"{ops * message:.4g} bytes of the messages, though the bus factor is {f:.4g} < 1",
                    ask="Does the bus factor make the bytes on the bus more or fewer than S — and is your factor "
                        "on top of the fraction or under it?",
                    fix="t = S × factor / busbw: multiply S by the factor, do not divide by it.", formula=_Q5_FORMULA)
        if name == "one_operation":
            mistake(name, symptom=f"{call}: the bus bytes of ONE {collective}, while a step runs {ops} of them",
                    ask="How many of these collectives does one training step run?",
                    fix="Multiply the time of one collective by ops_per_step.", formula=_Q5_FORMULA)
        mistake("units", symptom=f"{call} — a factor 10⁹ away from the bytes the step's {ops} collectives move",
                ask="In which unit is busbw_GBps, and how many bytes per second is that?",
                fix="Convert GB/s to bytes/s (× 1e9) before dividing: t = bytes / (busbw_GBps × 1e9).",
                formula=_Q5_FORMULA)


@check(CHAPTER, "q5", hint=(
    "chapter 5's traffic table gives the bytes and the count of each collective per step; 'The cost model: algbw, "
    "busbw and α–β' gives the rate. Time is bytes over a rate — which bytes does busbw count?",
    "busbw is defined so that one collective takes (the bytes it puts on the bus) / busbw, and those bytes are "
    "S times the collective's bus factor; a step runs ops_per_step of them; convert GB/s to bytes/s",
    "one collective of S bytes on a ring of n ranks takes t = S × factor / busbw (busbw in "
    "bytes/s: GB/s × 1e9; factor (n−1)/n for all_gather and reduce_scatter, 2(n−1)/n for "
    "all_reduce, 1 for broadcast); a step runs ops_per_step of them"))
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
            want = ops * message * C.bus_factor(collective, group) / (busbw * 1e9)
            call = f"comm_seconds_per_step({collective!r}, {_n(message)}, {ops}, {group}, {_n(busbw)})"
            got = comm_seconds_per_step(collective, message, ops, group, busbw)
            expect(isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool)
                   and np.isfinite(float(got)), f"{call} returned {short(got)}; expected a number of seconds")
            got = float(got)
            if not np.isclose(got, want, rtol=1e-9):
                args = (collective, message, ops, group, busbw)
                _q5_mistake(comm_seconds_per_step, args, got)
                expect(False, f"{call} = {got:.6g} s, expected {want:.6g} s: at busbw {busbw:g} GB/s your time moves "
                       f"{got * busbw * 1e9:.4g} bytes over the bus, {got * busbw * 1e9 / (ops * message):.4g} × the "
                       f"{ops} × {message:g} bytes of the step's messages")
            cases += 1
    return f"{cases} random collectives, group sizes and links"
