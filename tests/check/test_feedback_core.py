"""The feedback machinery every chapter's checks share (issue #24): named mistakes with tiers of
their own (symptom + question, then the fix, then the formula), plain numbers in every message,
and answer cells that did not run reported at their check — in a real kernel."""
from __future__ import annotations

import os
import re
import sys

import nbformat
import numpy as np
import pytest
import torch

from labsupport.check import _cells, _core
from labsupport.check._core import check, plain, short
from labsupport.check.rules import Rule
from labsupport.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _fresh():
    _core.reset()
    _cells._BROKEN.clear()
    yield
    _core.reset()
    _cells._BROKEN.clear()


@check("chT", "q1", hint=("nudge", "idea", "formula"))
def _q1(fn):
    got = fn(3)
    if got == 3:
        Rule("echo", symptom="f(3) returned 3, the input itself", ask="What should happen to the input?",
             fix="Double it.", formula="f(x) = 2x").fail()
    if got == 9:
        Rule("square", symptom="f(3) returned 9", ask="Is 3 × 3 what the task asks?",
             fix="Add, do not multiply.").fail()
    _core.expect(got == 6, f"f(3) returned {short(got)}, expected 6")
    return "1 case"


def test_a_named_mistake_shows_its_symptom_then_the_fix_then_the_formula(capsys):
    lines = []
    for n in range(1, 5):
        r = _q1(lambda x: x)
        assert (r.status, r.mistake, r.tier) == ("failed", "echo", n)
        assert r.message == "f(3) returned 3, the input itself"          # the symptom, every time
        lines.append(r.hint)
    assert lines == ["What should happen to the input?", "Double it.", "f(x) = 2x", "f(x) = 2x"]
    out = capsys.readouterr().out
    assert "hint: What should happen to the input?" in out and out.index("Double it.") > out.index("What should")


def test_each_mistake_counts_its_own_tiers_and_a_mistake_without_formula_stays_at_the_fix():
    assert _q1(lambda x: x).hint == "What should happen to the input?"
    assert _q1(lambda x: x * x).hint == "Is 3 × 3 what the task asks?"      # a new mistake: its first tier
    assert _q1(lambda x: x).hint == "Double it."
    assert _q1(lambda x: x * x).hint == "Add, do not multiply."
    assert _q1(lambda x: x * x).hint == "Add, do not multiply."             # no formula tier
    r = _q1(lambda x: 7)                                                    # unnamed: the question's tiers
    assert r.mistake == "" and r.hint == "formula"                          # 6th failure of q1 → last tier
    assert _q1(lambda x: 2 * x).passed


def test_the_first_tier_of_a_mistake_does_not_give_the_fix():
    r = _q1(lambda x: x)
    assert "Double" not in r.message + r.hint


def test_plain_prints_numbers_as_a_learner_writes_them():
    value = [np.int64(1), np.float32(0.1), np.bool_(True), np.float64(0.5), torch.tensor([1, 2]),
             {"a": np.arange(2)}, (np.int32(3),), np.array(2.5)]
    assert plain(value) == [1, 0.1, True, 0.5, [1, 2], {"a": [0, 1]}, (3,), 2.5]
    text = short(value)
    assert "np." not in text and "array" not in text and "tensor" not in text
    assert short(np.float32(1) / 3) == "0.33333334"                         # float32's own shortest form
    assert short(0.1 + 0.2) == "0.30000000000000004"                       # Python floats are not rounded


def test_a_failing_repr_does_not_break_the_message():
    class Odd:
        def __repr__(self):
            raise RuntimeError("no")
    assert short(Odd()) == "<Odd>"


def test_an_answer_whose_cell_failed_is_reported_not_graded():
    def f(x):
        return 2 * x
    _cells.record("def f(x)\n    return 2 * x", SyntaxError("expected ':'", ("<cell>", 1, 8, "def f(x)")))
    r = _q1(f)
    assert r.status == "failed" and r.message.startswith("your answer cell did not run: SyntaxError on line 1")
    assert r.hint == "" and _core._FAILURES[("chT", "q1")] == 0          # not a wrong answer: tiers stay
    _cells.record("def f(x):\n    return 2 * x", None)                      # fixed and run again
    assert _q1(f).passed


def test_defined_names_reads_cells_that_do_not_compile():
    assert _cells.defined_names("def f(x)\n    pass\nclass K:\n  pass\nY = 2\nz == 3") == {"f", "K", "Y"}
    assert _cells.defined_names("a: int = 1\ndef g(): pass\nfor i in []: pass") == {"a", "g"}


def _run_in_kernel(cells: list[str], tmp_path) -> list[str]:
    """Run ``cells`` in a real kernel (the workbook's own runner) and return each cell's output text, with the lines
    that a notebook's page folds at 100 characters (labsupport.env.fold) joined again."""
    from labsupport.workbook.nbrun import execute_notebook, headless_env

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "answers.ipynb"
    nbformat.write(nb, path)
    env = headless_env(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    done, _ = execute_notebook(path, timeout=120, env=env, allow_errors=True)
    return [re.sub(r"\n {3,}", " ", "".join(o.get("text", "") if o.get("output_type") == "stream"
                                             else f"{o.get('ename')}: {o.get('evalue')}" for o in c.outputs))
            for c in done.cells]


@pytest.mark.skipif(sys.platform == "win32", reason="kernel test")
def test_in_a_kernel_a_cell_that_did_not_compile_is_named_at_its_check(tmp_path):
    out = _run_in_kernel([
        "from labsupport.check import ch06 as check",
        "def dp_slice(consumed_samples, micro_batch_size, rank, data_parallel_size)\n    return []",
        "check.q1(dp_slice)",                                           # never defined: no NameError traceback
        "def dp_slice(c, m, r, d):\n    raise NotImplementedError('stub')",
        "def dp_slice(c, m, r, d)\n    return []",
        "check.q1(dp_slice)",                                           # the stub is older: not graded
        "def dp_slice(c, m, r, d):\n    return list(range(c + r * m, c + r * m + m))\nboom = 1 / 0",
        "check.q1(dp_slice)",                                           # the cell stopped at line 3
        "def dp_slice(c, m, r, d):\n    return list(range(c + r * m, c + r * m + m))",
        "check.q1(dp_slice)",
        "check.q2(batch_arithmetic)",                                   # never written at all
        "something_else",                                               # an ordinary NameError stays one
    ], tmp_path)
    assert "q1 failed — your answer cell did not run: SyntaxError on line 1" in out[2]
    assert "was never defined" in out[2] and "Traceback" not in out[2] and "NameError" not in out[2]
    assert "did not run: SyntaxError on line 1" in out[5] and "older `dp_slice`" in out[5]
    assert "not attempted" not in out[5] and "hint:" not in out[5]
    assert "stopped with ZeroDivisionError on line 3" in out[7]
    assert "✅ q1 passed" in out[9]
    assert "`batch_arithmetic` is not defined — run the answer cell above" in out[10]
    assert out[11].startswith("NameError: name 'something_else' is not defined")


def test_try_call_returns_the_result_or_the_raised_marker():
    assert _core.try_call(lambda a, b: a + b, 1, 2) == 3
    assert _core.try_call(lambda: 1 / 0) is _core.RAISED
    assert _core.try_call(lambda: None) is None                              # None is a result, not a raise
