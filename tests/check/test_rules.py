"""The rule engine of the exercise checks (labsupport/check/rules.py): a rule names the smallest input
that shows it, fills its tiers from that case's facts, and a right answer is never named."""
from __future__ import annotations

import pytest

from labsupport.check import _core
from labsupport.check.rules import Rule, Rules, and_list, diagnose, explain, first_showing, smallest


def _share(lengths, seq):                       # the reference: padding share
    return 1 - sum(lengths) / (len(lengths) * seq)


def _real_share(lengths, seq):                  # a learner's wrong rule: the real share
    return sum(lengths) / (len(lengths) * seq)


CASES = [([1], 2), ([1], 4), ([1, 3], 4), ([2, 2, 3], 8)]
SAME = lambda a, b: abs(a - b) < 1e-12          # noqa: E731

TABLE = Rules(
    Rule("real_share", wrong=_real_share,
         symptom="padding_share({lengths}, {seq}) returned {got} (expected {want})",
         ask="Which slots does the question count?", fix="Return 1 − real / all."),
    Rule("percentage", wrong=lambda lengths, seq: 100 * _share(lengths, seq),
         symptom="padding_share({lengths}, {seq}) returned {got}, above 1",
         ask="In which unit is your number?", fix="Do not multiply by 100."),
    formula="padding share = 1 − sum(lengths) / (len(lengths) × seq_length)",
)


def _facts(case, got):
    lengths, seq = case
    return {"lengths": lengths, "seq": seq, "got": got, "want": _share(lengths, seq)}


def test_smallest_skips_cases_where_the_wrong_rule_agrees_with_the_right_one():
    # on ([1], 2) both rules give 0.5: that case cannot show the mistake, so ([1], 4) is the smallest
    assert smallest(_real_share, CASES, _share, _real_share, SAME) == (([1], 4), 0.25)


def test_smallest_with_confirm_refuses_a_learner_who_follows_the_rule_only_once():
    once = lambda lengths, seq: _real_share(lengths, seq) if lengths == [1] else _share(lengths, seq)  # noqa: E731
    assert smallest(once, CASES, _share, _real_share, SAME, confirm=1) is None
    assert smallest(_real_share, CASES, _share, _real_share, SAME, confirm=1) == (([1], 4), 0.25)


def test_smallest_skips_a_case_the_learner_raises_on_and_counts_its_tries():
    def picky(lengths, seq):
        if seq == 4 and lengths == [1]:
            raise ZeroDivisionError
        return _real_share(lengths, seq)
    # ([1], 4) raises, ([1, 3], 4) cannot show the mistake (both rules give 0.5): the next one does
    assert smallest(picky, CASES, _share, _real_share, SAME) == (([2, 2, 3], 8), 7 / 24)
    assert smallest(picky, CASES, _share, _real_share, SAME, tries=1) is None


def test_diagnose_names_the_rule_the_learner_follows_with_its_facts_and_formula():
    with pytest.raises(_core.Mistake) as caught:
        diagnose(lambda l, s: 100 * _share(l, s), TABLE, CASES, _share, SAME, _facts)
    m = caught.value
    assert m.name == "percentage"
    assert m.symptom == "padding_share([1], 2) returned 50.0, above 1"
    assert [m.tier(1), m.tier(2), m.tier(3), m.tier(9)] == [
        "In which unit is your number?", "Do not multiply by 100.",
        "padding share = 1 − sum(lengths) / (len(lengths) × seq_length)",
        "padding share = 1 − sum(lengths) / (len(lengths) × seq_length)"]


def test_diagnose_names_nothing_for_a_right_answer_or_an_unknown_wrong_one():
    assert diagnose(_share, TABLE, CASES, _share, SAME, _facts) is None
    assert diagnose(lambda l, s: 0.0, TABLE, CASES, _share, SAME, _facts) is None


def test_templates_can_be_callables_and_rules_can_be_varied():
    rule = Rule("n", symptom=lambda f: f"{len(f['xs'])} items", ask="{q}?", fix="fix {{literal}}")
    m = rule.but(fix="other").mistake(xs=[1, 2], q="why")
    assert (m.symptom, m.ask, m.fix, m.formula) == ("2 items", "why?", "other", "")
    assert rule.mistake(xs=[], q="x").fix == "fix {literal}"


def test_first_showing_returns_the_first_case_the_classifier_names():
    kind_of = lambda case, got: "negative" if got < 0 else None  # noqa: E731
    assert first_showing(lambda c: c[0] - c[1], [(3, 1), (1, 2), (0, 5)], kind_of, "negative") == ((1, 2), -1)
    assert first_showing(lambda c: 1 // 0, [(1, 2)], kind_of, "negative") is None


def test_a_table_refuses_two_rules_of_one_name():
    with pytest.raises(ValueError, match="share a name"):
        Rules(Rule("a", "s", "q", "f"), Rule("a", "s", "q", "f"))


def test_explain_names_the_rule_that_gives_the_failing_result_shown_on_the_smallest_case():
    learner = lambda l, s: 100 * _share(l, s)                                      # noqa: E731
    with pytest.raises(_core.Mistake) as caught:
        explain(learner, TABLE.values(), ([2, 2, 3], 8), learner([2, 2, 3], 8), _share, SAME, lambda r: CASES, _facts)
    assert caught.value.name == "percentage" and caught.value.symptom.startswith("padding_share([1], 2)")
    # a result no rule gives on the failing case: nothing is named
    assert explain(lambda l, s: 0.0, TABLE.values(), ([1], 4), 0.0, _share, SAME, lambda r: CASES, _facts) is None


def test_explain_knows_a_rules_other_forms_and_falls_back_to_the_failing_case():
    half = lambda l, s: _share(l, s) / 2                                           # noqa: E731
    with pytest.raises(_core.Mistake) as caught:                                   # no small case shows it
        explain(half, TABLE.values(), ([1], 4), half([1], 4), _share, SAME, lambda r: [], _facts,
                variants={"real_share": [half]})
    assert caught.value.name == "real_share" and caught.value.symptom.startswith("padding_share([1], 4) returned 0.375")


def test_and_list_says_a_list_in_words():
    assert and_list([0, 2, 3]) == "0, 2 and 3" and and_list([7]) == "7" and and_list(["a", "b"]) == "a and b"
    assert and_list([]) == "" and and_list([], "nowhere") == "nowhere" and and_list(iter([1, 2])) == "1 and 2"
