"""Exercise checks of chapter 6 (end to end): ``from labsupport.check import ch06 as check``.

q1 the data-parallel sampler's slice · q2 the global-batch arithmetic of a config · q3 diagnose
a symptom from a measured log (which row of §6.2.7's table, which fix) · q4 which step, rank and
micro-batch read a domain's k-th sample after a resume (chapter 3's blend + the sampler +
``consumed_samples``) · q5, a transfer exercise: a restart with a changed blend — does the data-plan
guard refuse it, and what would the first micro-batch be if it were accepted.  (The book's exercise
5, NeMo or Hugging Face, is chapter 0's q4, where that trade-off is taught.)  Each check calls the
learner's function on fresh random inputs and compares with ``labsupport.training`` /
``labsupport.config`` / ``labsupport.datasets.blending``.

Each recognised wrong answer is a named mistake (:func:`labsupport.check._core.mistake`): its first
failure shows the symptom — q1 and q2 rerun the learner's function on small hand-picked inputs and show
the smallest that shows it, q3 on a calm log with one field sick — and asks a question; the fix comes on
a repeat of the same mistake, the formula after that.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
from omegaconf import OmegaConf

from labsupport.check._core import (chapter_summary, check, check_seed, expect,
                                    mistake, RAISED, Sealed, short, try_call)
from labsupport.config import ConfigError, parallel_layout
from labsupport.datasets.blending import build_blending_indices, normalize_weights
from labsupport.training.data_plan import DataPlanError, check_plan, consumed_digest, plan_of
from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches

CHAPTER = "ch06"

_SAMPLER = "labsupport.training.sampler"
_BLENDING = "labsupport.datasets.blending"
#: The labsupport functions each question's check compares with: the grader flags an answer that
#: uses them, and hides them from the student's process while it grades (labsupport.workbook.grading).
REFERENCES = {
    "q1": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__"],
    "q2": [f"{_SAMPLER}:num_microbatches"],
    "q4": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__", f"{_BLENDING}:build_blending_indices",
           f"{_BLENDING}:reference_blending_indices", f"{_BLENDING}:greedy_step"],
    "q5": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__", f"{_BLENDING}:build_blending_indices",
           f"{_BLENDING}:reference_blending_indices", f"{_BLENDING}:greedy_step",
           "labsupport.training.data_plan:check_plan", "labsupport.training.data_plan:consumed_digest"],
}


summary = chapter_summary(CHAPTER)


# ------------------------------------------------------------------------------------- q1
def _ints(value: Any) -> list[int] | None:
    try:
        return [int(x) for x in value] if isinstance(value, (list, tuple, range, np.ndarray)) else None
    except (TypeError, ValueError):
        return None


_Q1_FORMULA = ("rank r reads range(consumed + r × micro, consumed + (r + 1) × micro): the group consumed … consumed "
               "+ micro × DP − 1 cut into DP contiguous blocks of micro, in rank order")


def _q1_kinds(got: list[int], consumed: int, micro: int, rank: int, dp: int) -> list[str]:
    """The named mistakes a wrong slice shows, most telling first (empty: right, or not recognised)."""
    start = consumed + rank * micro
    if got == list(range(start, start + micro)):
        return []
    kinds = []
    if micro > 1 and dp > 1 and got == [consumed + rank + j * dp for j in range(micro)]:
        kinds.append("strided")
    if micro > 1 and rank > 0 and got == list(range(consumed + rank, consumed + rank + micro)):
        kinds.append("ranks_overlap")
    if consumed and got == list(range(rank * micro, (rank + 1) * micro)):
        kinds.append("from_zero")
    if dp > 1 and got == list(range(consumed, consumed + micro * dp)):
        kinds.append("whole_group")
    if len(got) != micro:
        kinds.append("wrong_length")
    return kinds


#: the small cases a q1 failure is shrunk to: the smallest group first
_Q1_SMALL = sorted(((g * m * dp, m, r, dp) for dp in (1, 2, 3, 4) for m in (1, 2, 3) for g in (0, 1, 2)
                    for r in range(dp)), key=lambda c: (c[1] * c[3], c[0], c[1], c[2]))


def _q1_fail(fn: Callable, kind: str, case: tuple[int, int, int, int], got: list[int]) -> None:
    """Fail with the named mistake the smallest (consumed, micro, rank, DP) shows (the same one whatever the
    random case was), or with ``kind`` on the random case when no small case shows one."""
    for small in _Q1_SMALL:
        g = _ints(try_call(fn, *small))
        found = _q1_kinds(g, *small) if g is not None else []
        if found:
            case, got, kind = small, g, found[0]
            break
    consumed, micro, rank, dp = case
    call = f"dp_slice(consumed_samples={consumed}, micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})"
    other = (rank + 1) % dp
    theirs = _ints(try_call(fn, consumed, micro, other, dp))
    also = f"; for rank {other} it returns {short(theirs)}" if theirs is not None and other != rank else ""
    if kind == "strided":
        mistake(kind, symptom=f"{call} returned {short(got)}{also}: the ranks' indices interleave",
                ask="Look at the chapter's sampler table: are the indices rank 0 reads in one micro-batch next to "
                    "each other?",
                fix="Give each rank one contiguous block of micro_batch_size indices of the group, in rank order.",
                formula=_Q1_FORMULA)
    if kind == "ranks_overlap":
        shared = sorted(set(got) & set(theirs or []))
        mistake(kind, symptom=f"{call} returned {short(got)}{also}"
                              + (f": both ranks read {short(shared)}" if shared else ""),
                ask="If each rank reads micro_batch_size samples, how far apart are the first indices of two "
                    "neighbouring ranks?",
                fix="Rank r's block starts r × micro_batch_size after consumed_samples, not r after it.",
                formula=_Q1_FORMULA)
    if kind == "from_zero":
        before = "index 0 was" if consumed == 1 else f"indices 0 … {consumed - 1} were"
        mistake(kind, symptom=f"{call} returned {short(got)}; consumed_samples = {consumed} says {before} read "
                              "before this micro-batch",
                ask="After a run has consumed consumed_samples samples, at which index does the sampler go on?",
                fix="Start the group at consumed_samples: add consumed_samples to every index of your block.",
                formula=_Q1_FORMULA)
    if kind == "whole_group":
        mistake(kind, symptom=f"{call} returned {short(got)}: {len(got)} indices for micro_batch_size = {micro}"
                              f"{also}",
                ask="Is the group of micro × DP indices one rank's micro-batch, or shared by all the DP ranks?",
                fix="Return only rank's part: cut the group into DP blocks of micro_batch_size indices and take "
                    "block number rank.",
                formula=_Q1_FORMULA)
    if kind == "wrong_length":
        mistake(kind, symptom=f"{call} returned {short(got)}: {len(got)} indices for micro_batch_size = {micro}",
                ask="How many samples does one micro-batch hold — and does your range include its end?",
                fix="Return exactly micro_batch_size indices: range(start, start + micro_batch_size) stops before "
                    "its end.",
                formula=_Q1_FORMULA)


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the formula
    "reread chapter 6's 'Data parallelism for real': each step the sampler hands out one group of consecutive "
    "sample indices to all the DP ranks together — where does the group start, and which part is rank r's?",
    "the group is the micro_batch_size × data_parallel_size indices right after the samples already consumed; "
    "the ranks split it into equal contiguous blocks in rank order (not every DP-th index)",
    "the sampler gathers micro_batch_size × data_parallel_size indices starting at "
    "consumed_samples; rank r takes the contiguous slice [r × micro, (r + 1) × micro) of that group, i.e. "
    "consumed_samples + r × micro ... + micro − 1"))
def q1(dp_slice: Callable) -> str:
    """``dp_slice(consumed_samples, micro_batch_size, rank, data_parallel_size)`` → list of indices."""
    rng = np.random.default_rng(check_seed())
    for _ in range(60):
        micro, dp = int(rng.integers(1, 9)), int(rng.choice([1, 2, 3, 4, 8, 16]))
        rank = int(rng.integers(0, dp))
        consumed = int(rng.integers(0, 50)) * micro * dp * int(rng.integers(1, 4))
        want = next(iter(MegatronPretrainingSampler(consumed + 10 * micro * dp, consumed, micro, rank, dp)))
        got = dp_slice(consumed, micro, rank, dp)
        call = f"dp_slice(consumed_samples={consumed}, micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})"
        expect(isinstance(got, (list, tuple, range, np.ndarray)), f"{call} returned {short(got)}; expected a list of ints")
        got = [int(x) for x in got]
        if got != want:
            kinds = _q1_kinds(got, consumed, micro, rank, dp)
            if kinds:
                _q1_fail(dp_slice, kinds[0], (consumed, micro, rank, dp), got)
            expect(False, f"{call} returned {short(got)}, expected {want}")
    return "60 random (consumed, micro, rank, DP) cases"

# ------------------------------------------------------------------------------------- q2
def _arith_cfg(devices: int, nodes: int, tp: int, pp: int, micro: int, global_bs: int, seq: int):
    return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                             "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                                       "micro_batch_size": micro, "global_batch_size": global_bs,
                                       "encoder_seq_length": seq}})


def _arith_reference(cfg, steps: int) -> dict[str, int] | None:
    try:
        dp = parallel_layout(cfg).data_parallel
        acc = num_microbatches(cfg.model.global_batch_size, cfg.model.micro_batch_size, dp)
    except (ConfigError, ValueError):
        return None
    return {"data_parallel_size": dp, "accumulation_steps": acc,
            "tokens_per_step": cfg.model.global_batch_size * cfg.model.encoder_seq_length,
            "consumed_samples": steps * cfg.model.global_batch_size}


#: q2's recognised wrong values, per field: (name, value from (devices, nodes, tp, pp, micro, global, seq, steps, dp))
_Q2_WRONG: dict[str, list[tuple[str, Callable[..., int]]]] = {
    "data_parallel_size": [("dp_ignores_pp", lambda d, n, t, p, m, g, s, k, dp: d * n // t),
                           ("dp_one_node", lambda d, n, t, p, m, g, s, k, dp: d // (t * p))],
    "accumulation_steps": [("accumulation_without_dp", lambda d, n, t, p, m, g, s, k, dp: g // m)],
    "tokens_per_step": [("tokens_one_microbatch", lambda d, n, t, p, m, g, s, k, dp: m * s),
                        ("tokens_one_rank", lambda d, n, t, p, m, g, s, k, dp: g // dp * s),
                        ("tokens_without_accumulation", lambda d, n, t, p, m, g, s, k, dp: m * dp * s)],
    "consumed_samples": [("consumed_is_steps", lambda d, n, t, p, m, g, s, k, dp: k),
                         ("consumed_steps_times_micro", lambda d, n, t, p, m, g, s, k, dp: k * m),
                         ("consumed_without_accumulation", lambda d, n, t, p, m, g, s, k, dp: k * m * dp)],
}
_Q2_VALUE_MISTAKES = {name for wrong in _Q2_WRONG.values() for name, _ in wrong}
_Q2_RAISE = ("raise ValueError when (devices × num_nodes) % (TP × PP) != 0 or global_batch_size % "
             "(micro_batch_size × DP) != 0, and only then (TP wider than a node is legal, only slow)")
_Q2_FORMULA = {"data_parallel_size": "DP = devices × num_nodes // (TP × PP)",
               "accumulation_steps": "accumulation_steps = global_batch_size // (micro_batch_size × DP)",
               "tokens_per_step": "tokens_per_step = global_batch_size × encoder_seq_length "
                                  "(= micro × DP × accumulation × seq)",
               "consumed_samples": "consumed_samples = steps × global_batch_size"}


@functools.lru_cache(maxsize=None)
def _small_cfg(case: tuple[int, ...]) -> tuple[Any, dict[str, int] | None]:
    """A (read-only) config for ``case`` and its reference answer, built once: failures are shrunk often."""
    cfg = _arith_cfg(*case[:7])
    OmegaConf.set_readonly(cfg, True)
    return cfg, _arith_reference(cfg, case[7])


def _q2_run(fn: Callable, case: tuple[int, ...]) -> Any:
    """The learner's result for one case, the ValueError it raised, or ``RAISED`` (another exception)."""
    try:
        return fn(_small_cfg(case)[0], case[7])
    except ValueError as exc:
        return exc
    except Exception:  # noqa: BLE001 - the learner's code fails on this small case: it is skipped
        return RAISED


