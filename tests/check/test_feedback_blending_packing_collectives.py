"""Issue #24, chapters 3–5: every named mistake of the checks gives feedback in tiers that teach —
the first time, the symptom (what the learner's result shows, on a small input) and a question, not
the fix; the fix on a repeat; the formula from the third time on — in plain numbers.  Also ex04 q4's
(b): the gain with whole 300-token examples in rows of 4096 is exactly 13."""
from __future__ import annotations

import math

import numpy as np
import pytest

from labsupport.check import _core, ch03, ch04, ch05
from labsupport.check.rules import Rules
from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.blending import cap_weights, expected_epochs, greedy_step
from labsupport.distributed import collectives as C

from tests.check.test_ch03_wrong_answers_and_hints import exercise_2
from tests.check.test_ch04 import GOOD_Q4, pad_multiple
from tests.check.test_ch05 import GOOD_Q3, all_to_all, ring_reduce_scatter
from tests.check.test_hint_tiers import (_comm, _epochs_raw, _fit, _global_mean_std, _positions_and_mask,
                                         _resume, _sample_documents, _spread_of_stds)


@pytest.fixture(autouse=True)
def _fresh():
    _core.reset()
    yield
    _core.reset()


# --- wrong answers, written as a learner would ------------------------------------------------
def _greedy(error, keep_tie=False, x_of=lambda step: max(step, 1), smallest=False):
    def step(weights, counts, s):
        x = x_of(s)
        best, best_error = 0, error(weights[0], counts[0], x)
        for d in range(1, len(weights)):
            e = error(weights[d], counts[d], x)
            if (e < best_error if smallest else (e >= best_error if keep_tie else e > best_error)):
                best, best_error = d, e
        return best
    return step


_MEGATRON = lambda w, c, x: w * x - c          # noqa: E731


def _no_value_error(weights, sizes, total, max_epochs):
    try:
        return cap_weights(weights, sizes, total, max_epochs)
    except ValueError:
        return [w / sum(weights) for w in weights]


def _cap_equal_share(weights, sizes, total, max_epochs):
    """Caps like the rule, but shares the rest EQUALLY among the datasets not capped."""
    w = [x / sum(weights) for x in weights]
    cap = [max_epochs * s / total for s in sizes]
    if sum(c for c, x in zip(cap, w) if x > 0) < 1:
        raise ValueError("no blend fits")
    capped = [False] * len(w)
    while True:
        room, free = 1 - sum(c for c, f in zip(cap, capped) if f), capped.count(False)
        out = [c if f else room / free for c, f in zip(cap, capped)]
        over = [not f and o > c * (1 + 1e-12) for o, c, f in zip(out, cap, capped)]
        if not any(over):
            return out
        capped = [f or o for f, o in zip(capped, over)]


def _exercise_2_epochs(epochs):
    return lambda total, code, weight: {**exercise_2(total, code, weight), "b_code_epochs": epochs(total, code, weight)}


def _walk(sizes, doc_idx, seq, k, n_tokens=None, order=None, inclusive=False):
    want = seq + 1 if n_tokens is None else n_tokens
    pos, out, start = 0, [], k * seq
    for d in (doc_idx if order is None else range(len(sizes))):
        a, b = max(start - pos, 0), min(start + want - pos, sizes[d])
        if a < b:
            out.append((d, a, b - inclusive))
        pos += sizes[d]
    return out


def _ring(send=lambda r, s, n: r - s, to=lambda r, n: r + 1, add=True, extra=0):
    def ring(buffers, steps=None):
        n = len(buffers)
        chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
        for s in range((n - 1 if steps is None else steps) + extra):
            sends = [(r, send(r, s, n) % n, chunks[r][send(r, s, n) % n].copy()) for r in range(n)]
            for src, c, data in sends:
                if add:
                    chunks[to(src, n) % n][c] += data
                else:
                    chunks[to(src, n) % n][c] = data
        return chunks
    return ring


def _mean_of_means(stats):
    stats = np.asarray(stats, dtype=float)
    return float(np.mean(stats[:, 1] / stats[:, 0])), _global_mean_std(stats)[1]


def _population_std(stats):
    n, s, ss = np.asarray(stats, dtype=float).sum(axis=0)
    mean = s / n
    return mean, np.sqrt((ss - n * mean ** 2) / n)


