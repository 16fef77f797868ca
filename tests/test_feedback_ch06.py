"""Chapter 6's new integration questions (q5: where a sample is read after a resume; q6: a restart
with a changed blend) give tiered feedback for the mistakes they recognise: the first time, the
symptom (the call and what its result shows) and a question, not the fix; on a repeat, the fix;
then the formula.  Every message prints plain numbers."""
from __future__ import annotations

import pytest

from labsupport.check import ch06 as check
from labsupport.check._core import FAIL

from tests.test_check_ch06 import locate_sample, restart_with_new_blend

Q5 = [("step_from_zero", {"step_base": 0}), ("step_from_resume", {"from_resume": True}),
      ("rank_strided", {"rank_rule": "strided"}), ("rank_beyond_dp", {"rank_rule": "no_wrap"}),
      ("k_off_by_one", {"sample_shift": 1})]
Q6 = [("refusal_missed", {"refuse": lambda a, b: False}), ("refused_weights_not_samples", {"refuse": lambda a, b: a != b}),
      ("old_blend", {"read_from": "old"}), ("from_zero", {"start": lambda c, m, r: r * m})]


def _plain_text(text: str) -> bool:
    return "np." not in text and "array(" not in text and "int64" not in text


def _tiers(question, answer, name, capsys):
    """Three runs of the same wrong answer: (result, printed output) each."""
    runs = []
    for tier in (1, 2, 3):
        result = question(answer)
        out = capsys.readouterr().out
        assert result.status == FAIL and result.mistake == name and result.tier == tier, (result.mistake, result.message)
        assert _plain_text(result.message) and _plain_text(result.hint), result.message + result.hint
        runs.append((result, out))
    return runs


def _check_tiers(runs):
    (first, out1), (second, _), (third, _) = runs
    assert first.message == second.message == third.message            # the symptom, every time
    assert first.message in out1 and f"hint: {first.hint}" in out1
    assert first.hint.rstrip().endswith("?")                           # tier 1 asks
    assert second.hint not in out1 and third.hint not in out1          # neither the fix nor the formula yet
    assert len({first.hint, second.hint, third.hint}) == 3


@pytest.mark.parametrize("name, wrong", Q5, ids=[n for n, _ in Q5])
def test_q5_named_mistakes_in_tiers(name, wrong, capsys):
    runs = _tiers(check.q5, lambda *a: locate_sample(*a, **wrong), name, capsys)
    _check_tiers(runs)
    assert runs[0][0].message.startswith("locate_sample(weights=")     # the smallest call that shows it
    assert check.q5(locate_sample).passed                               # the right answer after the mistakes


@pytest.mark.parametrize("name, wrong", Q6, ids=[n for n, _ in Q6])
def test_q6_named_mistakes_in_tiers(name, wrong, capsys):
    runs = _tiers(check.q6, lambda *a: restart_with_new_blend(*a, **wrong), name, capsys)
    _check_tiers(runs)
    assert runs[0][0].message.startswith("restart_with_new_blend(old_weights=")
    assert check.q6(restart_with_new_blend).passed


def test_unrecognised_wrong_answers_fall_back_to_the_question_tiers(capsys):
    result = check.q6(lambda *a: {**restart_with_new_blend(*a), "already_trained": -1})
    assert result.status == FAIL and result.mistake == "" and result.hint == check.q6.hint[0]
    assert "already_trained = -1, expected" in result.message and _plain_text(result.message)
    result = check.q5(lambda *a: None)
    assert result.status == FAIL and result.mistake == "" and "expected a dict" in result.message
    capsys.readouterr()


def test_every_answer_type_mistake_is_reported_in_plain_words(capsys):
    import numpy as np

    def numpy_answer(*args):
        out = restart_with_new_blend(*args)
        return {**out, "refused": "yes"}

    result = check.q6(numpy_answer)
    assert result.status == FAIL and "expected True or False" in result.message
    result = check.q5(lambda *a: {k: np.int64(v + 1) for k, v in (locate_sample(*a) or {"blend_index": 0}).items()})
    assert result.status == FAIL and _plain_text(result.message), result.message
    capsys.readouterr()
