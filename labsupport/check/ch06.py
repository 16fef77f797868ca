"""Exercise checks of chapter 6 (end to end): ``from labsupport.check import ch06 as check``.

q1 the data-parallel sampler's slice · q2 a config's global-batch arithmetic · q3 a symptom in a measured log
(which row of §6.2.7's table, which fix) · q4 where a domain's k-th sample is read after a resume · q5 (transfer)
a restart with a changed blend.  Per question: input generators, the reference (``labsupport.training``), and the
named mistakes in ``RULES`` (:mod:`labsupport.check.rules`), each shown on the smallest input that shows it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
from omegaconf import OmegaConf

from labsupport.check import layout_mistakes as layout
from labsupport.check._core import chapter_summary, check, check_seed, expect, expect_keys, Sealed, short, try_call
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import by_kind, call_text, first_showing, Rule, Rules
from labsupport.datasets.blending import build_blending_indices, normalize_weights
from labsupport.training import restart
from labsupport.training.sampler import batch_arithmetic, rank_slice
from labsupport.training.symptoms import ATTENTION_PATHS as ATTENTION_PATHS  # noqa: F401 - check.ATTENTION_PATHS
from labsupport.training.symptoms import HEALTHY, HEALTHY_RANGES, sick_log, SICK_VALUES, symptom_log

CHAPTER = "ch06"
TEXTS = load_texts(CHAPTER)
#: every named mistake of each question, by question: see labsupport.check.rules
RULES: dict[str, Rules] = {}
summary = chapter_summary(CHAPTER)


def _ints(value: Any, pairs: bool = False) -> list | None:
    """``value`` as a list of ints (``pairs``: of ``[int, int]`` pairs, from any iterable), None when it is not one."""
    try:
        return [[int(d), int(s)] for d, s in value] if pairs else [int(x) for x in value] if isinstance(
            value, (list, tuple, range, np.ndarray)) else None
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------------- q1
_q1_call = functools.partial(call_text, "dp_slice", "consumed_samples micro_batch_size rank data_parallel_size")
#: each rule's wrong slice of (consumed, micro, rank, DP), tried in this order; wrong_length is any other length
RULES["q1"] = Rules(
    Rule("strided", wrong=lambda c, m, r, d: [c + r + j * d for j in range(m)]),
    Rule("ranks_overlap", wrong=lambda c, m, r, d: list(range(c + r, c + r + m))),
    Rule("from_zero", wrong=lambda c, m, r, d: list(range(r * m, (r + 1) * m))),
    Rule("whole_group", wrong=lambda c, m, r, d: list(range(c, c + m * d))),
    Rule("wrong_length"),
    texts=TEXTS["q1"])
#: the small cases a q1 failure is shrunk to: the smallest group first
_Q1_SMALL = sorted(((g * m * dp, m, r, dp) for dp in (1, 2, 3, 4) for m in (1, 2, 3) for g in (0, 1, 2)
                    for r in range(dp)), key=lambda c: (c[1] * c[3], c[0], c[1], c[2]))


def _q1_kind(case: tuple[int, ...], got: list[int] | None) -> str | None:
    """The first rule whose wrong slice (where it differs from the right one) ``got`` is, else None."""
    want = rank_slice(*case)
    if got is None or got == want:
        return None
    named = [r.name for r in RULES["q1"].values() if r.wrong and got == r.wrong(*case) != want]
    return named[0] if named else "wrong_length" if len(got) != case[1] else None


def _q1_fail(fn: Callable, case: tuple[int, ...], got: list[int]) -> None:
    """Name the mistake on the smallest case that shows one (the random case when none does)."""
    shown = first_showing(lambda c: _ints(fn(*c)), _Q1_SMALL, lambda c, g: bool(_q1_kind(c, g)), True)
    case, got = shown or (case, got)
    consumed, micro, rank, dp = case
    other = (rank + 1) % dp
    theirs = _ints(try_call(fn, consumed, micro, other, dp))
    shared, say = sorted(set(got) & set(theirs or [])), TEXTS["q1"].say
    RULES["q1"].fail(_q1_kind(case, got), call=_q1_call(*case), got=short(got), n=len(got), micro=micro,
                     consumed=consumed, one=consumed == 1, last=consumed - 1,
                     shared=say("shared", shared=short(shared)) if shared else "",
                     also="" if theirs is None or other == rank else say("also", other=other, theirs=short(theirs)))


@check(CHAPTER, "q1", hint=TEXTS["q1"].hint)
def q1(dp_slice: Callable) -> str:
    """``dp_slice(consumed_samples, micro_batch_size, rank, data_parallel_size)`` → list of indices."""
    rng = np.random.default_rng(check_seed())
    for _ in range(60):
        micro, dp = int(rng.integers(1, 9)), int(rng.choice([1, 2, 3, 4, 8, 16]))
        rank = int(rng.integers(0, dp))
        case = (int(rng.integers(0, 50)) * micro * dp * int(rng.integers(1, 4)), micro, rank, dp)
        got, want = dp_slice(*case), rank_slice(*case)
        expect(_ints(got) is not None, TEXTS["q1"].say("not_ints", call=_q1_call(*case), got=short(got)))
        if _ints(got) != want:
            if _q1_kind(case, _ints(got)):
                _q1_fail(dp_slice, case, _ints(got))
            expect(False, TEXTS["q1"].say("wrong", call=_q1_call(*case), got=short(_ints(got)), want=want))
    return "60 random (consumed, micro, rank, DP) cases"


# ------------------------------------------------------------------------------------- q2
def _arith(case: tuple[int, ...], readonly: bool = False) -> tuple[Any, dict[str, int] | None]:
    """The config of ``case`` (devices, nodes, TP, PP, micro, global, seq, steps) and the reference answer (None: the
    layout cannot run)."""
    devices, nodes, tp, pp, micro, global_bs, seq, steps = case
    cfg = OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                            "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                                      "micro_batch_size": micro, "global_batch_size": global_bs,
                                      "encoder_seq_length": seq}})
    OmegaConf.set_readonly(cfg, readonly)
    try:
        return cfg, batch_arithmetic(cfg, steps)
    except ValueError:                                   # a ConfigError too
        return cfg, None


#: a (read-only) config of a small case and its reference, built once: failures are shrunk often
_small_cfg = functools.lru_cache(maxsize=4096)(functools.partial(_arith, readonly=True))
#: the value rules: ``wrong(devices, nodes, TP, PP, micro, global, seq, steps, DP)`` is the wrong value of the
#: answer's field _Q2_FIELD[name]; then the layout rules (chapter 0's q1 names them too).  A text set to "" here
#: is chapter 0's, replaced by this chapter's (texts/ch06.toml); tokens_* and consumed_* share their symptom
#: and formula (the [q2.messages] table)
_M2 = TEXTS["q2"].messages
RULES["q2"] = Rules(
    layout.DIVIDES_BY_TP_ONLY.but(name="dp_ignores_pp", symptom="",
                                  wrong=lambda d, n, t, p, m, g, s, k, dp: d * n // t),
    layout.ONE_NODE_ONLY.but(name="dp_one_node", symptom="", wrong=lambda d, n, t, p, m, g, s, k, dp: d // (t * p)),
    Rule("accumulation_without_dp", wrong=lambda d, n, t, p, m, g, s, k, dp: g // m),
    *(Rule(name, _M2["tokens_symptom"], formula=_M2["tokens_formula"], wrong=wrong) for name, wrong in [
        ("tokens_one_microbatch", lambda d, n, t, p, m, g, s, k, dp: m * s),
        ("tokens_one_rank", lambda d, n, t, p, m, g, s, k, dp: g // dp * s),
        ("tokens_without_accumulation", lambda d, n, t, p, m, g, s, k, dp: m * dp * s)]),
    *(Rule(name, _M2["consumed_symptom"], formula=_M2["consumed_formula"], wrong=wrong) for name, wrong in [
        ("consumed_is_steps", lambda d, n, t, p, m, g, s, k, dp: k),
        ("consumed_steps_times_micro", lambda d, n, t, p, m, g, s, k, dp: k * m),
        ("consumed_without_accumulation", lambda d, n, t, p, m, g, s, k, dp: k * m * dp)]),
    layout.ACCEPTS_INDIVISIBLE.but(name="accepts_indivisible_layout"),
    Rule("accepts_indivisible_batch"),
    layout.REFUSES_TP_ACROSS_NODES.but(fix=""),
    layout.RAISES_LEGAL_LAYOUT.but(ask="", fix=""),
    texts=TEXTS["q2"])
_Q2_FIELD = {name: {"dp": "data_parallel_size", "accumulation": "accumulation_steps", "tokens": "tokens_per_step",
                    "consumed": "consumed_samples"}[name.split("_")[0]]
             for name, rule in RULES["q2"].items() if rule.wrong}
#: the small configs a q2 failure is shrunk to: up to 4 GPUs, fewest first (sequence length 16, 2 steps)
_Q2_SMALL = sorted(((d, n, t, p, m, m * k, 16, 2) for d in (1, 2, 4) for n in (1, 2) for t in (1, 2, 4)
                    for p in (1, 2, 3) for m in (1, 2) for k in (1, 2, 3, 4, 6, 8)
                    if d * n <= 4 and t * p <= 2 * d * n),
                   key=lambda c: (c[0] * c[1], c[2] * c[3], c[5], c[4], c[2], c[3], c[0]))


def _q2_run(fn: Callable, case: tuple[int, ...]) -> Any:
    """The learner's result for one case, or the ValueError it raised."""
    try:
        return fn(_small_cfg(case)[0], case[7])
    except ValueError as exc:
        return exc