def _q2_kinds(case: tuple[int, ...], got: Any, unambiguous: bool = False) -> list[str]:
    """The named mistakes ``got`` shows for ``case`` (``unambiguous``: only values no other named mistake of
    the same field gives)."""
    devices, nodes, tp, pp, micro, global_bs, seq, steps = case
    want = _small_cfg(case)[1]
    if want is None:
        if not isinstance(got, dict):              # a ValueError (right), or no answer at all
            return []
        return ["accepts_indivisible_layout" if (devices * nodes) % (tp * pp) else "accepts_indivisible_batch"]
    if isinstance(got, ValueError):
        return ["refuses_tp_across_nodes" if tp > devices else "raises_legal_layout"]
    if not isinstance(got, dict):
        return []
    kinds = []
    for key, wrong in _Q2_WRONG.items():
        if key not in got or got[key] == want[key]:
            continue
        values = {name: f(*case, want["data_parallel_size"]) for name, f in wrong}
        for name, value in values.items():
            others = [v for n, v in values.items() if n != name]
            if value != want[key] and got[key] == value and not (unambiguous and value in others):
                kinds.append(name)
    return kinds


#: the small configs a q2 failure is shrunk to: up to 4 GPUs, fewest first (sequence length 16, 2 steps)
_Q2_SMALL = sorted(((d, n, t, p, m, m * k, 16, 2) for d in (1, 2, 4) for n in (1, 2) for t in (1, 2, 4)
                    for p in (1, 2, 3) for m in (1, 2) for k in (1, 2, 3, 4, 6, 8) if d * n <= 4 and t * p <= 2 * d * n),
                   key=lambda c: (c[0] * c[1], c[2] * c[3], c[5], c[4], c[2], c[3], c[0]))


def _gpus(n: Any) -> str:
    return f"{short(n)} GPU" + ("" if n == 1 else "s")


def _q2_call(case: tuple[int, ...]) -> str:
    devices, nodes, tp, pp, micro, global_bs, seq, steps = case
    return (f"batch_arithmetic(devices={devices}, num_nodes={nodes}, TP={tp}, PP={pp}, micro={micro}, "
            f"global={global_bs}, seq={seq}; steps={steps})")