def _cp_multiple(cp):
    return 2 * cp if cp > 1 else 1


def _sp_multiple(cp, tp, sp):
    return cp * tp if sp and tp > 1 else 1


def _q4(**change):
    return lambda: {**GOOD_Q4, **change}


def _q3(ratio):
    return lambda: {**GOOD_Q3, "zero_bytes_ratio": ratio}


_BUSBW = C.bus_bandwidth
_PASS = {   # a correct answer for every check
    ch03.q1: _greedy(_MEGATRON), ch03.q2: expected_epochs, ch03.q3: cap_weights, ch03.q4: exercise_2,
    ch03.q5: _resume(), ch04.q1: lambda lengths, s: 1 - sum(lengths) / (len(lengths) * s),
    ch04.q2: lambda lengths, size: _ffd(lengths, size).tolist(), ch04.q3: _positions_and_mask(),
    ch04.q4: _q4(), ch04.q5: _sample_documents(), ch04.q6: pad_multiple, ch05.q1: ring_reduce_scatter, ch05.q2: _BUSBW,
    ch05.q3: lambda: dict(GOOD_Q3), ch05.q4: _global_mean_std, ch05.q5: _comm, ch05.q6: all_to_all,
}

#: Chapters 3 and 4: the wrong answer planted for each rule of the module's RULES table, by (question,
#: rule name), with a phrase its symptom must show (in numbers, on the smallest input).
PLANTED = {
    ch03: {
        ("q1", "tie_to_last"): (_greedy(_MEGATRON, keep_tie=True), "tie exactly at the largest error"),
        ("q1", "float_order"): (_greedy(lambda w, c, x: w - c / x), "a difference of rounding"),
        ("q1", "step_zero"): (_greedy(_MEGATRON, x_of=lambda step: step), "at step 0 nothing has been taken yet"),
        ("q1", "furthest_ahead"): (_greedy(_MEGATRON, smallest=True), "is the SMALLEST"),
        ("q2", "not_normalised"): (_epochs_raw, "tokens read from the datasets, in a run of 8 tokens"),
        ("q2", "upside_down"): (lambda w, n, t: [1 / e for e in expected_epochs(w, n, t)], "the run takes [4.0, 4.0]"),
        ("q2", "tokens_not_epochs"): (lambda w, n, t: [x / sum(w) * t for x in w], "numbers of tokens the run takes"),
        ("q3", "weight_lost"): (ch03._cap_once_no_share, "the weights add up to 0.75, not 1"),
        ("q3", "one_round"): (ch03._cap_one_round, "dataset 1 gets 0.48, above its cap 0.35"),
        ("q3", "ratio_not_kept"): (_cap_equal_share, "had weights 0.3 : 0.1 and now 0.375 : 0.375"),
        ("q3", "no_value_error"): (_no_value_error, "cap_weights([1, 1], [1, 1], 4, 1) returned [0.5, 0.5]"),
        ("q4", "epochs_upside_down"): (_exercise_2_epochs(lambda t, c, w: c / (w * t)), "b_code_epochs = 0.04"),
        ("q4", "epochs_without_weight"): (_exercise_2_epochs(lambda t, c, w: t / c), "b_code_epochs = 50.0"),
        ("q5", "restart_at_zero"): (_resume(from_zero=True), "those of a blend at sample 0"),
        ("q5", "counts_frozen"): (_resume(update=False), "if the counts stayed at"),
    },
    ch04: {
        ("q1", "real_share"): (lambda lengths, s: sum(lengths) / (len(lengths) * s),
                               "padding_share([1], 4) returned 0.25"),
        ("q1", "percentage"): (lambda lengths, s: 100 * (1 - sum(lengths) / (len(lengths) * s)), "returned 75.0"),
        ("q1", "rows_of_longest"): (lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths)),
                                    "padding_share([1, 3], 4)"),
        ("q2", "input_order"): (_fit(lambda lengths: lambda i: i), "first_fit_decreasing([1, 2], 2)"),
        ("q2", "shortest_first"): (_fit(lambda lengths: lambda i: (lengths[i], i)), "the SHORTEST"),
        ("q2", "best_fit"): (_fit(lambda lengths: lambda i: (-lengths[i], i), True),
                             "first_fit_decreasing([5, 3, 3, 1], 7)"),
        # issue #29: the packs compared as packs, in NeMo's order — argsort(lengths)[::-1] reverses equal lengths
        ("q2", "ties_reversed"): (_fit(lambda lengths: lambda i: (-lengths[i], -i)),
                                  "returned the packs [[1, 0]]; NeMo's first_fit_decreasing gives [[0, 1]]; examples 0 "
                                  "and 1 are equally long (1 token), and your packs take 1 before 0"),
        ("q3", "restart_at_eod"): (_positions_and_mask(eod_starts=True, mask=None), "position_ids [0, 0, 1]"),
        ("q3", "no_restart"): (lambda t, e: (np.arange(len(t)), None), "keep counting across the EOD"),
        ("q3", "inverted"): (lambda t, e: (_positions_and_mask()(t, e)[0], ~_positions_and_mask()(t, e)[1]),
                             "the exact opposite"),
        ("q3", "causal_only"): (_positions_and_mask(mask="causal"), "lets query 1 see key 0"),
        ("q3", "eod_cut_off"): (
            lambda t, e: (_positions_and_mask()(t, e)[0], _positions_and_mask(eod_starts=True)(t, e)[1]),
            "hides key 0 from query 1"),
        ("q4", "real_share"): (_q4(a_padding_share=300 / 4096), "that is 300 / 4096"),
        ("q4", "share_percentage"): (_q4(a_padding_share=100 * (1 - 300 / 4096)), "a share above 1"),
        ("q4", "examples_over_row"): (_q4(b_examples_per_pack=14), "14 × 300 = 4200 tokens"),
        ("q4", "gain_over_row"): (_q4(b_speedup=14), "14 × 300 = 4200 real tokens"),
        ("q4", "gain_counts_slots"): (_q4(b_speedup=4096 / 300), "= 4096 / 300"),
        ("q4", "gain_upside_down"): (_q4(b_speedup=300 / 4096), "FEWER real tokens"),
        ("q5", "stride_s_plus_1"): (_sample_documents(stride_extra=1), "sample_documents([8], [0], 2, 1)"),
        ("q5", "s_tokens"): (lambda *a: _walk(*a, n_tokens=a[2]), "the S = 2 inputs only"),
        ("q5", "stop_inclusive"): (lambda *a: _walk(*a, inclusive=True), "one token short"),
        ("q5", "ignores_doc_idx"): (lambda *a: _walk(*a, order=True), "sample_documents([2, 3], [1, 0], 2, 0)"),
        ("q6", "cp_not_doubled"): (lambda cp, tp, sp: math.lcm(cp, _sp_multiple(cp, tp, sp)),
                                   "pad_multiple(2, 1, False) returned 2, expected 4: with CP = 2 each sequence is "
                                   "cut into 2·CP = 4 chunks"),
        ("q6", "sp_when_off"): (lambda cp, tp, sp: math.lcm(_cp_multiple(cp), _sp_multiple(cp, tp, True)),
                                "pad_multiple(1, 2, False) returned 2, expected 1: sequence parallelism is off"),
        ("q6", "doubles_cp_1"): (lambda cp, tp, sp: math.lcm(2 * cp, _sp_multiple(cp, tp, sp)),
                                 "pad_multiple(1, 1, False) returned 2, expected 1"),
        ("q6", "sp_over_tp_only"): (lambda cp, tp, sp: math.lcm(_cp_multiple(cp), tp if sp and tp > 1 else 1),
                                    "pad_multiple(2, 4, True) returned 4, expected 8: 4 is a multiple of TP = 4"),
        ("q6", "sp_ignored"): (lambda cp, tp, sp: _cp_multiple(cp),
                               "pad_multiple(1, 2, True) returned 1, expected 2"),
        ("q6", "product_not_lcm"): (lambda cp, tp, sp: _cp_multiple(cp) * _sp_multiple(cp, tp, sp),
                                    "pad_multiple(2, 2, True) returned 16 = 4 × 4, expected 4 = lcm(4, 4)"),
    },
}
#: every (module, question, rule name) of the chapters' rule tables
RULE_ROWS = [(module, q, name) for module in PLANTED for q, table in module.RULES.items() for name in table]

