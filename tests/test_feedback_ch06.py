"""Chapter 6's integration questions (q4: where a sample is read after a resume; q5: a restart
with a changed blend) give tiered feedback for the mistakes they recognise: the first time, the
symptom (the call and what its result shows) and a question, not the fix; on a repeat, the fix;
then the formula.  Every message prints plain numbers."""
from __future__ import annotations

import pytest

from labsupport.check import ch06 as check
from labsupport.check._core import FAIL

from tests.test_check_ch06 import locate_sample, restart_with_new_blend

Q4 = [("step_from_zero", {"step_base": 0}), ("step_from_resume", {"from_resume": True}),
      ("rank_strided", {"rank_rule": "strided"}), ("rank_beyond_dp", {"rank_rule": "no_wrap"}),
      ("k_off_by_one", {"sample_shift": 1}), ("step_is_microstep", "micro × DP")]
Q5 = [("refusal_missed", {"refuse": lambda a, b: False}),
      ("refused_weights_not_samples", {"refuse": lambda a, b: a != b}),          # compares weights, not samples
      ("old_blend", {"read_from": "old"}), ("from_zero", {"start": lambda c, m, r: r * m})]


def _plain_text(text: str) -> bool:
    return "np." not in text and "array(" not in text and "int64" not in text


def _tiers(question, answer, name, capsys):
    """Three runs of the same wrong answer: (result, printed output) each."""
    runs = []
    for tier in (1, 2, 3):
        result = question(answer)
        out = capsys.readouterr().out
        assert (result.status, result.mistake, result.tier) == (FAIL, name, tier), result.message
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


@pytest.mark.parametrize("name, wrong", Q4, ids=[n for n, _ in Q4])
def test_q4_named_mistakes_in_tiers(name, wrong, capsys):
    if wrong == "micro × DP":          # steps of one micro × DP group: gradient accumulation forgotten
        def answer(w, d, k, c, m, dp, g):
            return locate_sample(w, d, k, c, m, dp, g, step_size=m * dp)
    else:
        def answer(*a):
            return locate_sample(*a, **wrong)
    runs = _tiers(check.q4, answer, name, capsys)
    _check_tiers(runs)
    assert runs[0][0].message.startswith("locate_sample(weights=")     # the smallest call that shows it
    assert check.q4(locate_sample).passed                               # the right answer after the mistakes


@pytest.mark.parametrize("name, wrong", Q5, ids=[n for n, _ in Q5])
def test_q5_named_mistakes_in_tiers(name, wrong, capsys):
    runs = _tiers(check.q5, lambda *a: restart_with_new_blend(*a, **wrong), name, capsys)
    _check_tiers(runs)
    assert runs[0][0].message.startswith("restart_with_new_blend(old_weights=")
    assert check.q5(restart_with_new_blend).passed


def test_unrecognised_wrong_answers_fall_back_to_the_question_tiers(capsys):
    result = check.q5(lambda *a: {**restart_with_new_blend(*a), "already_trained": -1})
    assert result.status == FAIL and result.mistake == "" and result.hint == check.q5.hint[0]
    assert "already_trained = -1, expected" in result.message and _plain_text(result.message)
    result = check.q4(lambda *a: None)
    assert result.status == FAIL and result.mistake == "" and "expected a dict" in result.message
    capsys.readouterr()


def test_every_answer_type_mistake_is_reported_in_plain_words(capsys):
    import numpy as np

    def numpy_answer(*args):
        out = restart_with_new_blend(*args)
        return {**out, "refused": "yes"}

    result = check.q5(numpy_answer)
    assert result.status == FAIL and "expected True or False" in result.message
    result = check.q4(lambda *a: {k: np.int64(v + 1) for k, v in (locate_sample(*a) or {"blend_index": 0}).items()})
    assert result.status == FAIL and _plain_text(result.message), result.message
    capsys.readouterr()


