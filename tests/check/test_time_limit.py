"""An in-notebook check stops a learner's function that does not return, and says so."""
from __future__ import annotations

import time

import pytest

from labsupport.check import _core


@pytest.fixture(autouse=True)
def _forget():
    yield
    _core.reset()


@_core.check("chXX", "q1", hint="a hint")
def _q1(fn):
    fn()
    return "ok"


def _endless():
    while True:
        try:
            time.sleep(0.01)
        except Exception:  # noqa: BLE001 - a learner's handler must not swallow the limit
            pass


def test_a_check_that_runs_past_its_limit_fails_and_says_why(monkeypatch):
    monkeypatch.setenv(_core.TIME_LIMIT_ENV, "0.3")
    lines: list[str] = []
    started = time.monotonic()
    with _core.capture(lines.append):
        result = _q1(_endless)
    assert time.monotonic() - started < 10
    assert result.status == _core.FAIL and "stopped after 0.3 s" in result.message
    assert _core.TIME_LIMIT_ENV in result.message and "endless loop" in result.message
    assert lines[0].startswith("❌ q1 failed — stopped after 0.3 s")
    assert _q1(lambda: None).status == _core.PASS, "the alarm is gone after the check"


def test_the_grader_turns_the_limit_off(monkeypatch):
    monkeypatch.setenv(_core.TIME_LIMIT_ENV, "0.05")
    with _core.time_limit(None), _core.capture(lambda line: None):
        assert _q1(lambda: time.sleep(0.2)).status == _core.PASS
