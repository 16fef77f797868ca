"""Exercise checks of chapter 5 (NCCL collectives): ``from labsupport.check import ch05 as check``.

q1 the reduce-scatter phase of the ring · q2 busbw from a measured time · q3 which collective
for DP, TP and ZeRO · q4 the NCCL guide's "global std" snippet, corrected · q5 the time a TP
group spends in its collectives per step, from the chapter's traffic table and a busbw (transfer).
Each check calls the learner's function on fresh random inputs and compares with
``labsupport.distributed.collectives``.
"""
from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from labsupport.distributed import collectives as C
from labsupport.distributed.hardware import H100_SXM_NODE
from labsupport.check._core import chapter_summary, check, check_seed, expect, Sealed, short

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
                    sender = (r - 1) % n
                    expect(False, f"after ONE step (steps=1) with n={n}, rank {r} chunk {c} is "
                                  f"{short(None if have is None else have.tolist(), 60)}, expected {want.tolist()}: "
                                  f"in step 0 rank {sender} sends its chunk {sender} to rank {r}, which adds it")
        cases += 1
    for n in [2, 3, 4, 5, 8] + list(rng.integers(2, 9, size=10)):
        n = int(n)
        size = int(rng.choice([n, 2 * n, 3 * n + 1, int(rng.integers(n, 6 * n))]))
        buffers = [rng.integers(-50, 50, size=size) for _ in range(n)]
        copies = [b.copy() for b in buffers]
        got = ring_reduce_scatter([b for b in buffers])     # steps left out: the whole phase
        sim = C.simulate_ring_allreduce(copies)
        expect(all(np.array_equal(b, c) for b, c in zip(buffers, copies)),
               "your function changed the input buffers; work on copies")
        expect(isinstance(got, (list, tuple)) and len(got) == n,
               f"with n={n} ranks, expected a list of {n} per-rank chunk lists, got {short(got)}")
        for r in range(n):
            expect(isinstance(got[r], (list, tuple)) and len(got[r]) == n,
                   f"rank {r}: expected a list of {n} chunks (np.array_split(buffer, {n})), got {short(got[r])}")
            for c in range(n):
                want = sim.states[n - 1][r][sim.bounds[c]:sim.bounds[c + 1]]
                have = np.asarray(got[r][c])
                if have.shape != want.shape or not np.array_equal(have, want):
                    who = sim.contributors[n - 1][r][c]
                    expect(False, f"with n={n} ranks (size {size}), rank {r} chunk {c} is {short(have.tolist(), 60)}, "
                                  f"expected {short(want.tolist(), 60)} = the sum of ranks {list(who)}' chunk {c}")
        cases += 1
    return f"{cases} random rings, every chunk of every rank as in the ring's schedule"


