"""Issue #24, chapters 3–5: every named mistake of the checks gives feedback in tiers that teach —
the first time, the symptom (what the learner's result shows, on a small input) and a question, not
the fix; the fix on a repeat; the formula from the third time on — in plain numbers.  Also ex04 q4's
(b): the gain with whole 300-token examples in rows of 4096 is exactly 13."""
from __future__ import annotations

import numpy as np
import pytest

from labsupport.check import _core, ch03, ch04, ch05
from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.blending import cap_weights, expected_epochs, greedy_step
from labsupport.distributed import collectives as C

from tests.check.test_ch03_wrong_answers_and_hints import exercise_2
from tests.check.test_ch04 import GOOD_Q4
from tests.check.test_ch05 import GOOD_Q3, ring_reduce_scatter
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


def _q4(**change):
    return lambda: {**GOOD_Q4, **change}


def _q3(ratio):
    return lambda: {**GOOD_Q3, "zero_bytes_ratio": ratio}


_BUSBW = C.bus_bandwidth
_PASS = {   # a correct answer for every check
    ch03.q1: _greedy(_MEGATRON), ch03.q2: expected_epochs, ch03.q3: cap_weights, ch03.q4: exercise_2,
    ch03.q5: _resume(), ch04.q1: lambda lengths, s: 1 - sum(lengths) / (len(lengths) * s),
    ch04.q2: lambda lengths, size: _ffd(lengths, size).tolist(), ch04.q3: _positions_and_mask(),
    ch04.q4: _q4(), ch04.q5: _sample_documents(), ch05.q1: ring_reduce_scatter, ch05.q2: _BUSBW,
    ch05.q3: lambda: dict(GOOD_Q3), ch05.q4: _global_mean_std, ch05.q5: _comm,
}