#: (check, wrong answer, the mistake it names, a phrase of the symptom)
MISTAKES = [
    (ch04.q4, _q4(b_speedup=14.5), "gain_over_row", "14.5 × 300 = 4350 real tokens"),   # a second answer for one rule
]


def _plain_text(text: str) -> bool:
    return not any(bad in text for bad in ("np.", "array(", "tensor(", "dtype="))


def _teaches_in_tiers(check, wrong, name, phrase, capsys):
    first, second, third = check(wrong), check(wrong), check(wrong)
    for n, result in enumerate((first, second, third), start=1):
        assert (result.status, result.mistake, result.tier) == ("failed", name, n), result.message
        assert _plain_text(result.message) and _plain_text(result.hint), result.message
    assert phrase in first.message, first.message                            # the symptom, in numbers
    ask, fix, formula = first.hint, second.hint, third.hint
    assert ask.rstrip().endswith("?")                                         # tier 1 asks
    assert fix not in first.message + ask and not fix.rstrip().endswith("?")  # ... and does not give the fix
    assert formula not in first.message + ask
    assert first.message == second.message == third.message                  # the same symptom each time
    out = capsys.readouterr().out
    assert f"hint: {ask}" in out and f"hint: {fix}" in out and f"hint: {formula}" in out
    assert check(_PASS[check]).passed                                         # and a right answer passes
    return ask, fix, formula