def _parameters(fn: Callable) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


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
            expect(got is not None and np.isfinite(float(got)),
                   f"busbw_from_time({collective!r}, {nbytes:g}, {seconds:.3g}, {n}) returned {short(got)}")
            ok = np.isclose(float(got), want, rtol=1e-9, atol=1e-12)
            hint = ""
            if not ok and want and np.isclose(float(got), want * 1e9, rtol=1e-6):
                hint = " (that is B/s: divide by 1e9 for GB/s)"
            elif not ok and want and np.isclose(float(got), want * 2 ** 30 / 1e9, rtol=1e-6):
                hint = " (that is GiB/s: nccl-tests uses decimal GB = 1e9 bytes)"
            elif not ok and n == 1 and want == 0:
                hint = f" (on one rank nothing crosses a link: the bus factor of {collective} is 0)"
            elif not ok and n > 1 and float(got) > 0 and want > 0:
                used = float(got) / (nbytes / seconds / 1e9)
                factors = {"1 (algbw itself)": 1.0, "2(n−1)/n (all_reduce's)": 2 * (n - 1) / n,
                           "(n−1)/n (all_gather's, reduce_scatter's)": (n - 1) / n}
                named = [k for k, v in factors.items() if np.isclose(used, v, rtol=1e-6)]
                if named:   # several names when the factors coincide (n = 2: 2(n−1)/n = 1)
                    hint = (f" (that is algbw × {' = '.join(named)}; {collective} on {n} ranks needs "
                            f"× {C.bus_factor(collective, n):.4g})")
            expect(ok, f"busbw_from_time({collective!r}, nbytes={nbytes:g}, seconds={seconds:.4g}, world_size={n}) "
                       f"= {float(got):.6g}, expected {want:.6g} GB/s{hint}")
            cases += 1
    return f"{cases} random measurements, 4 collectives"


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
    expect(not bad, f"answers must be one of {CHOICES}; not so for {[(k, answer[k]) for k in bad]}")
    wrong = [k for k in SCENARIOS if [k, answer[k]] not in _ANSWERS]
    expect(not wrong, f"{len(wrong)} of {len(SCENARIOS)} scenarios have another collective: {wrong}")
    ratio = answer.get("zero_bytes_ratio")
    expect(isinstance(ratio, (int, float)) and np.isclose(float(ratio), 1.0),
           f"zero_bytes_ratio = {short(ratio)}: bytes per rank of reduce_scatter + all_gather over those of one "
           "all_reduce of the same gradients, use ring costs (n−1)/n·S and 2(n−1)/n·S"
           + (" (0.5 is one half alone: ZeRO runs both halves)"
              if isinstance(ratio, (int, float)) and np.isclose(float(ratio), 0.5) else ""))
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
        expect(np.isclose(mean, want_mean, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {[len(p) for p in parts]} samples: mean {mean:.6g}, expected {want_mean:.6g} "
               "(a mean of per-rank means is wrong when ranks hold different numbers of samples)")
        if len(parts) > 1 and np.isclose(std, float(np.std([p.std(ddof=1) for p in parts], ddof=1)), rtol=1e-9) \
                and not np.isclose(std, want_std, rtol=1e-6):
            expect(False, f"std {std:.6g} is the spread of the per-rank stds (the guide's bug), not the std of the "
                          "data: combine counts, sums and sums of squares")
        if np.isclose(std, float(data.std(ddof=0)), rtol=1e-9) and not np.isclose(std, want_std, rtol=1e-6):
            expect(False, f"std {std:.6g} is the population std (ddof=0); use the sample std (N − 1), like torch.std")
        expect(np.isclose(std, want_std, rtol=1e-6, atol=1e-9),
               f"{n} ranks with {[len(p) for p in parts]} samples: std {std:.6g}, expected {want_std:.6g}")
        cases += 1
    return f"{cases} random splits of data over ranks"


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
            call = f"comm_seconds_per_step({collective!r}, {message:g}, {ops}, {group}, {busbw:g})"
            got = comm_seconds_per_step(collective, message, ops, group, busbw)
            expect(isinstance(got, (int, float, np.floating)) and np.isfinite(float(got)),
                   f"{call} returned {short(got)}; expected a number of seconds")
            got = float(got)
            hint = ""
            if not np.isclose(got, want, rtol=1e-9):
                if np.isclose(got, want / C.bus_factor(collective, group), rtol=1e-9):
                    hint = " (you used S / busbw: busbw counts the bytes on the bus, multiply S by the bus factor)"
                elif C.bus_factor(collective, group) != 1 and \
                        np.isclose(got, want / C.bus_factor(collective, group) ** 2, rtol=1e-9):
                    hint = " (you divided S by the bus factor; multiply by it)"
                elif np.isclose(got * ops, want, rtol=1e-9):
                    hint = f" (that is one operation; a step runs {ops})"
                elif np.isclose(got, want * 1e9, rtol=1e-6) or np.isclose(got, want / 1e9, rtol=1e-6):
                    hint = " (units: busbw is in GB/s = 1e9 bytes per second)"
            expect(np.isclose(got, want, rtol=1e-9), f"{call} = {got:.6g} s, expected {want:.6g} s{hint}")
            cases += 1
    return f"{cases} random collectives, group sizes and links"
