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