@pytest.mark.parametrize("check, wrong, name, phrase", MISTAKES,
                         ids=[f"{c.chapter}-{c.question}-{n}" for c, _, n, _ in MISTAKES])
def test_a_named_mistake_teaches_in_tiers(check, wrong, name, phrase, capsys):
    _teaches_in_tiers(check, wrong, name, phrase, capsys)


@pytest.mark.parametrize("module, question, name", RULE_ROWS, ids=[f"{m.CHAPTER}-{q}-{n}" for m, q, n in RULE_ROWS])
def test_every_rule_of_chapters_3_and_4_teaches_in_tiers(module, question, name, capsys):
    """The planted wrong answer of each rule: tier 1 = its symptom + ask, a repeat = its fix, a third = its
    formula — the texts of the rule's row (those that need no facts of the case are shown word for word)."""
    wrong, phrase = PLANTED[module][(question, name)]
    rule = module.RULES[question][name]
    shown = _teaches_in_tiers(getattr(module, question), wrong, name, phrase, capsys)
    for text, tier in zip((rule.ask, rule.fix, rule.formula), shown):
        assert text and (tier == text if "{" not in text else tier.startswith(text.split("{")[0])), (text, tier)


def test_every_rule_of_chapters_3_and_4_has_a_planted_answer_and_no_more():
    rows = {(m, q, n) for m, q, n in RULE_ROWS}
    planted = {(m, q, n) for m, answers in PLANTED.items() for q, n in answers}
    assert rows == planted, (rows ^ planted)
    assert len(rows) >= 36 and all(isinstance(m.RULES[q], Rules) for m, q, _ in rows)


@pytest.mark.parametrize("check", list(_PASS), ids=lambda c: f"{c.chapter}-{c.question}")
def test_a_correct_answer_passes_with_no_mistake(check, capsys):
    result = check(_PASS[check])
    assert result.passed and not result.mistake and result.tier == 0, result.message


# --- ex04 q4 (b): 13 whole examples, gain 13 ----------------------------------------------------
@pytest.mark.parametrize("gain", [13, 13.0, 3900 / 300, np.int64(13)])
def test_ex04_q4_accepts_exactly_the_gain_of_whole_examples(gain, capsys):
    assert ch04.q4(_q4(b_speedup=gain)).passed


@pytest.mark.parametrize("gain", [14, 14.5])
def test_ex04_q4_rejects_14_and_14_5_for_the_same_reason(gain, capsys):
    """#24: 14 was accepted and 14.5 rejected with a message that contradicted it; both hold more real
    tokens than a 4096 row has slots, and both get the same named mistake."""
    result = ch04.q4(_q4(b_speedup=gain))
    assert result.status == "failed" and result.mistake == "gain_over_row"
    shown = int(gain) if float(gain).is_integer() else gain
    assert f"b_speedup = {shown}:" in result.message and f"{gain * 300:g} real tokens" in result.message
    assert "more than its 4096 slots" in result.message and "np." not in result.message


@pytest.mark.parametrize("gain", [13.5, 13.65, 4096 / 300, 12])
def test_ex04_q4_rejects_any_other_gain(gain, capsys):
    assert ch04.q4(_q4(b_speedup=gain)).status == "failed"