def _q2_fail(fn: Callable, kinds: list[str], case: tuple[int, ...], got: Any) -> None:
    """Fail with the named mistake the smallest config shows unambiguously (the same one whatever the random
    case was; a wrong value before a wrong ValueError, which a wrong value may cause), or with the first of
    ``kinds`` on the random case when no small config shows one."""
    kind, first = kinds[0], None
    for small in _Q2_SMALL:
        g = _q2_run(fn, small)
        found = _q2_kinds(small, g, unambiguous=True) if g is not RAISED else []
        if found and found[0] in _Q2_VALUE_MISTAKES:
            first = (small, g, found[0])
            break
        if found and first is None:
            first = (small, g, found[0])
    if first is not None:
        case, got, kind = first
    devices, nodes, tp, pp, micro, global_bs, seq, steps = case
    call, world = _q2_call(case), devices * nodes
    want = _small_cfg(case)[1]
    dp = want["data_parallel_size"] if want else world // (tp * pp) if world % (tp * pp) == 0 else None
    said = (lambda key: f"{call}: {key} = {short(got[key])}") if isinstance(got, dict) else None
    if kind in ("dp_ignores_pp", "dp_one_node"):
        g = got["data_parallel_size"]
        mistake(kind, symptom=f"{said('data_parallel_size')}: {short(g)} replica(s) of TP × PP = {_gpus(tp * pp)} would "
                              f"need {_gpus(g * tp * pp)}; the run has {devices} per node × {nodes} = {world}",
                ask=("How many GPUs does one model replica take when it is cut by TP and also by PP?"
                     if kind == "dp_ignores_pp" else "How many GPUs does the run have in all, counting every node?"),
                fix=("Divide by TP × PP, not by TP alone." if kind == "dp_ignores_pp"
                     else "Count the GPUs of every node: multiply devices by num_nodes before dividing."),
                formula=_Q2_FORMULA["data_parallel_size"])
    if kind == "accumulation_without_dp":
        g = got["accumulation_steps"]
        mistake(kind, symptom=f"{said('accumulation_steps')}: {short(g)} micro-steps × micro {micro} × DP {dp} = "
                              f"{short(g * micro * dp)} samples per optimizer step, but global_batch_size = {global_bs}",
                ask="In one micro-step, how many samples do all the DP ranks process together?",
                fix="Each micro-step feeds DP ranks at once: divide global_batch_size by micro × DP, not by micro.",
                formula=_Q2_FORMULA["accumulation_steps"])
    if kind in ("tokens_one_microbatch", "tokens_one_rank", "tokens_without_accumulation"):
        g = got["tokens_per_step"]
        asks = {"tokens_one_microbatch": "How many micro-batches, on how many DP ranks, make one optimizer step?",
                "tokens_one_rank": "Does an optimizer step's token count cover one DP rank or all of them?",
                "tokens_without_accumulation": "How many micro-batches does each rank run before the optimizer steps?"}
        fixes = {"tokens_one_microbatch": "Count the whole global batch, every micro-batch on every rank, not one "
                                          "micro-batch.",
                 "tokens_one_rank": "Count all DP ranks together: multiply one rank's tokens by DP.",
                 "tokens_without_accumulation": "Count every accumulation micro-step too, not one micro-step of all "
                                                "ranks."}
        mistake(kind, symptom=f"{said('tokens_per_step')} = {short(g // seq)} × {seq} tokens, but one optimizer step "
                              f"trains on global_batch_size = {global_bs} sequences of {seq} (DP {dp}, "
                              f"accumulation {want['accumulation_steps']})",
                ask=asks[kind], fix=fixes[kind], formula=_Q2_FORMULA["tokens_per_step"])
    if kind in ("consumed_is_steps", "consumed_steps_times_micro", "consumed_without_accumulation"):
        g = got["consumed_samples"]
        asks = {"consumed_is_steps": "Does consumed_samples count optimizer steps, or the samples they read?",
                "consumed_steps_times_micro": "One step reads more than one micro-batch: how many micro-batches, on "
                                              "how many ranks?",
                "consumed_without_accumulation": "How many micro-batches does each rank read before one optimizer "
                                                 "step?"}
        fixes = {"consumed_is_steps": "Multiply the steps by the samples one step reads (the whole global batch).",
                 "consumed_steps_times_micro": "A step reads micro × DP × accumulation samples, the global batch, not "
                                               "one micro-batch.",
                 "consumed_without_accumulation": "Include gradient accumulation: a step reads accumulation groups of "
                                                  "micro × DP samples."}
        per = f", {short(g // steps)} per step" if steps and g % steps == 0 else ""
        mistake(kind, symptom=f"{said('consumed_samples')} after {steps} steps{per}; one step reads "
                              f"global_batch_size = {global_bs} samples",
                ask=asks[kind], fix=fixes[kind], formula=_Q2_FORMULA["consumed_samples"])
    if kind == "accepts_indivisible_layout":
        mistake(kind, symptom=f"{call} returned {short(got)}; {_gpus(world)} cannot be cut into whole replicas of "
                              f"TP × PP = {tp * pp} GPUs",
                ask="What should your function do with a layout whose GPUs do not split into whole model replicas?",
                fix="Test (devices × num_nodes) % (TP × PP) and raise ValueError when it is not 0.",
                formula=_Q2_RAISE)
    if kind == "accepts_indivisible_batch":
        mistake(kind, symptom=f"{call} returned {short(got)}; with DP = {dp}, global_batch_size = {global_bs} samples "
                              f"cannot be cut into whole micro-steps of micro × DP = {micro * dp}",
                ask=f"Can {global_bs} samples be split into whole micro-steps of {micro * dp}? What does the exercise "
                    "ask for when they cannot?",
                fix="After computing DP, raise ValueError when global_batch_size % (micro_batch_size × DP) != 0.",
                formula=_Q2_RAISE)
    if kind == "refuses_tp_across_nodes":
        mistake(kind, symptom=f"{call} raised ValueError({short(str(got))}); TP × PP = {tp * pp} divides the {world} "
                              f"GPUs — only TP = {tp} is wider than one node of {_gpus(devices)}",
                ask="Is a TP group that spans nodes impossible, or only slow? What does the exercise say about it?",
                fix="Do not raise when TP > devices: only the two divisibility tests make a layout impossible.",
                formula=_Q2_RAISE)
    if kind == "raises_legal_layout":
        mistake(kind, symptom=f"{call} raised ValueError({short(str(got))}), but TP × PP = {tp * pp} divides the "
                              f"{world} GPUs and micro × DP = {micro * dp} divides global_batch_size = {global_bs}",
                ask="Work out each of your raise conditions by hand for this config: which one fires, and should it?",
                fix="Raise only when (devices × num_nodes) % (TP × PP) != 0 or global_batch_size % (micro × DP) != 0.",
                formula=_Q2_RAISE)


@check(CHAPTER, "q2", hint=(
    "reread chapter 6's 'One config drives everything': it derives these four numbers from the config; the "
    "data-parallel size is chapter 0's exercise 1",
    "a global batch is micro-batches of micro_batch_size samples, DP of them side by side in each micro-step, "
    "repeated over accumulation steps; tokens per optimizer step count every sample of the global batch; "
    "consumed_samples counts samples, not steps. Impossible layouts raise ValueError.",
    "DP = devices × num_nodes / (TP × PP); accumulation = global / (micro × DP); "
    "tokens per step = global × seq_length; consumed_samples after n steps = n × global. "
    "Raise ValueError when TP × PP does not divide the world or micro × DP does not divide global; TP wider "
    "than a node is legal (slow, chapter 0)."))
