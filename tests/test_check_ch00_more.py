"""labsupport.check.ch00, beyond tests/test_check_ch00.py: memory arithmetic, the sealed answer key of
q3, hints, and every failing part named at once."""
from __future__ import annotations

import pytest

from labsupport.check import ch00 as check
from labsupport.workbook.orientation import training_memory_gb


def stub(*args):
    raise NotImplementedError("exercise")


GOOD_Q3 = {"a": "nemo", "b": "hf", "c": "nemo",
           "why": "Pre-training at 1024 GPUs needs Megatron parallelism; LoRA on one node is simple in HF; "
                  "NeMo ships speech collections."}


def test_q2_memory_gb():
    assert check.q2(training_memory_gb).passed
    gib = lambda n, method: training_memory_gb(n, method) * 1e9 / 2**30
    twelve_bytes = lambda n, method: n * {"bf16_weights": 2, "full_adam": 12}[method] / 1e9
    swapped = lambda n, method: training_memory_gb(n, "full_adam" if method == "bf16_weights" else "bf16_weights")
    hard_coded = lambda n, method: 112.0
    for wrong in (gib, twelve_bytes, swapped, hard_coded):
        assert check.q2(wrong).status == "failed"
    assert check.q2(stub).status == "not attempted"


def test_q3_exercise_5(capsys):
    result = check.q3(lambda: GOOD_Q3)
    assert result.passed and result.manual == {"why": GOOD_Q3["why"]}
    assert check.q3(lambda: {**GOOD_Q3, "b": "either"}).passed
    for change in ({"a": "hf"}, {"b": "nemo"}, {"c": "hf"}, {"c": "pytorch"}, {"why": "because"}):
        assert check.q3(lambda: {**GOOD_Q3, **change}).status == "failed", change
    assert check.q3(lambda: ["nemo", "hf", "nemo"]).status == "failed"
    assert check.q3(stub).status == "not attempted"
    capsys.readouterr()


def test_q3_answer_key_is_sealed():
    import inspect

    source = inspect.getsource(check)
    assert 'answer["a"] == "nemo"' not in source
    assert ["a", "nemo"] in check._SCENARIO_ANSWERS and ["a", "hf"] not in check._SCENARIO_ANSWERS


@pytest.mark.parametrize("name", ["q1", "q2", "q3"])
def test_checks_carry_a_hint(name):
    assert getattr(check, name).hint


def test_q3_names_every_failing_part(capsys):
    result = check.q3(lambda: {**GOOD_Q3, "a": "hf", "c": "hf"})
    assert result.status == "failed" and "2 parts to fix" in result.message
    assert "(a)" in result.message and "(c)" in result.message
    capsys.readouterr()
