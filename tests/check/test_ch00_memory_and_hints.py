"""labsupport.check.ch00, beyond tests/check/test_ch00.py: memory arithmetic, the book's exercise 5 (q4),
hints."""
from __future__ import annotations

import pytest

from labsupport.check import ch00 as check
from labsupport.check._core import FAIL, NOT_ATTEMPTED
from labsupport.distributed.training_memory import training_memory_gb


def stub(*args):
    raise NotImplementedError("exercise")


def test_q2_memory_gb():
    assert check.q2(training_memory_gb).passed
    gib = lambda n, method, dp=1: training_memory_gb(n, method, dp) * 1e9 / 2**30
    twelve_bytes = lambda n, method, dp=1: n * {"bf16_weights": 2, "megatron_adam": 12,
                                               "megatron_distopt": 12}[method] / 1e9
    swapped = lambda n, method, dp=1: training_memory_gb(
        n, "megatron_adam" if method == "bf16_weights" else "bf16_weights")
    hard_coded = lambda n, method, dp=1: 112.0
    no_sharding = lambda n, method, dp=1: training_memory_gb(
        n, "megatron_adam" if method == "megatron_distopt" else method)
    for wrong in (gib, twelve_bytes, swapped, hard_coded, no_sharding):
        assert check.q2(wrong).status == "failed"
    zero_count = lambda n, method, dp=1: n * (2 if method == "bf16_weights" else 16) / 1e9
    result = check.q2(zero_count)
    assert result.status == "failed" and result.mistake == "zero_16_bytes"
    assert "16 bytes per parameter" in result.message
    assert check.q2(stub).status == "not attempted"


def exercise_5():
    return {"a": {"choice": "nemo", "reasons": ["megatron_parallelism", "data_pipeline_at_scale"]},
            "b": {"choice": "hf", "reasons": ["hf_peft_ecosystem", "fits_one_node"]},
            "c": {"choice": "nemo", "reasons": ["speech_collections"]},
            "why": "Scale decides: 1024 GPUs need Megatron's parallelism; one node does not; speech lives in NeMo."}


def test_q4(capsys):
    result = check.q4(exercise_5)
    assert result.passed and "why" in result.manual
    assert check.q4(lambda: {**exercise_5(), "a": {"choice": "hf", "reasons": ["hf_peft_ecosystem"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "b": {"choice": "nemo",
                                                   "reasons": ["megatron_parallelism"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "c": {"choice": "nemo", "reasons": ["made_up"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "why": ""}).status == FAIL
    assert check.q4(stub).status == NOT_ATTEMPTED


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4"])
def test_checks_carry_a_hint(name):
    assert getattr(check, name).hint
