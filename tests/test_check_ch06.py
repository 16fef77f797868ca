"""labsupport.check.ch06: each check passes a correct answer, fails plausible mistakes and
hard-coded answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

import numpy as np

from labsupport.check import ch06 as check
from labsupport.check._core import FAIL, NOT_ATTEMPTED, PASS


def stub(*args):
    raise NotImplementedError("exercise")


def dp_slice(consumed, micro, rank, dp):
    start = consumed + rank * micro
    return list(range(start, start + micro))


def test_q1(capsys):
    assert check.q1(dp_slice).passed
    assert check.q1(lambda c, m, r, d: list(range(c + r, c + r + m))).status == FAIL        # strided, not contiguous
    assert check.q1(lambda c, m, r, d: list(range(r * m, (r + 1) * m))).status == FAIL     # ignores consumed samples
    assert check.q1(lambda c, m, r, d: [0, 1]).status == FAIL                               # hard-coded
    assert check.q1(stub).status == NOT_ATTEMPTED


def batch_arithmetic(cfg, steps):
    t, m = cfg.trainer, cfg.model
    world = t.devices * t.num_nodes
    tp, pp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size
    if world % (tp * pp):
        raise ValueError("layout")
    dp = world // (tp * pp)
    if m.global_batch_size % (m.micro_batch_size * dp):
        raise ValueError("global batch")
    return {"data_parallel_size": dp, "accumulation_steps": m.global_batch_size // (m.micro_batch_size * dp),
            "tokens_per_step": m.global_batch_size * m.encoder_seq_length, "consumed_samples": steps * m.global_batch_size}


def test_q2(capsys):
    assert check.q2(batch_arithmetic).passed

    def per_rank_tokens(cfg, steps):
        out = batch_arithmetic(cfg, steps)
        out["tokens_per_step"] = cfg.model.micro_batch_size * cfg.model.encoder_seq_length
        return out

    def never_raises(cfg, steps):
        try:
            return batch_arithmetic(cfg, steps)
        except ValueError:
            return {"data_parallel_size": 1, "accumulation_steps": 1, "tokens_per_step": 0, "consumed_samples": 0}

    def ignores_pp(cfg, steps):
        t, m = cfg.trainer, cfg.model
        dp = t.devices * t.num_nodes // m.tensor_model_parallel_size
        return {"data_parallel_size": dp, "accumulation_steps": max(1, m.global_batch_size // (m.micro_batch_size * dp)),
                "tokens_per_step": m.global_batch_size * m.encoder_seq_length, "consumed_samples": steps * m.global_batch_size}

    def refuses_tp_across_nodes(cfg, steps):          # chapter 0's old, wrong rule
        if cfg.model.tensor_model_parallel_size > cfg.trainer.devices:
            raise ValueError("TP across nodes")
        return batch_arithmetic(cfg, steps)

    for wrong in (per_rank_tokens, never_raises, ignores_pp, refuses_tp_across_nodes):
        assert check.q2(wrong).status == FAIL, wrong.__name__
    assert check.q2(stub).status == NOT_ATTEMPTED


def diagnose(log):
    if log["data_share"] > 0.4:
        return {"suspect": "tokenize_every_step", "fix": "binary_index"}
    if log["real_token_share"] < 0.8:
        return {"suspect": "padding", "fix": "packing"}
    if log["cross_document_attention"] > 0:
        return {"suspect": "no_boundary_mask",
                "fix": "reset_attention_mask" if log["attention_path"] == "unfused" else "cu_seqlens"}
    if not log["decode_roundtrip_ok"]:
        return {"suspect": "tokenizer_mismatch", "fix": "same_tokenizer"}
    if log["small_domain_gap"] > 1.5:
        return {"suspect": "small_set_oversampled", "fix": "cap_epochs"}
    return {"suspect": "load_everything", "fix": "mmap"}


def test_q3(capsys):
    assert check.q3(diagnose).passed
    assert check.q3(lambda log: {"suspect": "padding", "fix": "packing"}).status == FAIL

    def wrong_fix(log):
        out = diagnose(log)
        return {**out, "fix": "mmap"} if out["suspect"] == "padding" else out

    assert check.q3(wrong_fix).status == FAIL

    def flag_only(log):                       # the old answer: the flag, whatever the attention path
        out = diagnose(log)
        return {**out, "fix": "reset_attention_mask"} if out["suspect"] == "no_boundary_mask" else out

    assert check.q3(flag_only).status == FAIL
    rng = np.random.default_rng(1)
    logs = [check.make_symptom_log("no_boundary_mask", rng) for _ in range(40)]
    assert {log["attention_path"] for log in logs} == set(check.ATTENTION_PATHS)
    assert all(not log["reset_attention_mask"] for log in logs if log["attention_path"] == "unfused")
    assert {log["reset_attention_mask"] for log in logs if log["attention_path"] == "fused"} == {True, False}
    assert check.q3(stub).status == NOT_ATTEMPTED
    for suspect in check.SUSPECTS:  # every generated log has exactly its own symptom
        assert diagnose(check.make_symptom_log(suspect, np.random.default_rng(0)))["suspect"] == suspect


def exercise_5():
    return {"a": {"choice": "nemo", "reasons": ["megatron_parallelism", "data_pipeline_at_scale"]},
            "b": {"choice": "hf", "reasons": ["hf_peft_ecosystem", "fits_one_node"]},
            "c": {"choice": "nemo", "reasons": ["speech_collections"]},
            "why": "Scale decides: 1024 GPUs need Megatron's parallelism; one node does not; speech lives in NeMo."}


def test_q4(capsys):
    result = check.q4(exercise_5)
    assert result.passed and "why" in result.manual
    assert check.q4(lambda: {**exercise_5(), "a": {"choice": "hf", "reasons": ["hf_peft_ecosystem"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "b": {"choice": "nemo", "reasons": ["megatron_parallelism"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "c": {"choice": "nemo", "reasons": ["made_up"]}}).status == FAIL
    assert check.q4(lambda: {**exercise_5(), "why": ""}).status == FAIL
    assert check.q4(stub).status == NOT_ATTEMPTED


def test_summary_lists_this_chapter(capsys):
    check.q1(dp_slice)
    check.summary()
    assert "ch06 q1: passed" in capsys.readouterr().out
    assert check.CHAPTER == "ch06" and PASS == "passed"
