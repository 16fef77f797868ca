"""Fixtures for the unit tests: every check runs on a fixed seed and starts from a clean slate."""
from __future__ import annotations

import pytest

from labsupport.check import _core


@pytest.fixture(autouse=True)
def _checks_seeded_and_fresh(monkeypatch):
    """Seed the checks' random inputs (``$LABSUPPORT_CHECK_SEED``) so "a wrong answer fails" is
    deterministic, and forget results and attempts of earlier tests (``_core.reset``)."""
    monkeypatch.setenv(_core.SEED_ENV, "labsupport-tests")
    _core.reset()
    yield
    _core.reset()