def _q2_kind(case: tuple[int, ...], got: Any, unambiguous: bool = False) -> str | None:
    """The first named mistake ``got`` shows for ``case`` (``unambiguous``: a wrong value only when no other rule
    of the same field gives it too)."""
    devices, nodes, tp, pp = case[:4]
    want = _small_cfg(case)[1]
    if want is None:                               # a ValueError (right), or no answer at all
        return None if not isinstance(got, dict) else \
            "accepts_indivisible_layout" if (devices * nodes) % (tp * pp) else "accepts_indivisible_batch"
    if isinstance(got, ValueError):
        return "refuses_tp_across_nodes" if tp > devices else "raises_legal_layout"
    values = {name: RULES["q2"][name].wrong(*case, want["data_parallel_size"]) for name in _Q2_FIELD}
    for name, value in values.items():
        key = _Q2_FIELD[name]
        shared = unambiguous and value in [v for n, v in values.items() if n != name and _Q2_FIELD[n] == key]
        if isinstance(got, dict) and key in got and got[key] == value != want[key] and not shared:
            return name
    return None


def _q2_call(case: tuple[int, ...]) -> str:
    return TEXTS["q2"].messages["call"].format(*case)


def _q2_fail(fn: Callable, case: tuple[int, ...], got: Any) -> None:
    """Name the mistake the smallest config shows unambiguously (a wrong value before a wrong ValueError, which a
    wrong value may cause), or the one of the random case when no small config shows one."""
    run = functools.partial(_q2_run, fn)
    found = (first_showing(run, _Q2_SMALL, lambda c, g: _q2_kind(c, g, True) in _Q2_FIELD, True)
             or first_showing(run, _Q2_SMALL, lambda c, g: _q2_kind(c, g, True) is not None, True))
    case, got = found or (case, got)
    kind = _q2_kind(case, got, unambiguous=found is not None)
    devices, nodes, tp, pp, micro, global_bs, seq, steps = case
    want, world, say = _small_cfg(case)[1], devices * nodes, TEXTS["q2"].say
    dp = want["data_parallel_size"] if want else world // (tp * pp) if world % (tp * pp) == 0 else 0
    facts = {**layout.layout_facts(devices, nodes, tp, pp, upper=True), "call": _q2_call(case), "got": short(got),
             "error": short(str(got)), "micro": micro, "dp": dp, "micro_dp": micro * dp, "global_bs": global_bs,
             "seq": seq, "steps": steps, "acc": want and want["accumulation_steps"],
             "tp_pp_gpus": layout.many(tp * pp, "GPU"), "also_divides": say("also_divides", micro_dp=micro * dp,
                                                                           global_bs=global_bs)}
    if kind in _Q2_FIELD:
        g = got[_Q2_FIELD[kind]]
        facts.update(said=say("said", call=facts["call"], field=_Q2_FIELD[kind], g=short(g)), g=short(g),
                     per_seq=short(g // seq), need=layout.many(g * tp * pp, "GPU"), samples=short(g * micro * dp),
                     per=say("per", per_step=short(g // steps)) if steps and g % steps == 0 else "")
    RULES["q2"].fail(kind, **facts)


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(batch_arithmetic: Callable) -> str:
    """``batch_arithmetic(cfg, steps)`` → dict (data_parallel_size, accumulation_steps, tokens_per_step,
    consumed_samples) or ValueError."""
    rng, say = np.random.default_rng(check_seed()), TEXTS["q2"].say
    good = bad = 0
    while good < 30 or bad < 15:
        d, n, t, p, m = (int(rng.choice(v)) for v in ([1, 2, 4, 8], [1, 2, 4, 16], [1, 2, 4, 8], [1, 2, 3, 4],
                                                       [1, 2, 4]))
        case = (d, n, t, p, m, m * int(rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 256])),
                int(rng.choice([512, 2048, 4096])), int(rng.integers(0, 10_000)))
        (cfg, want), call = _arith(case), _q2_call(case)
        if (want is None and bad >= 15) or (want is not None and good >= 30):
            continue
        try:
            got = batch_arithmetic(cfg, case[7])
        except ValueError as exc:
            if want is None:
                bad += 1
                continue
            _q2_fail(batch_arithmetic, case, exc)
        if _q2_kind(case, got):
            _q2_fail(batch_arithmetic, case, got)
        expect(want is not None, say("no_error", call=call, got=short(got)))
        expect_keys(got, want, say, call=call)
        for key, value in want.items():
            expect(got[key] == value, say("wrong", call=call, key=key, got=short(got[key]), want=value))
        good += 1
    return f"{good} valid and {bad} impossible random configs"


# ------------------------------------------------------------------------------------- q3
#: the log field each suspect disturbs (for generating logs; reading it from a submission is flagged)
_FIELD = {"tokenize_every_step": "data_share", "padding": "real_token_share",
          "no_boundary_mask": "cross_document_attention", "tokenizer_mismatch": "decode_roundtrip_ok",
          "small_set_oversampled": "small_domain_gap", "load_everything": "rss_over_corpus"}
#: The suspects of book §6.2.7's table and the fixes to choose from (options; the pairing is the exercise).
SUSPECTS = tuple(_FIELD)
FIXES = tuple(sorted(("binary_index", "packing", "reset_attention_mask", "cu_seqlens", "same_tokenizer", "cap_epochs",
                      "mmap")))
#: q3's [suspect, fix] pairs — for no_boundary_mask [suspect, attention_path, fix] — sealed (see _core.Sealed).
_FIX = Sealed.load("labsupport:ch06:q3:fix")
def make_symptom_log(suspect: str, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A measured log summary with one thing wrong (``suspect``): its field sick, the rest healthy
    (:func:`labsupport.training.symptoms.symptom_log`, which describes the fields)."""
    return symptom_log(_FIELD[suspect], rng)


#: missed_*, wrong_fix_* and false_alarm_*: one rule per suspect or field, with the texts its family shares
#: ([q3.messages]; each wrong_fix_* has its own fix and formula)
_M3 = TEXTS["q3"].messages
RULES["q3"] = Rules(
    *(Rule(f"missed_{s}", *(_M3[f"missed_{f}"] for f in ("symptom", "ask", "fix", "formula"))) for s in SUSPECTS),
    *(Rule(f"wrong_fix_{s}", _M3["wrong_fix_symptom"], _M3["wrong_fix_ask"]) for s in SUSPECTS),
    Rule("flag_on_fused"),
    Rule("cu_seqlens_on_unfused"),
    Rule("flag_read_as_symptom"),
    *(Rule(f"false_alarm_{f}", *(_M3[f"false_alarm_{t}"] for t in ("symptom", "ask", "fix", "formula")))
      for f in HEALTHY_RANGES),
    texts=TEXTS["q3"])


#: the hand-picked logs a q3 failure is first shown on: each suspect's calm log, in SUSPECTS order
#: (no_boundary_mask on the unfused path, and on the fused path with the flag on and off)
_Q3_CALM_LOGS = [(s, sick_log(_FIELD[s], *like)) for s in SUSPECTS for like in (
    [("unfused",), ("fused", True), ("fused", False)] if s == "no_boundary_mask" else [()])]


def _q3_named(fn: Callable, log: dict[str, Any]) -> Any:
    """The suspect the learner names for ``log`` (None when the answer is not a dict of suspect and fix)."""
    got = try_call(fn, dict(log))
    return got["suspect"] if isinstance(got, dict) and {"suspect", "fix"} <= set(got) else None


def _fix_key(suspect: str, log: dict[str, Any], fix: Any) -> list:
    return [suspect, log["attention_path"], fix] if suspect == "no_boundary_mask" else [suspect, fix]


def _q3_fail(fn: Callable, log: dict[str, Any], suspect: str, got: dict) -> None:
    """Name what is wrong (raises a Mistake): first on the hand-picked logs (the same mistake whatever the
    random log was), else on this random log, whose answer ``got`` was wrong."""
    for truth, calm in _Q3_CALM_LOGS:
        again = try_call(fn, dict(calm))
        if not (isinstance(again, dict) and all(isinstance(again.get(k), str) for k in ("suspect", "fix"))):
            continue
        if again["suspect"] != truth and again["suspect"] in SUSPECTS:
            RULES["q3"].fail(f"missed_{truth}", **_q3_facts(calm, again["suspect"], _FIELD[again["suspect"]]),
                             own=_FIELD[truth], own_value=short(calm[_FIELD[truth]]),
                             own_healthy=HEALTHY[_FIELD[truth]], suspect=truth)
        if again["suspect"] == truth and _fix_key(truth, calm, again["fix"]) not in _FIX and again["fix"] in FIXES:
            _q3_wrong_fix(calm, truth, again["fix"])
    if got["suspect"] == suspect:
        _q3_wrong_fix(log, suspect, got["fix"])
    # a false alarm: blamed on a value no calm log has
    named, calm = got["suspect"], sick_log(_FIELD[suspect], log["attention_path"], log["reset_attention_mask"])
    field = _FIELD[named]
    if named == "no_boundary_mask":                          # the flag read as the measurement
        shown = dict(calm, attention_path=log["attention_path"], reset_attention_mask=log["reset_attention_mask"])
        log = shown if _q3_named(fn, shown) == named else log
        RULES["q3"].fail("flag_read_as_symptom", **_q3_facts(log, named, field), path=log["attention_path"],
                         flag=log["reset_attention_mask"])
    expect(field in HEALTHY_RANGES, TEXTS["q3"].say("healthy", log=short(log, 400), named=named, field=field,
                                                    value=short(log[field])))
    for value in (round(log[field], 2), round(log[field], 3), log[field]):   # the same healthy value, in the
        shown = dict(calm, **{field: value})                                  # calm log, as short as it goes
        if HEALTHY_RANGES[field][0] <= value <= HEALTHY_RANGES[field][1] and _q3_named(fn, shown) == named:
            log = shown
            break
    RULES["q3"].fail(f"false_alarm_{field}", **_q3_facts(log, named, field), sick=short(SICK_VALUES[field]))


def _q3_facts(log: dict[str, Any], named: str, field: str) -> dict[str, Any]:
    return {"log": "{" + ", ".join(f"{k}: {short(v)}" for k, v in log.items())[:400] + "}", "named": named,
            "field": field, "value": short(log[field]), "healthy": HEALTHY[field]}   # the log on one line, compact


def _q3_wrong_fix(log: dict[str, Any], suspect: str, fix: str) -> None:
    """``suspect`` is right and ``fix`` (one of FIXES) does not remove it (raises a Mistake)."""
    name = {"reset_attention_mask": "flag_on_fused", "cu_seqlens": "cu_seqlens_on_unfused"}.get(fix, "") \
        if suspect == "no_boundary_mask" else ""
    RULES["q3"].fail(name or f"wrong_fix_{suspect}", **_q3_facts(log, suspect, _FIELD[suspect]), fix=fix,
                     path=TEXTS["q3"].say("path", path=log["attention_path"]) if suspect == "no_boundary_mask" else "")


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
def q3(diagnose: Callable) -> str:
    """``diagnose(log)`` → ``{"suspect": one of SUSPECTS, "fix": one of FIXES}``."""
    rng, say = np.random.default_rng(check_seed()), TEXTS["q3"].say
    cases = [s for s in SUSPECTS for _ in range(5)]
    rng.shuffle(cases)
    for suspect in cases:
        log = make_symptom_log(suspect, rng)
        got = diagnose(dict(log))
        expect(isinstance(got, dict) and {"suspect", "fix"} <= set(got), say("not_dict", got=short(got)))
        if got["suspect"] != suspect:
            expect(isinstance(got["suspect"], str) and got["suspect"] in SUSPECTS,
                   say("not_suspect", log=short(log, 200), named=short(got["suspect"]), suspects=SUSPECTS))
            _q3_fail(diagnose, log, suspect, got)
        if _fix_key(suspect, log, got["fix"]) not in _FIX:
            expect(isinstance(got["fix"], str) and got["fix"] in FIXES,
                   say("not_fix", suspect=suspect, fix=short(got["fix"]), fixes=FIXES))
            _q3_fail(diagnose, log, suspect, got)
    return f"{len(cases)} random logs, each with one symptom"


# ------------------------------------------------------------------------------------- q4
def _dyadic_weights(rng: np.random.Generator, n: int, scale: int = 1) -> list[int]:
    """``n`` integer data_prefix weights whose normalised values are exact binary fractions (their
    sum is a power of two times ``scale``), so ``w × step`` has no rounding and ties are real."""
    total = int(rng.choice([4, 8, 16]))
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, total), n - 1, replace=False))   # distinct: none is 0
    return [(b - a) * scale for a, b in zip([0] + cuts, cuts + [total])]


#: for each rule of q4 (tried in RULES order): the field it gets wrong, and its wrong values from the case's facts
_Q4_WRONG = {"raw_weights": ("blend_index", lambda f: (f["raw"],)),
             "k_off_by_one": ("blend_index", lambda f: (f["next"], f["previous"])),
             "step_from_zero": ("step", lambda f: (f["want_step"] - 1,)),
             "step_from_resume": ("step", lambda f: ((f["i"] - f["consumed"]) // f["global_bs"] + 1,)),
             "step_is_microstep": ("step", lambda f: (f["i"] // (f["micro"] * f["dp"]) + 1,)),
             "rank_strided": ("rank", lambda f: (f["within"] % f["dp"],) if f["micro"] > 1 else ()),
             "rank_beyond_dp": ("rank", lambda f: (f["within"] // f["micro"],) if f["within"] // f["micro"] >= f["dp"]
                                else ())}
RULES["q4"] = Rules(*map(Rule, _Q4_WRONG), texts=TEXTS["q4"])


def _q4_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    i, g, k = want["blend_index"], case["global_bs"], case["k"]
    w = case["weights"]
    occ = np.flatnonzero(restart.blend_order(w, size := i + 4 * max(w) * len(w) + 64)[0] == case["domain"])
    f = {**case, "i": i, "want_step": want["step"], "within": i - (want["step"] - 1) * g, "last": g - 1,
         "next": int(occ[k + 1]) if k + 1 < occ.size else -1, "previous": int(occ[k - 1]) if k else -1,
         "resumed": case["consumed"] // g, "groups": g // (case["micro"] * case["dp"]), "dp_last": case["dp"] - 1,
         "index": short(got["blend_index"]), "step": short(got["step"]), "rank": short(got["rank"])}
    raw = np.flatnonzero(np.all(np.transpose(build_blending_indices(w, size)) == (case["domain"], k), axis=1))
    f.update(held=k + (1 if got["blend_index"] == f["next"] else -1), raw=int(raw[0]) if raw.size else -1)
    for name, (key, wrong) in _Q4_WRONG.items():   # a wrong blend index explains a wrong step or rank: name it
        if got[key] != want[key] and got[key] in wrong(f) and (key == "blend_index" or got["blend_index"] == i):
            RULES["q4"].fail(name, **f)


@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
def q4(locate_sample: Callable) -> str:
    """``locate_sample(weights, domain, k, consumed_samples, micro_batch_size, data_parallel_size,
    global_batch_size)`` → ``{"blend_index", "step", "rank", "microbatch"}`` or None."""
    rng, say = np.random.default_rng(check_seed()), TEXTS["q4"].say

    def draw() -> tuple[dict, Any, str]:
        n = int(rng.integers(2, 5))
        weights = _dyadic_weights(rng, n, int(rng.choice([1, 1, 3, 5])))
        micro, dp = int(rng.integers(1, 6)), int(rng.choice([1, 2, 3, 4, 5, 6]))
        global_bs = micro * dp * int(rng.integers(1, 5))
        domain, k = int(rng.integers(0, n)), int(rng.integers(0, 80))
        # not 1 step: 'counted from 1' and 'counted from the resume' would give the same wrong step
        case = dict(weights=weights, domain=domain, k=k, consumed=global_bs * int(rng.choice([0, 2, 3, 5, 7, 11])),
                    micro=micro, dp=dp, global_bs=global_bs)
        want = restart.locate_sample(*case.values())             # the arguments, in the signature's order
        return case, want, "before" if want is None else "after"
    room, raised = {"before": 5, "after": 25}, None
    for case, want in by_kind(dict(room), draw, lambda c: (c[0]["k"] + c[0]["consumed"] + c[0]["global_bs"],
                                                         sum(c[0]["weights"]), len(c[0]["weights"]))):
        call = case["call"] = call_text("locate_sample", "weights domain k consumed_samples micro_batch_size "
                                    "data_parallel_size global_batch_size", *case.values())
        try:
            got = locate_sample(list(case["weights"]), case["domain"], case["k"], case["consumed"], case["micro"],
                                case["dp"], case["global_bs"])
        except Exception as exc:  # noqa: BLE001 - a mistake named on a later case may explain it (raw weights)
            raised = raised or exc
            continue
        if want is None:
            expect(got is None, say("before_resume", call=call, got=short(got), consumed=case["consumed"]))
            continue
        expect_keys(got, want, say, call=call)
        got = {key: got[key] for key in want}
        if got != want:
            _q4_mistake(got, want, case)
            if raised:
                raise raised
            expect(False, f"{call}: " + ", ".join(say("wrong", key=key, got=short(got[key]), want=want[key])
                                                  for key in want if got[key] != want[key]))
    if raised:
        raise raised
    return f"{room['after']} samples read after a resume and {room['before']} read before it, random blends and layouts"


# ------------------------------------------------------------------------------------- q5
RULES["q5"] = Rules(*map(Rule, ("refusal_missed", "refused_weights_not_samples", "old_blend", "from_zero")),
                    texts=TEXTS["q5"])


def _q5_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    old, new, consumed, micro, rank, dp = (case[k] for k in ("old", "new", "consumed", "micro", "rank", "dp"))
    (di0, si0), (di1, si1) = (restart.blend_order(w, consumed + micro * dp) for w in (old, new))
    changed = np.flatnonzero((di0[:consumed] != di1[:consumed]) | (si0[:consumed] != si1[:consumed]))
    p = int(changed[0]) if changed.size else 0
    positions = list(range(consumed + rank * micro, consumed + (rank + 1) * micro))
    first = _ints(got["first_microbatch"], pairs=True)
    said = TEXTS["q5"].messages
    same = (said["nothing_trained"] if not consumed else said["same_prefix"]
            + (said["same_shares"] if normalize_weights(old) == normalize_weights(new) else ""))
    facts = {**case, "p": p, "was": [int(di0[p]), int(si0[p])] if consumed else None, "same": same,
             "now": [int(di1[p]), int(si1[p])] if consumed else None, "positions": positions,
             "start": rank * micro, "end": (rank + 1) * micro - 1}
    if got["refused"] != want["refused"]:
        RULES["q5"].fail("refusal_missed" if want["refused"] else "refused_weights_not_samples", **facts)
    if first == [[int(di0[i]), int(si0[i])] for i in positions]:
        RULES["q5"].fail("old_blend", **facts)
    if consumed and first == [[int(di1[i]), int(si1[i])] for i in range(rank * micro, (rank + 1) * micro)]:
        RULES["q5"].fail("from_zero", **facts)


@check(CHAPTER, "q5", hint=TEXTS["q5"].hint)
def q5(restart_with_new_blend: Callable) -> str:
    """``restart_with_new_blend(old_weights, new_weights, consumed_samples, micro_batch_size, rank,
    data_parallel_size)`` → ``{"refused": bool, "first_microbatch": [[domain, sample], …],
    "already_trained": int}``."""
    rng, say = np.random.default_rng(check_seed()), TEXTS["q5"].say
    # 6 of each kind: refused and re-reading trained samples, refused without, accepted with the
    # same shares under other numbers, accepted otherwise (nothing trained yet, or the same prefix)
    def draw() -> tuple[tuple, dict, str]:
        n = int(rng.integers(2, 5))
        old = _dyadic_weights(rng, n)
        if rng.random() < 0.25:
            new = [w * int(rng.choice([2, 3, 5])) for w in old]                 # the same shares, other numbers
        else:
            new = _dyadic_weights(rng, n, int(rng.choice([1, 3])))
        micro, dp = int(rng.integers(1, 5)), int(rng.choice([1, 2, 3, 4, 5]))
        consumed = micro * dp * int(rng.integers(0, 9))
        case = (old, new, consumed, micro, int(rng.integers(0, dp)), dp)
        want = restart.restart_with_new_blend(*case)
        return case, want, (("refused, re-read" if want["already_trained"] else "refused") if want["refused"] else
                            "rescaled" if normalize_weights(old) == normalize_weights(new) else "accepted")
    cases = by_kind({"refused, re-read": 6, "refused": 6, "rescaled": 4, "accepted": 4}, draw,
                  lambda c: (c[0][2] + c[0][3] * c[0][5], sum(c[0][0]) + sum(c[0][1]), len(c[0][0])))
    for (old, new, consumed, micro, rank, dp), want in cases:
        call = call_text("restart_with_new_blend", "old_weights new_weights consumed_samples micro_batch_size rank "
                     "data_parallel_size", old, new, consumed, micro, rank, dp)
        got = restart_with_new_blend(list(old), list(new), consumed, micro, rank, dp)
        expect(isinstance(got, dict) and {"refused", "first_microbatch", "already_trained"} <= set(got),
               say("not_dict", call=call, got=short(got)))
        expect(isinstance(got["refused"], (bool, np.bool_)), say("not_bool", call=call, got=short(got["refused"])))
        first = _ints(got["first_microbatch"], pairs=True)
        expect(first is not None, say("not_pairs", call=call, got=short(got["first_microbatch"])))
        if bool(got["refused"]) != want["refused"] or first != want["first_microbatch"]:
            _q5_mistake({**got, "refused": bool(got["refused"])}, want, dict(
                call=call, old=old, new=new, consumed=consumed, micro=micro, rank=rank, dp=dp))
            expect(bool(got["refused"]) == want["refused"],
                   say("refused", call=call, got=short(got["refused"]), want=want["refused"]))
            expect(False, say("first", call=call, got=short(first), want=want["first_microbatch"]))
        expect(got["already_trained"] == want["already_trained"], say(
            "already", call=call, got=short(got["already_trained"]), want=want["already_trained"],
            first=want["first_microbatch"]))
    return (f"{len(cases)} random restarts: 12 refused (6 of them re-reading trained samples), 8 accepted "
            "(4 with the same shares under other weights)")
