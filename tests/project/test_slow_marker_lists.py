"""The ``slow`` lists of tests/conftest.py (what ``make test-fast`` leaves out) name files and tests
that exist, so a rename cannot quietly move a process-starting test into the fast loop."""
from __future__ import annotations

import ast

from tests.conftest import HERE, SLOW_FILES, SLOW_TESTS


def _test_names(rel: str) -> set[str]:
    tree = ast.parse((HERE / rel).read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_slow_file_exists():
    missing = sorted(rel for rel in SLOW_FILES if not (HERE / rel).is_file())
    assert not missing, f"SLOW_FILES in tests/conftest.py names files that do not exist: {missing}"


def test_every_slow_test_exists_in_a_file_not_already_slow():
    assert SLOW_TESTS, "SLOW_TESTS is empty"
    wrong = []
    for entry in sorted(SLOW_TESTS):
        rel, _, name = entry.partition("::")
        if rel in SLOW_FILES or not (HERE / rel).is_file() or name not in _test_names(rel):
            wrong.append(entry)
    assert not wrong, f"SLOW_TESTS in tests/conftest.py: no such test, or its whole file is slow already: {wrong}"