def test_ex04_q4_names_the_other_failing_parts_with_the_mistake(capsys):
    result = ch04.q4(_q4(b_speedup=14, c_must_do=["block_mask"]))
    assert result.mistake == "gain_over_row" and "| also: (c) not the right set" in result.message


# --- the specific faults of #24 ---------------------------------------------------------------
def test_ex03_q1_trap_leads_with_rounding_prints_the_whole_weights_and_short_errors(capsys):
    """Issue #29: the rounding trap says so first and shows the two errors that matter to 6 digits (equal there),
    not three lists of 17-digit floats; the call keeps the whole weights, so it can be rerun."""
    result = ch03.q1(_greedy(lambda w, c, x: w - c / x))
    w, counts, step = ch03._order_sensitive_states()[0]
    errors = [wd * float(max(step, 1)) - c for wd, c in zip(w, counts)]
    assert result.mistake == "float_order"
    assert f"greedy_step({w}, {counts}, {step})" in result.message          # the whole weights
    assert result.message.index("a difference of rounding") < result.message.index("Computed")
    assert not any(repr(e) in result.message for e in errors if len(repr(e)) > 10)   # no 17-digit errors
    assert f"({max(errors):.6g})" in result.message
    assert greedy_step(w, counts, step) == max(range(len(w)), key=lambda d: (errors[d], -d))   # no broken tie


def test_ch04_q3_says_in_words_that_an_eod_is_cut_off_from_its_document(capsys):
    result = ch04.q3(lambda t, e: (_positions_and_mask()(t, e)[0], _positions_and_mask(eod_starts=True)(t, e)[1]))
    assert "(query, key) =" not in result.message and "same document" in result.message


def test_ch04_q3_an_unnamed_wrong_mask_is_told_in_words(capsys):
    def one_off(tokens, eod):
        pos, mask = _positions_and_mask()(tokens, eod)
        mask = mask.copy()
        if mask.shape[0] > 2:
            mask[-1, 0] = not mask[-1, 0]
        return pos, mask
    result = ch04.q3(one_off)
    assert result.status == "failed" and not result.mistake
    assert "query" in result.message and "key" in result.message
    assert any(w in result.message for w in ("in its future", "same document", "earlier document"))


def test_ch05_q1_says_whose_data_a_chunk_holds(capsys):
    result = ch05.q1(_ring(add=False))
    assert "holds rank 3; the ring's schedule gives it ranks 0 and 3" in result.message


def test_ch05_q1_an_unnamed_wrong_first_step_is_told_in_words(capsys):
    result = ch05.q1(_ring(send=lambda r, s, n: r + 2 - s))
    assert result.status == "failed" and not result.mistake
    assert "after ONE step (steps=1) with n=4, rank 0's chunk 1 holds ranks 0 and 3" in result.message


def test_ch05_q2_message_states_busbw_as_algbw_times_the_factor(capsys):
    wrong = lambda coll, s, t, n: s / t / 1e9 * 2 * (n - 1) / n     # noqa: E731 - all_reduce's factor everywhere
    first, second = ch05.q2(wrong), ch05.q2(wrong)
    assert "algbw × 1.5 — all_reduce's factor on 4 ranks" in first.message
    assert second.hint == "busbw = algbw × factor, and all_gather's factor is (n−1)/n (0.75 on 4 ranks)."
    assert "(algbw itself) =" not in first.message + second.message


def test_ch05_q5_unnamed_wrong_time_is_told_in_bytes(capsys):
    result = ch05.q5(lambda c, s, o, n, b: 3.0)
    assert result.status == "failed" and not result.mistake
    assert "bytes over the bus" in result.message and "np." not in result.message