#: (check, wrong answer, the mistake it names, a phrase of the symptom)
MISTAKES = [
    (ch03.q1, _greedy(_MEGATRON, keep_tie=True), "tie_to_last", "tie exactly at the largest error"),
    (ch03.q1, _greedy(lambda w, c, x: w - c / x), "float_order", "a difference of rounding"),
    (ch03.q1, _greedy(_MEGATRON, x_of=lambda step: step), "step_zero", "at step 0 nothing has been taken yet"),
    (ch03.q1, _greedy(_MEGATRON, smallest=True), "furthest_ahead", "is the SMALLEST"),
    (ch03.q2, _epochs_raw, "not_normalised", "tokens read from the datasets, in a run of 8 tokens"),
    (ch03.q2, lambda w, n, t: [1 / e for e in expected_epochs(w, n, t)], "upside_down", "the run takes [4.0, 4.0]"),
    (ch03.q2, lambda w, n, t: [x / sum(w) * t for x in w], "tokens_not_epochs", "numbers of tokens the run takes"),
    (ch03.q3, ch03._cap_once_no_share, "weight_lost", "the weights add up to 0.75, not 1"),
    (ch03.q3, ch03._cap_one_round, "one_round", "dataset 1 gets 0.48, above its cap 0.35"),
    (ch03.q3, _cap_equal_share, "ratio_not_kept", "had weights 0.3 : 0.1 and now 0.375 : 0.375"),
    (ch03.q3, _no_value_error, "no_value_error", "cap_weights([1, 1], [1, 1], 4, 1) returned [0.5, 0.5]"),
    (ch03.q4, _exercise_2_epochs(lambda t, c, w: c / (w * t)), "epochs_upside_down", "b_code_epochs = 0.04"),
    (ch03.q4, _exercise_2_epochs(lambda t, c, w: t / c), "epochs_without_weight", "b_code_epochs = 50.0"),
    (ch03.q5, _resume(from_zero=True), "restart_at_zero", "those of a blend at sample 0"),
    (ch03.q5, _resume(update=False), "counts_frozen", "if the counts stayed at"),
    (ch04.q1, lambda lengths, s: sum(lengths) / (len(lengths) * s), "real_share", "padding_share([1], 4) returned 0.25"),
    (ch04.q1, lambda lengths, s: 100 * (1 - sum(lengths) / (len(lengths) * s)), "percentage", "returned 75.0"),
    (ch04.q1, lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths)), "rows_of_longest",
     "padding_share([1, 3], 4)"),
    (ch04.q2, _fit(lambda lengths: lambda i: i), "input_order", "first_fit_decreasing([1, 2], 2)"),
    (ch04.q2, _fit(lambda lengths: lambda i: (lengths[i], i)), "shortest_first", "the SHORTEST"),
    (ch04.q2, _fit(lambda lengths: lambda i: (-lengths[i], i), True), "best_fit", "first_fit_decreasing([5, 3, 3, 1], 7)"),
    (ch04.q3, _positions_and_mask(eod_starts=True, mask=None), "restart_at_eod", "position_ids [0, 0, 1]"),
    (ch04.q3, lambda t, e: (np.arange(len(t)), None), "no_restart", "keep counting across the EOD"),
    (ch04.q3, lambda t, e: (_positions_and_mask()(t, e)[0], ~_positions_and_mask()(t, e)[1]), "inverted",
     "the exact opposite"),
    (ch04.q3, _positions_and_mask(mask="causal"), "causal_only", "lets query 1 see key 0"),
    (ch04.q3, lambda t, e: (_positions_and_mask()(t, e)[0], _positions_and_mask(eod_starts=True)(t, e)[1]),
     "eod_cut_off", "hides key 0 from query 1"),
    (ch04.q4, _q4(a_padding_share=300 / 4096), "real_share", "that is 300 / 4096"),
    (ch04.q4, _q4(a_padding_share=100 * (1 - 300 / 4096)), "share_percentage", "a share above 1"),
    (ch04.q4, _q4(b_examples_per_pack=14), "examples_over_row", "14 × 300 = 4200 tokens"),
    (ch04.q4, _q4(b_speedup=14), "gain_over_row", "14 × 300 = 4200 real tokens"),
    (ch04.q4, _q4(b_speedup=14.5), "gain_over_row", "14.5 × 300 = 4350 real tokens"),
    (ch04.q4, _q4(b_speedup=4096 / 300), "gain_counts_slots", "= 4096 / 300"),
    (ch04.q4, _q4(b_speedup=300 / 4096), "gain_upside_down", "FEWER real tokens"),
    (ch04.q5, _sample_documents(stride_extra=1), "stride_s_plus_1", "sample_documents([8], [0], 2, 1)"),
    (ch04.q5, lambda *a: _walk(*a, n_tokens=a[2]), "s_tokens", "the S = 2 inputs only"),
    (ch04.q5, lambda *a: _walk(*a, inclusive=True), "stop_inclusive", "one token short"),
    (ch04.q5, lambda *a: _walk(*a, order=True), "ignores_doc_idx", "sample_documents([2, 3], [1, 0], 2, 0)"),
    (ch05.q1, _ring(add=False), "replaced_not_added", "rank 0's own data is gone"),
    (ch05.q1, _ring(to=lambda r, n: r - 1), "wrong_direction", "the other way round the ring"),
    (ch05.q1, _ring(extra=1), "one_step_too_many", "one step more"),
    (ch05.q1, _ring(send=lambda r, s, n: r + s), "wrong_chunk", "another chunk travelled"),
    (ch05.q2, lambda coll, s, t, n: _BUSBW(coll, s, t, n) * 1e9, "bytes_per_second",
     "busbw_from_time('broadcast', 1000000000, 1, 2) returned 1000000000"),
    (ch05.q2, lambda coll, s, t, n: _BUSBW(coll, s, t, n) * 1e9 / 2 ** 30, "gibibytes", "nccl-tests prints 1.07374"),
    (ch05.q2, lambda coll, s, t, n: s / t / 1e9, "one_rank", "on a single rank no byte crosses a link"),
    (ch05.q2, lambda coll, s, t, n: s / t / 1e9 * 2 * (n - 1) / n, "wrong_factor", "all_reduce's factor on 4 ranks"),
    (ch05.q3, _q3(0.5), "ratio_one_half", "ONE of ZeRO's two collectives"),
    (ch05.q3, _q3(2.0), "ratio_doubled", "twice an all_reduce's bytes"),
    (ch05.q4, _mean_of_means, "mean_of_means", "halfway between the two ranks' means"),
    (ch05.q4, _spread_of_stds, "spread_of_stds", "how much they differ from each other"),
    (ch05.q4, _population_std, "population_std", "√(5.2 / 5)"),
    (ch05.q5, lambda c, s, o, n, b: o * s / (b * 1e9), "no_bus_factor", "only its S bytes on the bus"),
    (ch05.q5, lambda c, s, o, n, b: o * s / C.bus_factor(c, n) / (b * 1e9), "divided_by_factor", "fewer than the 2 × S"),
    (ch05.q5, lambda c, s, o, n, b: _comm(c, s, 1, n, b), "one_operation", "the bus bytes of ONE all_reduce"),
    (ch05.q5, lambda c, s, o, n, b: _comm(c, s, o, n, b) * 1e9, "units", "a factor 10⁹ away"),
]


