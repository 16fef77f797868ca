"""The check machinery: pass, fail with hint, not attempted, learner exceptions, report file."""
from __future__ import annotations

import json

from labsupport.check import _core
from labsupport.check._core import check, expect


@check("chXX", "q9", hint="add one")
def q9(fn):
    for x in range(5):
        expect(fn(x) == x + 1, f"fn({x}) returned {fn(x)!r}, expected {x + 1}")
    return "5 cases"


def test_pass_prints_and_records(capsys):
    result = q9(lambda x: x + 1)
    assert result.passed and result.points == 1.0
    assert capsys.readouterr().out == "✅ q9 passed — 5 cases\n"


def test_fail_prints_message_and_hint(capsys):
    result = q9(lambda x: x)
    out = capsys.readouterr().out
    assert not result and result.status == "failed"
    assert "fn(0) returned 0, expected 1" in out and "hint: add one" in out


def test_stub_is_not_attempted(capsys):
    def stub(x):
        raise NotImplementedError("exercise")
    result = q9(stub)
    assert result.status == "not attempted"
    assert "🟡 q9 not attempted" in capsys.readouterr().out


def test_learner_exception_is_reported_not_raised(capsys):
    result = q9(lambda x: 1 / 0)
    assert result.status == "failed"
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_report_file_and_summary(tmp_path, monkeypatch, capsys):
    report = tmp_path / "r.jsonl"
    monkeypatch.setenv("LABSUPPORT_CHECK_REPORT", str(report))
    monkeypatch.setattr(_core, "_RESULTS", [])
    q9(lambda x: x)
    q9(lambda x: x + 1)
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["failed", "passed"]
    capsys.readouterr()
    _core.summary("chXX")
    out = capsys.readouterr().out
    assert "✅ chXX q9: passed" in out and "score: 1 / 1" in out


@check("chXX", "q8", hint="-")
def q8_buggy(fn):
    fn(1)
    return {}["missing"]  # a bug in the checker, not in the learner's code


def test_checker_bug_is_not_blamed_on_the_learner(capsys):
    result = q8_buggy(lambda x: x)
    out = capsys.readouterr().out
    assert result.status == "failed"
    assert "bug in the checker" in out and "your code" not in out


def _extra_layer(fn):
    import functools

    @functools.wraps(fn)
    def layer(*args):
        return fn(*args)
    return layer


@check("chXX", "q7", hint="-")
@_extra_layer
def q7_buggy_behind_a_wrapper(fn):
    fn(1)
    return {}["missing"]  # a checker bug, with one more frame between the check and its body


@check("chXX", "q6", hint="-")
@_extra_layer
def q6_learner_behind_a_wrapper(fn):
    fn(0)
    return "ok"


def test_blame_does_not_count_frames(capsys):
    """_blame finds the body's own frame: any number of wrapper frames above it does not matter."""
    assert "bug in the checker" in q7_buggy_behind_a_wrapper(lambda x: x).message
    result = q6_learner_behind_a_wrapper(lambda x: 1 / x)
    assert result.message.startswith("your code raised ZeroDivisionError")
    capsys.readouterr()


def test_blame_of_an_exception_carried_from_the_learner_process(capsys):
    def remote(x):
        exc = ValueError("bad input")
        exc.learner_where = "line 3 of cell 4"
        raise exc
    result = q9(remote)
    assert result.message == "your code raised ValueError: bad input (line 3 of cell 4)"
    capsys.readouterr()


def test_reset_forgets_results_and_attempts(capsys):
    q9(lambda x: x)
    assert _core.results("chXX") and _core.attempts("chXX", "q9") == 1
    _core.reset()
    assert _core.results("chXX") == [] and _core.attempts("chXX", "q9") == 0
    capsys.readouterr()


def test_check_seed_is_fixed_by_the_environment_and_fresh_without(monkeypatch):
    seen = {}

    @check("chXX", "q5", hint="-")
    def q5(fn):
        seen.setdefault(fn, []).append(_core.check_seed())
        return ""

    @check("chXX", "q4", hint="-")
    def q4(fn):
        seen.setdefault(fn, []).append(_core.check_seed())
        return ""

    q5("a"), q5("a"), q4("b")
    assert seen["a"][0] == seen["a"][1] and seen["a"][0] != seen["b"][0] and isinstance(seen["a"][0], int)
    monkeypatch.setenv(_core.SEED_ENV, "another")
    q5("c")
    assert seen["c"][0] != seen["a"][0]
    monkeypatch.delenv(_core.SEED_ENV)
    q5("d")
    assert seen["d"] == [None]
    assert _core.check_seed() is None  # outside a check too


def test_tiered_hints_escalate_with_repeated_failures(capsys):
    @check("chXX", "q3", hint=("a nudge", "the formula: x + 1"))
    def q3(fn):
        expect(fn(1) == 2, "wrong")
        return ""

    hints = []
    for _ in range(3):
        hints.append(q3(lambda x: x).hint)
    assert hints == ["a nudge", "the formula: x + 1", "the formula: x + 1"]
    assert q3(lambda x: x + 1).passed and q3(lambda x: x + 1).attempt == 5
    out = capsys.readouterr().out
    assert "hint: a nudge" in out and "hint: the formula: x + 1" in out


def test_parts_names_every_failing_part():
    import pytest

    with pytest.raises(_core.CheckFailed) as info:
        with _core.parts() as part:
            part(False, "cause: wrong")
            part(True, "never shown")
            part(False, "fixes: one missing")
    assert str(info.value) == "2 parts to fix: cause: wrong | fixes: one missing"
    with _core.parts() as part:
        assert part(True, "fine")


def test_sealed_answers_compare_without_revealing_them():
    sealed = _core.Sealed.seal("salt:q1", ["b", ["k", "v"]])
    assert "b" in sealed and ["k", "v"] in sealed and "a" not in sealed and ["k", "w"] not in sealed
    assert {object()} not in sealed  # not JSON: simply not an answer
    assert len(sealed) == 2 and "b" not in repr(sealed).replace("Sealed", "")
    again = _core.Sealed("salt:q1", sealed.digests)
    assert "b" in again and "b" not in _core.Sealed("other salt", sealed.digests)
    assert _core.same_set(["b", ["k", "v"]], again) is False  # lists are unhashable: a set of them fails
    assert _core.same_set(["b"], _core.Sealed.seal("s", ["b"]))
    assert not _core.same_set(["b", "c"], _core.Sealed.seal("s", ["b"]))


def test_capture_sends_lines_to_a_sink(capsys):
    lines = []
    with _core.capture(lines.append):
        q9(lambda x: x + 1)
    assert lines == ["✅ q9 passed — 5 cases"] and capsys.readouterr().out == ""