def q2(batch_arithmetic: Callable) -> str:
    """``batch_arithmetic(cfg, steps)`` → dict (data_parallel_size, accumulation_steps, tokens_per_step,
    consumed_samples) or ValueError."""
    rng = np.random.default_rng(check_seed())
    good = bad = 0
    while good < 30 or bad < 15:
        devices, nodes = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 16]))
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 3, 4]))
        micro = int(rng.choice([1, 2, 4]))
        global_bs = micro * int(rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 256]))
        seq = int(rng.choice([512, 2048, 4096]))
        steps = int(rng.integers(0, 10_000))
        cfg = _arith_cfg(devices, nodes, tp, pp, micro, global_bs, seq)
        want = _arith_reference(cfg, steps)
        if (want is None and bad >= 15) or (want is not None and good >= 30):
            continue
        case = (devices, nodes, tp, pp, micro, global_bs, seq, steps)
        call = _q2_call(case)
        if want is None:
            try:
                got = batch_arithmetic(cfg, steps)
            except ValueError:
                bad += 1
                continue
            kinds = _q2_kinds(case, got)
            if kinds:
                _q2_fail(batch_arithmetic, kinds, case, got)
            expect(False, f"{call} returned {short(got)}; that layout cannot run, expected ValueError")
        try:
            got = batch_arithmetic(cfg, steps)
        except ValueError as exc:
            _q2_fail(batch_arithmetic, _q2_kinds(case, exc), case, exc)
        expect(isinstance(got, dict), f"{call} returned {type(got).__name__}; expected a dict")
        for key, value in want.items():
            expect(key in got, f"{call}: the dict lacks {key!r}")
        for key, value in want.items():
            if not got[key] == value:
                kinds = _q2_kinds(case, got)
                if kinds:
                    _q2_fail(batch_arithmetic, kinds, case, got)
                expect(False, f"{call}: {key} = {short(got[key])}, expected {value}")
        good += 1
    return f"{good} valid and {bad} impossible random configs"

# ------------------------------------------------------------------------------------- q3
#: The suspects of book §6.2.7's table and the fixes to choose from (options; the pairing is the exercise).
SUSPECTS = ("tokenize_every_step", "padding", "no_boundary_mask", "tokenizer_mismatch", "small_set_oversampled",
            "load_everything")
FIXES = tuple(sorted(("binary_index", "packing", "reset_attention_mask", "cu_seqlens", "same_tokenizer", "cap_epochs",
                      "mmap")))
#: where the boundary mask must act (chapter 4, "When reset_attention_mask takes effect"): an unfused
#: attention path applies the dataloader's dense mask; a fused/flash path (Transformer Engine's
#: attn_mask_type=causal) ignores it and needs THD cu_seqlens (PackedSeqParams, or megatron-core 0.19's
#: inter-document masking).
ATTENTION_PATHS = ("unfused", "fused")
#: the log field each suspect disturbs (for generating logs; reading it from a submission is flagged)
_FIELD = {"tokenize_every_step": "data_share", "padding": "real_token_share",
          "no_boundary_mask": "cross_document_attention", "tokenizer_mismatch": "decode_roundtrip_ok",
          "small_set_oversampled": "small_domain_gap", "load_everything": "rss_over_corpus"}
#: q3's [suspect, fix] pairs — for no_boundary_mask [suspect, attention_path, fix] — sealed (see _core.Sealed).
_FIX = Sealed("labsupport:ch06:q3:fix", [
    "02b4b74461918efc5c2d049038547f787d1a00fcaf8981c0211c831f0d43ae66",
    "2aae9a97760722640572f04508d81a17f7521c87806b63e838b48d915ac4c6e1",
    "59d92e3140863e3288c4ad2acc6d274f9c2ceec9f8eada51bd75ba483488b9a2",
    "5c4f032669dd839c558dbb8b7e8fb7092e5864f79a54a68f557ee07c95b0fa07",
    "86d2379fc3b9a6afd384c065a515364f401b97d8c623be929aa2918c962f243a",
    "8c68839f601e65e69918b0ad8b42bc43ba383805b08fcf0992a51cb16a1f6af6",
    "956ceccaecab38ef961c9a893bb69be8d4a4d4ad398a7992316f607eaa4c706c",
])


def _healthy_log(rng: np.random.Generator) -> dict[str, Any]:
    path = str(rng.choice(ATTENTION_PATHS))
    return {"data_share": float(rng.uniform(0.01, 0.15)), "real_token_share": float(rng.uniform(0.93, 1.0)),
            "cross_document_attention": 0.0, "decode_roundtrip_ok": True,
            "small_domain_gap": float(rng.uniform(0.0, 0.8)),
            "rss_over_corpus": float(rng.uniform(0.001, 0.2)),
            "attention_path": path, "reset_attention_mask": True if path == "unfused" else bool(rng.integers(2))}