def _submission(tmp_path, student, change=None):
    """solutions/06 as ``student``'s submission, with ``change(source)`` applied to q4's answer cell."""
    import json

    from labsupport.paths import REPO_ROOT

    nb = json.loads((REPO_ROOT / "solutions" / "06_end_to_end.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if change and cell["cell_type"] == "code" and "def blend_pairs" in src:
            cell["source"] = change(src)
    path = tmp_path / student / "06_end_to_end.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_the_grader_gives_the_solutions_full_marks_and_flags_the_reference(tmp_path):
    """The grader runs q4 and q5 in its own process against the student's sandboxed functions:
    the solutions get 5/5; an answer that calls build_blending_indices is flagged, and the
    reference cannot even run while chapter 6 is graded (q5, which uses it, fails too)."""
    from labsupport.workbook.grading.exercise import discover
    from labsupport.workbook.grading.grader import Options, grade_file

    chapters = discover()
    assert {"q4", "q5"} <= {q.name for q in chapters["06"].questions}
    graded = grade_file(_submission(tmp_path, "honest"), chapters, Options(seed="t", rounds=1))
    assert [(r.question, r.status, r.flags) for r in graded.rows] == [
        (f"q{n}", "passed", []) for n in range(1, 6)], [(r.question, r.status, r.reason) for r in graded.rows]
    cheat = ("    from labsupport.datasets.blending import build_blending_indices, normalize_weights\n"
             "    di, si = build_blending_indices(normalize_weights(weights), size)\n"
             "    return list(zip(di.tolist(), si.tolist()))\n")
    graded = grade_file(_submission(tmp_path, "cheat", lambda src: src.replace(
        "    ### BEGIN SOLUTION\n    shares", "    ### BEGIN SOLUTION\n" + cheat + "    shares", 1)),
        chapters, Options(seed="t", rounds=1))
    rows = {r.question: r for r in graded.rows}
    assert any(f.startswith("reference:") for f in rows["q4"].flags), rows["q4"].flags
    assert rows["q4"].points == 0 and rows["q5"].status == "failed"
    assert "not available while grading" in rows["q5"].reason


@pytest.mark.parametrize("chapter", ["00", "06"])
def test_exercises_are_numbered_as_their_checks(chapter):
    """Issue #24: the book's exercise 5 (NeMo or Hugging Face) moved to chapter 0, where that
    trade-off is taught; chapter 6's later questions moved up. In both solutions notebooks the
    headings run "Exercise 1 … n", each followed by its ``check.qN(...)``, and the check module
    has exactly q1 … qn (and REFERENCES names only those)."""
    import importlib
    import json
    import re

    from labsupport.paths import REPO_ROOT

    path = next((REPO_ROOT / "solutions").glob(f"{chapter}_*.ipynb"))
    order = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            order += [f"Exercise {n}" for n in re.findall(r"^### Exercise (\d+)\b", src, re.M)]
        else:
            order += re.findall(r"\bcheck\.(q\d+)\(", src)
    n = sum(item.startswith("Exercise") for item in order)
    assert order == [x for k in range(1, n + 1) for x in (f"Exercise {k}", f"q{k}")], order
    module = importlib.import_module(f"labsupport.check.ch{chapter}")
    checks = sorted(name for name, fn in vars(module).items() if getattr(fn, "is_check", False))
    assert checks == [f"q{k}" for k in range(1, n + 1)]
    assert set(getattr(module, "REFERENCES", {})) <= set(checks)


def test_the_framework_question_is_chapter_0s():
    from labsupport.check import ch00

    assert ch00.REASONS and callable(ch00.q4) and "exercise_5" in ch00.q4.__doc__
    assert not hasattr(check, "REASONS") and "exercise_5" not in (check.q4.__doc__ or "")
    assert all(s.salt.startswith("labsupport:ch00:q4:") for s in (ch00._CHOICE, ch00._NEEDED, ch00._WRONG))