def _plain_text(text: str) -> bool:
    return not any(bad in text for bad in ("np.", "array(", "tensor(", "dtype="))


@pytest.mark.parametrize("check, wrong, name, phrase", MISTAKES,
                         ids=[f"{c.chapter}-{c.question}-{n}" for c, _, n, _ in MISTAKES])
def test_a_named_mistake_teaches_in_tiers(check, wrong, name, phrase, capsys):
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


@pytest.mark.parametrize("check", list(_PASS), ids=lambda c: f"{c.chapter}-{c.question}")
def test_a_correct_answer_passes_with_no_mistake(check, capsys):
    result = check(_PASS[check])
    assert result.passed and not result.mistake and result.tier == 0, result.message


def test_every_named_mistake_of_chapters_3_to_5_has_a_case():
    """The mistakes the modules name (their mistake("…") calls) are all exercised above."""
    import inspect
    import re

    named = set()
    for module in (ch03, ch04, ch05):
        source = inspect.getsource(module)
        named |= set(re.findall(r'mistake\("([a-z_0-9]+)"', source))
        named |= set(re.findall(r'^\s+"([a-z_0-9]+)": \(', source, re.M))           # ch04/ch05 tables of names
        named |= set(re.findall(r'return \("([a-z_0-9]+)", ', source))              # ch04 q4's tuples
    named |= {n for module in (ch03, ch04, ch05) for table in ("_Q1_RULES", "_Q5_RULES", "_Q1_MODELS", "_Q2_RULES")
              for n in getattr(module, table, {})}
    named |= set(ch03._epochs_rules())
    named |= {"float_order", "weight_lost", "one_round", "epochs_upside_down", "epochs_without_weight",
              "ratio_not_kept"}
    tested = {n for _, _, n, _ in MISTAKES}
    missing = {n for n in named if n not in tested and n not in {"units_GB", "units_GB_inverse"}}
    assert len(named - {"units_GB", "units_GB_inverse"}) >= 45, sorted(named)
    assert not missing, missing


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
def test_ex03_q1_trap_prints_the_whole_weights_and_unrounded_errors(capsys):
    result = ch03.q1(_greedy(lambda w, c, x: w - c / x))
    w, counts, step = ch03._order_sensitive_states()[0]
    errors = [wd * float(max(step, 1)) - c for wd, c in zip(w, counts)]
    assert result.mistake == "float_order"
    assert f"greedy_step({w}, {counts}, {step})" in result.message          # the whole weights
    assert all(repr(e) in result.message for e in errors)                     # errors as Python prints them
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