def make_symptom_log(suspect: str, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A measured log summary with one thing wrong (``suspect``); fields as in the notebook's table:
    ``data_share`` (data-loader time / step time), ``real_token_share`` (tokens with loss / tokens
    computed), ``cross_document_attention`` (share of allowed attention pairs crossing documents),
    ``decode_roundtrip_ok`` (serving decode of training ids gives the text back),
    ``small_domain_gap`` (held-out loss minus the loss on its own training samples, in nats, for the
    most up-weighted domain: memorisation opens the gap), ``rss_over_corpus`` (resident memory / corpus bytes),
    ``attention_path`` ("unfused": applies the dataloader's mask; "fused": takes no mask) and the config's
    ``reset_attention_mask``.  Mixed documents on the unfused path come with the flag off; on the fused
    path the flag does not matter."""
    rng = np.random.default_rng() if rng is None else rng
    log = _healthy_log(rng)
    field = _FIELD[suspect]
    log[field] = {"data_share": float(rng.uniform(0.5, 0.95)), "real_token_share": float(rng.uniform(0.1, 0.6)),
                  "cross_document_attention": float(rng.uniform(0.01, 0.3)), "decode_roundtrip_ok": False,
                  "small_domain_gap": float(rng.uniform(2.0, 6.0)),
                  "rss_over_corpus": float(rng.uniform(1.0, 1.5))}[field]
    if suspect == "no_boundary_mask":
        log["reset_attention_mask"] = False if log["attention_path"] == "unfused" else bool(rng.integers(2))
    return log


#: healthy ranges of the measured fields (as the question's table states them), a calm log and a sick value each
_HEALTHY = {"data_share": "0.01 – 0.15", "real_token_share": "0.93 – 1.0", "cross_document_attention": "0.0",
            "decode_roundtrip_ok": "True", "small_domain_gap": "0.0 – 0.8", "rss_over_corpus": "0.001 – 0.2"}
_BOUNDS = {"data_share": (0.01, 0.15), "real_token_share": (0.93, 1.0), "small_domain_gap": (0.0, 0.8),
           "rss_over_corpus": (0.001, 0.2)}
_CALM = {"data_share": 0.08, "real_token_share": 0.97, "cross_document_attention": 0.0, "decode_roundtrip_ok": True,
         "small_domain_gap": 0.4, "rss_over_corpus": 0.05, "attention_path": "unfused", "reset_attention_mask": True}
_SICK = {"data_share": 0.7, "real_token_share": 0.35, "cross_document_attention": 0.12, "decode_roundtrip_ok": False,
         "small_domain_gap": 4.0, "rss_over_corpus": 1.2}
_Q3_TABLE = ("one field, one row: data_share high → tokenize_every_step, real_token_share low → padding, "
             "cross_document_attention > 0 → no_boundary_mask, decode_roundtrip_ok false → tokenizer_mismatch, "
             "small_domain_gap high → small_set_oversampled, rss_over_corpus ≥ 1 → load_everything")
#: for each suspect: what its fix must do (tier 2 of a wrong fix) and the rule behind it (tier 3)
_Q3_REMEDY = {
    "tokenize_every_step": ("Tokenize once, offline, into chapter 2's binary .bin/.idx and read ids from it each step: "
                            "'binary_index'.",
                            "data_share falls when a step only reads ids: tokenizing is done once, before training "
                            "(chapter 2)"),
    "padding": ("Fill each row with whole documents back to back (chapter 4) instead of padding one: 'packing'.",
                "real_token_share = tokens with a loss / tokens computed; packing leaves almost no pad tokens "
                "(chapter 4)"),
    "tokenizer_mismatch": ("Serve with the tokenizer the model was trained with (chapter 1): 'same_tokenizer'.",
                           "ids mean something only under the tokenizer that made them: train and serve with one "
                           "(chapter 1)"),
    "small_set_oversampled": ("Cap how many epochs of the small domain the blend may draw (chapter 3): 'cap_epochs'.",
                              "a domain drawn for many epochs is memorised: cap its epochs and give its weight to the "
                              "others (chapter 3)"),
    "load_everything": ("Memory-map the .bin (chapter 2), so only the pages that samples touch are resident: "
                        "'mmap'.",
                        "rss_over_corpus stays far below 1 when the corpus is mapped, not read into memory "
                        "(chapter 2)"),
    "no_boundary_mask": ("On the unfused path turn on 'reset_attention_mask' (the dataloader's mask becomes "
                         "block-diagonal); on the fused path pass the boundaries as 'cu_seqlens'.",
                         "unfused attention applies the dataloader's mask (reset_attention_mask); fused attention "
                         "takes no mask and needs THD cu_seqlens (chapter 4)"),
}


def _q3_calm(suspect: str, like: dict[str, Any]) -> dict[str, Any]:
    """The hand-picked log for ``suspect``: calm values, its one field sick; for no_boundary_mask the
    attention path and flag of ``like`` (the fix depends on them)."""
    log = dict(_CALM)
    log[_FIELD[suspect]] = _SICK[_FIELD[suspect]]
    if suspect == "no_boundary_mask":
        log["attention_path"] = like["attention_path"]
        log["reset_attention_mask"] = False if like["attention_path"] == "unfused" else like["reset_attention_mask"]
    return log


def _q3_answer(fn: Callable, log: dict[str, Any]) -> dict | None:
    got = try_call(fn, dict(log))
    return got if isinstance(got, dict) and {"suspect", "fix"} <= set(got) else None


def _q3_calm_logs() -> list[tuple[str, dict[str, Any]]]:
    """The hand-picked logs a q3 failure is first shown on: each suspect's calm log, in SUSPECTS order
    (no_boundary_mask on the unfused path, and on the fused path with the flag on and off)."""
    out = []
    for suspect in SUSPECTS:
        likes = ([{"attention_path": "unfused"}, {"attention_path": "fused", "reset_attention_mask": True},
                  {"attention_path": "fused", "reset_attention_mask": False}] if suspect == "no_boundary_mask"
                 else [_CALM])
        out += [(suspect, _q3_calm(suspect, like)) for like in likes]
    return out


def _q3_fail(fn: Callable, log: dict[str, Any], suspect: str, got: dict) -> None:
    """Name what is wrong (raises a Mistake): first on the hand-picked logs (the same mistake whatever the
    random log was), else on this random log, whose answer ``got`` was wrong."""
    for truth, calm in _q3_calm_logs():
        again = _q3_answer(fn, calm)
        if again is None or not isinstance(again["suspect"], str) or not isinstance(again["fix"], str):
            continue
        if again["suspect"] != truth and again["suspect"] in SUSPECTS:
            _q3_missed(calm, truth, again["suspect"])
        key = [truth, calm["attention_path"], again["fix"]] if truth == "no_boundary_mask" else [truth, again["fix"]]
        if again["suspect"] == truth and key not in _FIX and again["fix"] in FIXES:
            _q3_fix_mistake(calm, truth, again["fix"])
    if got["suspect"] == suspect:
        _q3_fix_mistake(log, suspect, got["fix"])
    _q3_false_alarm(fn, log, suspect, got["suspect"])


def _q3_missed(calm: dict[str, Any], suspect: str, shown: str) -> None:
    field = _FIELD[shown]
    mistake(f"missed_{suspect}",
            symptom=f"diagnose({short(calm, 400)}) named suspect {shown!r}, whose field {field} = "
                    f"{short(calm[field])} is in its healthy range {_HEALTHY[field]}",
            ask="Compare each field of this log with its healthy range in the question's table: which one "
                "lies outside it?",
            fix=f"{_FIELD[suspect]} = {short(calm[_FIELD[suspect]])} is outside its healthy range "
                f"{_HEALTHY[_FIELD[suspect]]}: that is the row of suspect {suspect!r}.",
            formula=_Q3_TABLE)


def _q3_false_alarm(fn: Callable, log: dict[str, Any], suspect: str, named: str) -> None:
    """``named`` (not ``suspect``) was blamed on a value a calm log does not have: a healthy value near the
    edge of its range, or the flag read as the measurement."""
    calm = _q3_calm(suspect, log)
    field = _FIELD[named]
    if named == "no_boundary_mask":
        shown = dict(calm, attention_path=log["attention_path"], reset_attention_mask=log["reset_attention_mask"])
        if (_q3_answer(fn, shown) or {}).get("suspect") == named:
            log = shown
        mistake("flag_read_as_symptom",
                symptom=f"diagnose({short(log, 400)}) named suspect 'no_boundary_mask', but "
                        f"cross_document_attention = {short(log['cross_document_attention'])}: no attention pair "
                        f"crosses a document (attention_path = {log['attention_path']!r}, reset_attention_mask = "
                        f"{log['reset_attention_mask']})",
                ask="Which field measures whether attention crosses documents — and does the flag say anything on "
                    "the fused path?",
                fix="Decide no_boundary_mask from cross_document_attention > 0, not from reset_attention_mask: on "
                    "the fused path a healthy run may have the flag off.",
                formula="no_boundary_mask ⇔ cross_document_attention > 0; attention_path and reset_attention_mask "
                        "only choose its fix")
    expect(field in _BOUNDS, f"diagnose({short(log, 400)}) named suspect {named!r}, but {field} = "
                              f"{short(log[field])} is healthy in this log; which field is not?")
    lo, hi = _BOUNDS[field]
    for value in (round(log[field], 2), round(log[field], 3), log[field]):   # the same healthy value, in the
        shown = dict(calm, **{field: value})                                  # calm log, as short as it goes
        if lo <= value <= hi and (_q3_answer(fn, shown) or {}).get("suspect") == named:
            log = shown
            break
    mistake(f"false_alarm_{field}",
            symptom=f"diagnose({short(log, 400)}) named suspect {named!r}, but {field} = {short(log[field])} lies "
                    f"inside its healthy range {_HEALTHY[field]}",
            ask=f"Where does your function's threshold for {field} sit, compared with the healthy range the "
                "question's table gives?",
            fix=f"Flag {field} only well outside {_HEALTHY[field]} (a sick run shows about "
                f"{short(_SICK[field])}): put the threshold between the two.",
            formula="a field is sick only outside its healthy range, and then far from its edge: data_share > 0.15, "
                    "real_token_share < 0.93, cross_document_attention > 0, decode_roundtrip_ok false, "
                    "small_domain_gap > 0.8, rss_over_corpus > 0.2")


def _q3_fix_mistake(log: dict[str, Any], suspect: str, fix: str) -> None:
    """``suspect`` is right and ``fix`` (one of FIXES) does not remove it (raises a Mistake)."""
    field = _FIELD[suspect]
    seen = f"diagnose({short(log, 400)}) named suspect {suspect!r}, rightly ({field} = {short(log[field])}), with fix"
    path = log["attention_path"]
    if suspect == "no_boundary_mask" and fix in ("reset_attention_mask", "cu_seqlens"):
        name = "flag_on_fused" if fix == "reset_attention_mask" else "cu_seqlens_on_unfused"
        mistake(name, symptom=f"{seen} {fix!r}; this log's attention_path = {path!r}",
                ask=("Does a fused (flash) attention kernel read the dataloader's attention mask at all?"
                     if path == "fused" else "Which input does the unfused attention path take: the dataloader's "
                                              "dense mask, or cu_seqlens?"),
                fix=("The fused path takes no mask: give it the document boundaries as THD cu_seqlens."
                     if path == "fused" else "The unfused path applies the dataloader's mask: make it block-diagonal "
                                              "with reset_attention_mask."),
                formula=_Q3_REMEDY[suspect][1])
    mistake(f"wrong_fix_{suspect}",
            symptom=f"{seen} {fix!r}, which leaves {field} where it is (healthy: {_HEALTHY[field]})"
                    + (f"; attention_path = {path!r}" if suspect == "no_boundary_mask" else ""),
            ask=f"What does {fix!r} change in the pipeline — and which of chapters 1–4's mechanisms removes the "
                f"cause that {field} shows?",
            fix=_Q3_REMEDY[suspect][0], formula=_Q3_REMEDY[suspect][1])


@check(CHAPTER, "q3", hint=(
    "reread chapter 6's 'The symptom → suspect table, live' (§6.2.7): exactly one field of each log is far from "
    "a healthy run — find it, then the row of the table it belongs to",
    "compare each field with a healthy run: data loading well under half the step, nearly "
    "every computed token has a loss, no attention across documents, the decode round-trips, held-out loss close "
    "to the training loss on the up-weighted domain, memory far below the corpus size",
    "one field, one row: data_share → the tokenizer at every step, real_token_share → padding, "
    "cross_document_attention → no boundary mask, decode_roundtrip_ok → tokenizer mismatch, small_domain_gap → "
    "the small set over-sampled, rss_over_corpus → loading everything; the fix is the mechanism of chapters 1–4 "
    "that removes that cause — for mixed documents it depends on attention_path: an unfused path applies the "
    "dataloader's mask once reset_attention_mask is on, a fused path ignores any mask and needs cu_seqlens"))
def q3(diagnose: Callable) -> str:
    """``diagnose(log)`` → ``{"suspect": one of SUSPECTS, "fix": one of FIXES}``."""
    rng = np.random.default_rng(check_seed())
    cases = [s for s in SUSPECTS for _ in range(5)]
    rng.shuffle(cases)
    for suspect in cases:
        log = make_symptom_log(suspect, rng)
        got = diagnose(dict(log))
        expect(isinstance(got, dict) and {"suspect", "fix"} <= set(got),
               f"diagnose(...) returned {short(got)}; expected {{'suspect': ..., 'fix': ...}}")
        if got["suspect"] != suspect:
            expect(isinstance(got["suspect"], str) and got["suspect"] in SUSPECTS,
                   f"diagnose({short(log, 200)}) named suspect {short(got['suspect'])}; choose one of {SUSPECTS}")
            _q3_fail(diagnose, log, suspect, got)
        key = [suspect, log["attention_path"], got["fix"]] if suspect == "no_boundary_mask" else [suspect, got["fix"]]
        if key not in _FIX:
            expect(isinstance(got["fix"], str) and got["fix"] in FIXES,
                   f"suspect {suspect!r} is right, but fix {short(got['fix'])} is not an option; choose from {FIXES}")
            _q3_fail(diagnose, log, suspect, got)
    return f"{len(cases)} random logs, each with one symptom"


# ------------------------------------------------------------------------------------- q4
def _dyadic_weights(rng: np.random.Generator, n: int, scale: int = 1) -> list[int]:
    """``n`` integer data_prefix weights whose normalised values are exact binary fractions (their
    sum is a power of two times ``scale``), so ``w × step`` has no rounding and ties are real."""
    total = int(rng.choice([4, 8, 16]))
    while True:
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, total), n - 1, replace=False))
        raw = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        if all(raw):
            return [r * scale for r in raw]


def _blend(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Chapter 3's blend of ``size`` samples: (dataset_index, dataset_sample_index)."""
    return build_blending_indices(normalize_weights(weights), size)


def _locate_reference(weights: list[float], domain: int, k: int, consumed: int, micro: int, dp: int,
                      global_bs: int) -> dict[str, int] | None:
    """Where the sampler of a run resumed at ``consumed`` reads ``domain``'s sample ``k``: each
    rank's MegatronPretrainingSampler is walked from ``consumed`` until it hands out that index."""
    size = max(consumed, 1) * 2 + 64
    while True:
        di, si = _blend(weights, size)
        hit = np.flatnonzero((di == domain) & (si == k))
        if hit.size:
            break
        size *= 2
    index = int(hit[0])
    if index < consumed:
        return None
    group, acc = micro * dp, num_microbatches(global_bs, micro, dp)
    total = (index // group + 1) * group
    for rank in range(dp):
        for j, batch in enumerate(MegatronPretrainingSampler(total, consumed, micro, rank, dp)):
            if index in batch:
                return {"blend_index": index, "step": consumed // global_bs + j // acc + 1, "rank": rank,
                        "microbatch": j % acc}
    raise AssertionError(f"blend index {index} was handed to no rank")  # the sampler covers every index


def _q4_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    i, consumed, micro, dp, global_bs = (want["blend_index"], case["consumed_samples"], case["micro_batch_size"],
                                         case["data_parallel_size"], case["global_batch_size"])
    within = i - (want["step"] - 1) * global_bs          # the sample's position inside its step's global batch
    where = (f"{case['call']}: the sample at blend index {i} (position {within} of step {want['step']}'s "
             f"global batch of {global_bs}; micro {micro}, DP {dp})")
    said = f"{where}: you said"
    if got["blend_index"] != i and got["blend_index"] in (case["_next"], case["_previous"]):
        held = case["k"] + (1 if got["blend_index"] == case["_next"] else -1)
        mistake("k_off_by_one",
                symptom=f"{case['call']}: blend index {short(got['blend_index'])} holds sample {held} of domain "
                        f"{case['domain']}, not sample {case['k']}",
                ask="Samples of a domain are numbered from 0: which occurrence of the domain is sample k?",
                fix="Sample k of domain d is the (k + 1)-th blend position whose dataset is d "
                    "(dataset_sample_index = k).",
                formula="blend_index = the i with dataset_index[i] == d and dataset_sample_index[i] == k")
    if got["step"] == want["step"] - 1:
        mistake("step_from_zero",
                symptom=f"{said} step {short(got['step'])}; the first {global_bs} samples (indices "
                        f"0…{global_bs - 1}) are read by step 1",
                ask="Which step reads blend index 0 — is the first optimizer step number 0 or 1?",
                fix="Steps count from 1: step = blend_index // global_batch_size + 1.",
                formula="step = i // global_batch_size + 1 (the resumed run goes on counting)")
    if got["step"] != want["step"] and got["step"] == (i - consumed) // global_bs + 1:
        mistake("step_from_resume",
                symptom=f"{said} step {short(got['step'])}; the checkpoint was written after step "
                        f"{consumed // global_bs}",
                ask=f"consumed_samples = {consumed}: how many steps had run before the resume, and does the "
                    "resumed run start its step count again?",
                fix="The resumed run continues the step count: step = blend_index // global_batch_size + 1, "
                    "not counted from consumed_samples.",
                formula="step = i // global_batch_size + 1")
    if got["step"] != want["step"] and got["step"] == i // (micro * dp) + 1:
        mistake("step_is_microstep",
                symptom=f"{said} step {short(got['step'])}; blend indices 0…{global_bs - 1} are all read in step 1",
                ask=f"An optimizer step takes the whole global batch ({global_bs} samples): how many "
                    "micro-batch groups is that?",
                fix=f"Gradient accumulation: one step = global_batch_size samples = {global_bs // (micro * dp)} "
                    "groups of micro × DP.",
                formula="step = i // global_batch_size + 1; microbatch = (i mod global) // (micro × DP)")
    if got["rank"] != want["rank"] and got["rank"] == within % dp and micro > 1:
        mistake("rank_strided", symptom=f"{said} rank {short(got['rank'])}",
                ask="In exercise 1, does a rank read a contiguous block of the micro × DP group, or every DP-th "
                    "index?",
                fix="Each rank takes a contiguous block of micro samples: rank = (position in the group) // micro.",
                formula="rank = (i mod (micro × DP)) // micro")
    if got["rank"] != want["rank"] and got["rank"] == within // micro and within // micro >= dp:
        mistake("rank_beyond_dp", symptom=f"{said} rank {short(got['rank'])}, but with DP = {dp} the ranks are "
                                          f"0…{dp - 1}",
                ask="The global batch is several micro × DP groups read one after another (gradient "
                    "accumulation): where does the second group start over?",
                fix="Take the position inside its micro × DP group first: rank = (i mod (micro × DP)) // micro.",
                formula="rank = (i mod (micro × DP)) // micro; microbatch = (i mod global) // (micro × DP)")


@check(CHAPTER, "q4", hint=(
    "reread chapter 6's 'Data parallelism for real' and chapter 3's greedy rule: first find where the blend puts "
    "the sample, then which step, micro-batch and rank the sampler hands that position to",
    "the blend position is fixed by chapter 3's rule alone (weights normalised); a resumed sampler starts at "
    "consumed_samples, so anything before it was read before the checkpoint (None); after it, each step is one "
    "global batch of accumulation × (micro × DP) positions and your exercise 1 says which rank reads which",
    "i = the blend position with dataset d and sample k (greedy rule, x = max(i, 1), lowest index on ties); None if "
    "i < consumed_samples; step = i // global + 1; microbatch = (i mod global) // (micro × DP); "
    "rank = (i mod (micro × DP)) // micro"))
def q4(locate_sample: Callable) -> str:
    """``locate_sample(weights, domain, k, consumed_samples, micro_batch_size, data_parallel_size,
    global_batch_size)`` → ``{"blend_index", "step", "rank", "microbatch"}`` or None."""
    rng = np.random.default_rng(check_seed())
    cases: list[tuple] = []
    before = after = 0
    while before < 5 or after < 25:
        n = int(rng.integers(2, 5))
        weights = _dyadic_weights(rng, n, int(rng.choice([1, 1, 3, 5])))
        micro, dp = int(rng.integers(1, 6)), int(rng.choice([1, 2, 3, 4, 5, 6]))
        global_bs = micro * dp * int(rng.integers(1, 5))
        domain, k = int(rng.integers(0, n)), int(rng.integers(0, 80))
        consumed = global_bs * int(rng.choice([0, 2, 3, 5, 7, 11]))   # not 1 step: 'counted from 1' and
        # 'counted from the resume' would give the same wrong step
        want = _locate_reference(weights, domain, k, consumed, micro, dp, global_bs)
        if (want is None and before >= 5) or (want is not None and after >= 25):
            continue
        before, after = before + (want is None), after + (want is not None)
        cases.append((weights, n, micro, dp, global_bs, domain, k, consumed, want))
    # smallest first, so that a failure shows the smallest input that shows it
    cases.sort(key=lambda c: (c[6] + c[7] + c[4], sum(c[0]), c[1]))
    for weights, n, micro, dp, global_bs, domain, k, consumed, want in cases:
        call = (f"locate_sample(weights={weights}, domain={domain}, k={k}, consumed_samples={consumed}, "
                f"micro_batch_size={micro}, data_parallel_size={dp}, global_batch_size={global_bs})")
        got = locate_sample(list(weights), domain, k, consumed, micro, dp, global_bs)
        if want is None:
            expect(got is None, f"{call} returned {short(got)}; that sample sits before consumed_samples = "
                                f"{consumed}: it was read before the checkpoint, expected None")
            continue
        expect(isinstance(got, dict), f"{call} returned {short(got)}; expected a dict with blend_index, step, "
                                      "rank, microbatch (None only for a sample read before the resume)")
        for key in want:
            expect(key in got, f"{call}: the dict lacks {key!r}")
        got = {key: got[key] for key in want}
        if got != want:
            di, si = _blend(weights, want["blend_index"] + 4 * max(weights) * n + 64)
            occ = np.flatnonzero(di == domain)
            case = {"call": call, "consumed_samples": consumed, "micro_batch_size": micro, "data_parallel_size": dp,
                    "global_batch_size": global_bs, "domain": domain, "k": k,
                    "_next": int(occ[k + 1]) if k + 1 < occ.size else -1, "_previous": int(occ[k - 1]) if k else -1}
            _q4_mistake(got, want, case)
            wrong = ", ".join(f"{key} = {short(got[key])} (expected {want[key]})"
                              for key in want if got[key] != want[key])
            expect(False, f"{call}: {wrong}")
    return f"{after} samples read after a resume and {before} read before it, random blends and layouts"


# ------------------------------------------------------------------------------------- q5
class _Samples:
    """One domain's GPT samples as the data-plan guard sees them: sample s is document s (one
    epoch, no shuffle), so a sample's identity is (domain, s)."""

    def __init__(self, n: int) -> None:
        self.num_samples, self.num_epochs = n, 1
        self.shuffle_index = np.arange(n)
        self.sample_index = np.stack([np.arange(n + 1), np.zeros(n + 1, dtype=np.int64)], axis=1)
        self.document_index = np.arange(n + 2)

    def __len__(self) -> int:
        return self.num_samples


class _Blend:
    """A blend of :class:`_Samples` with chapter 3's indices, for :func:`check_plan`."""

    def __init__(self, weights: list[float], size: int) -> None:
        self.dataset_index, self.dataset_sample_index = _blend(weights, size)
        self.weights = normalize_weights(weights)
        self.names = [f"domain{d}" for d in range(len(weights))]
        self.datasets = [_Samples(size + 1) for _ in weights]
        self.size = size

    def __len__(self) -> int:
        return self.size


def _restart_reference(old: list[float], new: list[float], consumed: int, micro: int, rank: int,
                       dp: int) -> dict[str, Any]:
    """The real guard (:func:`check_plan`) on the checkpoint's plan, and the micro-batch
    MegatronPretrainingSampler hands ``rank`` first from the new blend at ``consumed``."""
    size = consumed + micro * dp
    before, after = _Blend(old, size), _Blend(new, size)
    settings = type("S", (), {"seed": 1234, "seq_length": 128, "flags": {}, "max_steps": 1,
                              "global_batch_size": micro * dp, "names": before.names, "weights": before.weights})
    saved = plan_of(settings, before, consumed, consumed_digest(before, consumed).hexdigest())
    try:
        check_plan(saved, settings, after, consumed, "checkpoint", allow=False)
        refused = False
    except DataPlanError:
        refused = True
    batch = next(iter(MegatronPretrainingSampler(size, consumed, micro, rank, dp)))
    first = [[int(after.dataset_index[i]), int(after.dataset_sample_index[i])] for i in batch]
    trained = {(int(d), int(s))
               for d, s in zip(before.dataset_index[:consumed], before.dataset_sample_index[:consumed])}
    return {"refused": refused, "first_microbatch": first,
            "already_trained": sum((d, s) in trained for d, s in first)}


def _pairs(value: Any) -> list[list[int]] | None:
    try:
        return [[int(d), int(s)] for d, s in value]
    except (TypeError, ValueError):
        return None


def _q5_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    old, new, consumed, micro, rank, dp = (case[k] for k in ("old", "new", "consumed", "micro", "rank", "dp"))
    call, size = case["call"], consumed + micro * dp
    di0, si0 = _blend(old, size)
    di1, si1 = _blend(new, size)
    if got["refused"] != want["refused"] and want["refused"]:
        p = int(np.flatnonzero((di0[:consumed] != di1[:consumed]) | (si0[:consumed] != si1[:consumed]))[0])
        mistake("refusal_missed",
                symptom=f"{call}: blend position {p}, already trained on, held sample [{int(di0[p])}, {int(si0[p])}] "
                        f"and now holds [{int(di1[p])}, {int(si1[p])}]; you said not refused",
                ask="What does the data-plan guard recompute on resume — and is it the same here?",
                fix="It hashes which (domain, sample) sits at each of the first consumed_samples blend positions; "
                    "if any of them changed, it refuses.",
                formula="refused = blend(new)[:consumed] ≠ blend(old)[:consumed] as (domain, sample) pairs, "
                        "blend = chapter 3's greedy rule on w / Σw")
    if got["refused"] != want["refused"]:
        same = ("nothing had been trained on yet (consumed_samples = 0)" if not consumed else
                "the first consumed_samples blend positions hold the same samples under both weights"
                + (" (they normalise to the same shares)" if normalize_weights(old) == normalize_weights(new) else ""))
        mistake("refused_weights_not_samples", symptom=f"{call}: you said refused, but {same}",
                ask="Does the guard compare the config's weights, or the samples already trained on?",
                fix="It refuses only when one of the first consumed_samples (domain, sample) pairs changed; "
                    "normalise the weights and compare the two blends' first consumed_samples positions.",
                formula="refused = blend(new)[:consumed] ≠ blend(old)[:consumed], blend = chapter 3's greedy rule "
                        "on w / Σw")
    first = _pairs(got["first_microbatch"])
    positions = list(range(consumed + rank * micro, consumed + (rank + 1) * micro))
    if first == [[int(di0[i]), int(si0[i])] for i in positions]:
        mistake("old_blend", symptom=f"{call}: rank {rank} reads blend positions {positions} first; you gave the "
                                     f"samples the OLD weights {old} put there",
                ask="After the restart (accepted with allow_new_data_plan=true), which blend does the sampler "
                    "index into?",
                fix=f"Build the blend from the NEW weights {new} and read positions {positions} from it.",
                formula="first_microbatch = blend(new)[consumed + rank × micro … "
                        "consumed + (rank + 1) × micro − 1]")
    if consumed and first == [[int(di1[i]), int(si1[i])] for i in range(rank * micro, (rank + 1) * micro)]:
        mistake("from_zero", symptom=f"{call}: you gave the new blend's positions {rank * micro}…"
                                     f"{(rank + 1) * micro - 1}; consumed_samples = {consumed}",
                ask="Where does the resumed sampler start walking the blend?",
                fix="At consumed_samples: rank r reads positions consumed + r × micro … + micro − 1 (exercise 1).",
                formula="first_microbatch = blend(new)[consumed + rank × micro … "
                        "consumed + (rank + 1) × micro − 1]")


@check(CHAPTER, "q5", hint=(
    "reread chapter 6's 'Exact resume' (its 'A changed data plan' cell): what does a checkpoint record about the "
    "data, and what does the resuming run recompute and compare?",
    "the guard rebuilds the blend with the new weights and compares the samples at the positions already trained "
    "on (0 … consumed_samples − 1) with those the checkpoint recorded; accepted anyway, the sampler still starts "
    "at consumed_samples — in the NEW blend — so some samples it hands out may have been trained on already",
    "normalise both weight lists; old, new = chapter 3's blend of each; refused = old[:consumed] ≠ new[:consumed] "
    "as (domain, sample) pairs; first_microbatch = new[consumed + rank × micro … + micro − 1]; already_trained = "
    "how many of those pairs are in old[:consumed]"))
def q5(restart_with_new_blend: Callable) -> str:
    """``restart_with_new_blend(old_weights, new_weights, consumed_samples, micro_batch_size, rank,
    data_parallel_size)`` → ``{"refused": bool, "first_microbatch": [[domain, sample], …],
    "already_trained": int}``."""
    rng = np.random.default_rng(check_seed())
    # 6 of each kind: refused and re-reading trained samples, refused without, accepted with the
    # same shares under other numbers, accepted otherwise (nothing trained yet, or the same prefix)
    room = {"refused, re-read": 6, "refused": 6, "rescaled": 4, "accepted": 4}
    cases: list[tuple] = []
    while any(room.values()):
        n = int(rng.integers(2, 5))
        old = _dyadic_weights(rng, n)
        if rng.random() < 0.25:
            new = [w * int(rng.choice([2, 3, 5])) for w in old]                 # the same shares, other numbers
        else:
            new = _dyadic_weights(rng, n, int(rng.choice([1, 3])))
        micro, dp = int(rng.integers(1, 5)), int(rng.choice([1, 2, 3, 4, 5]))
        consumed = micro * dp * int(rng.integers(0, 9))
        rank = int(rng.integers(0, dp))
        want = _restart_reference(old, new, consumed, micro, rank, dp)
        kind = (("refused, re-read" if want["already_trained"] else "refused") if want["refused"] else
                "rescaled" if normalize_weights(old) == normalize_weights(new) else "accepted")
        if room[kind]:
            room[kind] -= 1
            cases.append((old, new, consumed, micro, rank, dp, want))
    # smallest first, so that a failure shows the smallest input that shows it
    cases.sort(key=lambda c: (c[2] + c[3] * c[5], sum(c[0]) + sum(c[1]), len(c[0])))
    for old, new, consumed, micro, rank, dp, want in cases:
        call = (f"restart_with_new_blend(old_weights={old}, new_weights={new}, consumed_samples={consumed}, "
                f"micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})")
        got = restart_with_new_blend(list(old), list(new), consumed, micro, rank, dp)
        expect(isinstance(got, dict) and {"refused", "first_microbatch", "already_trained"} <= set(got),
               f"{call} returned {short(got)}; expected {{'refused': bool, 'first_microbatch': [[domain, sample], "
               "...], 'already_trained': int}")
        expect(isinstance(got["refused"], (bool, np.bool_)), f"{call}: refused = {short(got['refused'])}; expected "
                                                              "True or False")
        case = {"call": call, "old": old, "new": new, "consumed": consumed, "micro": micro, "rank": rank, "dp": dp}
        first = _pairs(got["first_microbatch"])
        expect(first is not None, f"{call}: first_microbatch = {short(got['first_microbatch'])}; expected a list "
                                  "of [domain, sample] pairs")
        if bool(got["refused"]) != want["refused"] or first != want["first_microbatch"]:
            _q5_mistake({**got, "refused": bool(got["refused"])}, want, case)
            expect(bool(got["refused"]) == want["refused"], f"{call}: refused = {short(got['refused'])}, "
                                                           f"expected {want['refused']}")
            expect(False, f"{call}: first_microbatch = {short(first)}, expected {want['first_microbatch']}")
        expect(got["already_trained"] == want["already_trained"],
               f"{call}: already_trained = {short(got['already_trained'])}, expected {want['already_trained']} "
               f"(of the first micro-batch {want['first_microbatch']})")
    return (f"{len(cases)} random restarts: 12 refused (6 of them re-reading trained samples), 8 accepted "
            "(4 with the same shares under other weights)")
