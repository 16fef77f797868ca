"""labsupport.check.ch03, beyond tests/check/test_ch03.py: wrong answers fail for q1–q4, sealed keys,
hints, and every failing part named at once."""
from __future__ import annotations

import inspect

import pytest

from labsupport.check import ch03 as check
from labsupport.datasets.blending import cap_weights, expected_epochs, greedy_step


def stub(*args):
    raise NotImplementedError("exercise")


GOOD_Q4 = {"a": ["more_code_skill", "less_other", "batch_mix"], "b": ["memorise", "overfit", "little_new"],
           "c": ["dedup_filter", "epoch_budget", "per_domain_eval", "ablations", "realised_blend"],
           "a_why": "More code in every batch teaches code, and at a fixed budget it displaces the other data.",
           "b_why": "Fifty epochs of a small set lets the model memorise it and overfit while adding little new.",
           "c_why": "Clean the data first, budget the epochs, evaluate each domain and compare ablations of ratios."}


def exercise_2(total, code, weight):
    return {**GOOD_Q4, "b_code_epochs": weight * total / code}


def test_q1_greedy_step(capsys):
    assert check.q1(greedy_step).passed

    def last_on_ties(weights, counts, step):
        x = max(step, 1)
        errors = [w * x - c for w, c in zip(weights, counts)]
        return max(range(len(errors)), key=lambda d: (errors[d], d))

    def ratio_error(weights, counts, step):  # "furthest behind" as a ratio, not Megatron's difference
        x = max(step, 1)
        errors = [w - c / x for w, c in zip(weights, counts)]
        return max(range(len(errors)), key=lambda d: (errors[d] / max(weights[d], 1e-12), -d))

    def sign_flipped(weights, counts, step):
        x = max(step, 1)
        errors = [c - w * x for w, c in zip(weights, counts)]
        return max(range(len(errors)), key=lambda d: (errors[d], -d))

    def hard_coded(weights, counts, step):
        return 0

    for wrong in (last_on_ties, ratio_error, sign_flipped, hard_coded):
        assert check.q1(wrong).status == "failed", wrong.__name__
    assert check.q1(stub).status == "not attempted"
    assert "hint:" in capsys.readouterr().out


def test_q2_epochs():
    assert check.q2(expected_epochs).passed
    not_normalised = lambda w, sizes, total: [wd * total / s for wd, s in zip(w, sizes)]
    inverted = lambda w, sizes, total: [s / (wd / sum(w) * total) for wd, s in zip(w, sizes)]
    hard_coded = lambda w, sizes, total: [1.0] * len(w)
    for wrong in (not_normalised, inverted, hard_coded):
        assert check.q2(wrong).status == "failed"
    assert check.q2(stub).status == "not attempted"


def test_q3_cap_weights():
    assert check.q3(cap_weights).passed

    def one_pass(weights, sizes, total, max_epochs):  # caps once, never re-checks the others
        w = [x / sum(weights) for x in weights]
        cap = [max_epochs * s / total for s in sizes]
        if sum(cap) < 1:
            raise ValueError("cannot fit")
        over = [min(x, c) for x, c in zip(w, cap)]
        free = 1 - sum(over)
        rest = sum(x for x, c in zip(w, cap) if x < c)
        return [o + (x / rest * free if x < c and rest else 0) for o, x, c in zip(over, w, cap)]

    def never_raises(weights, sizes, total, max_epochs):
        try:
            return cap_weights(weights, sizes, total, max_epochs)
        except ValueError:
            return [1 / len(weights)] * len(weights)

    def clip_only(weights, sizes, total, max_epochs):
        cap_weights(weights, sizes, total, max_epochs)  # raise where the reference raises
        w = [x / sum(weights) for x in weights]
        return [min(x, max_epochs * s / total) for x, s in zip(w, sizes)]

    for wrong in (one_pass, never_raises, clip_only):
        assert check.q3(wrong).status == "failed", wrong.__name__
    assert check.q3(stub).status == "not attempted"


def test_q4_exercise_2(capsys):
    result = check.q4(exercise_2)
    assert result.passed and set(result.manual) == {"a_why", "b_why", "c_why"}
    changes = ({"a": ["more_code_skill", "less_other"]}, {"a": GOOD_Q4["a"] + ["no_effect"]},
               {"b": ["memorise", "gpu_oom", "overfit"]}, {"c": GOOD_Q4["c"][:-1]}, {"c": ["equal_weights"]},
               {"a_why": "short"}, {"b": ["nope"]})
    for change in changes:
        assert check.q4(lambda t, c, w, ch=change: {**exercise_2(t, c, w), **ch}).status == "failed", change
    assert check.q4(lambda t, c, w: {**exercise_2(t, c, w), "b_code_epochs": 50.0}).status == "failed"
    assert check.q4(stub).status == "not attempted"
    capsys.readouterr()


def test_q4_answer_keys_are_sealed():
    source = inspect.getsource(check)
    assert '"more_code_skill", "less_other", "batch_mix"}' not in source
    for key, options, sealed in (("a", check.EXERCISE_2_EFFECTS, check._EFFECTS),
                                 ("b", check.EXERCISE_2_RISKS, check._RISKS),
                                 ("c", check.EXERCISE_2_STEPS, check._STEPS)):
        assert {o for o in options if o in sealed} == set(GOOD_Q4[key])


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4"])
def test_checks_carry_a_hint(name):
    assert getattr(check, name).hint


def test_q4_names_every_failing_part(capsys):
    result = check.q4(lambda t, c, w: {**exercise_2(t, c, w), "a": ["no_effect"], "c_why": "short"})
    assert result.status == "failed" and "2 parts to fix" in result.message
    assert "(a): you chose 'no_effect', which" in result.message and "c_why:" in result.message
    capsys.readouterr()