# --- chapter 5: every rule of ch05.RULES, planted ----------------------------------------------------
#: (question, rule name) → (the wrong answer written for that rule, a phrase of the symptom it shows)
CH05_PLANTED = {
    ("q1", "replaced_not_added"): (_ring(add=False), "rank 0's own data is gone"),
    ("q1", "wrong_direction"): (_ring(to=lambda r, n: r - 1), "the other way round the ring"),
    ("q1", "one_step_too_many"): (_ring(extra=1), "one step more"),
    ("q1", "wrong_chunk"): (_ring(send=lambda r, s, n: r + s), "another chunk travelled"),
    ("q2", "bytes_per_second"): (lambda coll, s, t, n: _BUSBW(coll, s, t, n) * 1e9,
                                 "busbw_from_time('broadcast', 1000000000, 1, 2) returned 1000000000"),
    ("q2", "gibibytes"): (lambda coll, s, t, n: _BUSBW(coll, s, t, n) * 1e9 / 2 ** 30, "nccl-tests prints 1.07374"),
    ("q2", "one_rank"): (lambda coll, s, t, n: s / t / 1e9, "on a single rank no byte crosses a link"),
    ("q2", "wrong_factor"): (lambda coll, s, t, n: s / t / 1e9 * 2 * (n - 1) / n, "all_reduce's factor on 4 ranks"),
    ("q3", "ratio_one_half"): (_q3(0.5), "ONE of ZeRO's two collectives"),
    ("q3", "ratio_doubled"): (_q3(2.0), "twice an all_reduce's bytes"),
    ("q4", "mean_of_means"): (_mean_of_means, "halfway between the two ranks' means"),
    ("q4", "spread_of_stds"): (_spread_of_stds, "how much they differ from each other"),
    ("q4", "population_std"): (_population_std, "√(5.2 / 5)"),
    ("q5", "no_bus_factor"): (lambda c, s, o, n, b: o * s / (b * 1e9), "only its S bytes on the bus"),
    ("q5", "divided_by_factor"): (lambda c, s, o, n, b: o * s / C.bus_factor(c, n) / (b * 1e9), "fewer than the 2 × S"),
    ("q5", "one_operation"): (lambda c, s, o, n, b: _comm(c, s, 1, n, b), "the bus bytes of ONE all_reduce"),
    ("q5", "units"): (lambda c, s, o, n, b: _comm(c, s, o, n, b) * 1e9, "a factor 10⁹ away"),
    ("q6", "returned_input"): (lambda b: [np.asarray(x).copy() for x in b], "every rank still holds its own buffer"),
    ("q6", "own_chunk_only"): (lambda b: [np.split(np.asarray(x), len(b))[r] for r, x in enumerate(b)],
                               "kept only its own chunk r"),
    ("q6", "all_gathered"): (lambda b: [np.concatenate(b) for _ in b], "(an all-gather)"),
}
CH05_RULES = [(q, name) for q, table in ch05.RULES.items() for name in table]


@pytest.mark.parametrize("question, name", CH05_RULES, ids=[f"ch05-{q}-{n}" for q, n in CH05_RULES])
def test_every_rule_of_ch05_teaches_in_tiers(question, name, capsys):
    """The wrong answer planted for a rule is named by it: tier 1 the symptom (in numbers) and the rule's
    question, a repeat its fix, a third time its formula — the rule's own texts."""
    check, rule, (wrong, phrase) = getattr(ch05, question), ch05.RULES[question][name], CH05_PLANTED[(question, name)]
    results = [check(wrong) for _ in range(3)]
    for n, result in enumerate(results, start=1):
        assert (result.status, result.mistake, result.tier) == ("failed", name, n), result.message
        assert _plain_text(result.message) and _plain_text(result.hint), result.message
        assert result.message == results[0].message                         # the same symptom each time
    assert phrase in results[0].message, results[0].message
    ask, fix, formula = (result.hint for result in results)
    assert ask.rstrip().endswith("?") and not fix.rstrip().endswith("?")
    assert fix not in results[0].message + ask and formula not in results[0].message + ask
    assert formula == rule.formula and formula not in (ask, fix)             # every ch05 rule has a formula
    for text, template in ((ask, rule.ask), (fix, rule.fix)):               # the rule's words, its facts filled in
        head, _, rest = template.partition("{")
        assert text.startswith(head) and text.endswith(template.rpartition("}")[2] if rest else ""), (text, template)
        assert rest or text == template
    out = capsys.readouterr().out
    assert f"hint: {ask}" in out and f"hint: {fix}" in out and f"hint: {formula}" in out
    assert check(_PASS[check]).passed                                        # and a right answer passes


def test_every_rule_of_ch05_has_a_planted_answer():
    """Every rule of ch05.RULES has a planted wrong answer above, and every planted answer names a rule."""
    assert set(CH05_PLANTED) == set(CH05_RULES)
    assert len(CH05_RULES) == 20 and set(ch05.RULES) == {"q1", "q2", "q3", "q4", "q5", "q6"}
