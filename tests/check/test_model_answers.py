"""#13: a free-text exercise shows its model answer once (and only once) its check passes; the
computing checks' hints come in tiers (a nudge first, then the idea, the formula on the third failure)."""
from __future__ import annotations

import pytest

from labsupport.check import ch00, ch03, ch04, ch05

from tests.check.test_ch03_wrong_answers_and_hints import exercise_2
from tests.check.test_ch04 import GOOD_Q4
from tests.check.test_ch05 import GOOD_Q3
from tests.check.test_ch00_memory_and_hints import exercise_5


CASES = [
    (ch00, "q4", exercise_5, lambda: {"a": {"choice": "hf", "reasons": ["fits_one_node"]}}),
    (ch03, "q4", exercise_2, lambda *a: {"a": []}),
    (ch04, "q4", lambda: dict(GOOD_Q4), lambda: {**GOOD_Q4, "b_speedup": 2.0}),
]


@pytest.mark.parametrize("module, question, good, bad", CASES, ids=[f"{m.CHAPTER}-{q}" for m, q, _, _ in CASES])
def test_model_answer_is_shown_only_after_the_check_passes(module, question, good, bad, capsys):
    check = getattr(module, question)
    answer = getattr(module, f"MODEL_ANSWER_{question.upper()}")
    passed = check(good)
    assert passed.passed and answer in passed.message
    failed = check(bad)
    assert not failed.passed and answer not in failed.message


def test_chapter5_q3_model_answer(capsys):
    result = ch05.q3(lambda: dict(GOOD_Q3))
    assert result.passed and ch05.MODEL_ANSWER_Q3 in result.message
    assert ch05.MODEL_ANSWER_Q3 not in ch05.q3(lambda: {**GOOD_Q3, "dp_gradients": "broadcast"}).message


@pytest.mark.parametrize("module, question, wrong, formula", [
    (ch03, "q1", lambda w, c, s: 0, "w*x first"),
    (ch04, "q1", lambda lengths, seq: 0.5, "1 − sum(lengths)"),
], ids=["ch03-q1", "ch04-q1"])
def test_hints_come_in_tiers(module, question, wrong, formula, capsys):
    check = getattr(module, question)
    first, second, third = check(wrong), check(wrong), check(wrong)
    assert first.status == second.status == third.status == "failed"
    assert formula not in first.hint and formula not in second.hint and formula in third.hint
