"""labsupport.check.ch06: each check passes a correct answer, fails plausible mistakes and
hard-coded answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

import numpy as np

from labsupport.check import ch06 as check
from labsupport.check._core import FAIL, NOT_ATTEMPTED, PASS
from labsupport.training import restart


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
            "tokens_per_step": m.global_batch_size * m.encoder_seq_length,
            "consumed_samples": steps * m.global_batch_size}


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
        return {"data_parallel_size": dp,
                "accumulation_steps": max(1, m.global_batch_size // (m.micro_batch_size * dp)),
                "tokens_per_step": m.global_batch_size * m.encoder_seq_length,
                "consumed_samples": steps * m.global_batch_size}

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


def test_summary_lists_this_chapter(capsys):
    check.q1(dp_slice)
    check.summary()
    assert "ch06 q1: passed" in capsys.readouterr().out
    assert check.CHAPTER == "ch06" and PASS == "passed"


# ------------------------------------------------------------------ q4 / q5 (chapters 3 + 6)
def blend_pairs(weights, size):
    shares = [w / sum(weights) for w in weights]
    counts, pairs = [0] * len(shares), []
    for i in range(size):
        errors = [s * max(i, 1) - c for s, c in zip(shares, counts)]
        d = errors.index(max(errors))
        pairs.append((d, counts[d]))
        counts[d] += 1
    return pairs


def locate_sample(weights, domain, k, consumed, micro, dp, global_bs, *, step_base=1, from_resume=False,
                  rank_rule="block", sample_shift=0, step_size=None):
    """The right answer, or (with a keyword) one of the mistakes the check names."""
    pairs = blend_pairs(weights, 4096)
    i = pairs.index((domain, k + sample_shift))
    if i < consumed:
        return None
    group, within = micro * dp, i % global_bs
    step = (i - consumed if from_resume else i) // (step_size or global_bs) + step_base
    rank = {"block": i % group // micro, "strided": within % dp, "no_wrap": within // micro}[rank_rule]
    return {"blend_index": i, "step": step, "rank": rank, "microbatch": within // group}


def restart_with_new_blend(old_w, new_w, consumed, micro, rank, dp, *, refuse=None, read_from="new", start=None):
    """The right answer, or (with a keyword) one of the mistakes the check names."""
    size = consumed + micro * dp
    old, new = blend_pairs(old_w, size), blend_pairs(new_w, size)
    begin = consumed + rank * micro if start is None else start(consumed, micro, rank)
    first = [list(p) for p in (new if read_from == "new" else old)[begin:begin + micro]]
    refused = old[:consumed] != new[:consumed] if refuse is None else refuse(old_w, new_w)
    return {"refused": refused, "first_microbatch": first,
            "already_trained": sum(tuple(p) in set(old[:consumed]) for p in first)}


def test_q4(capsys):
    result = check.q4(locate_sample)
    assert result.passed, result.message
    for wrong in ({"step_base": 0}, {"from_resume": True}, {"rank_rule": "strided"}, {"rank_rule": "no_wrap"},
                  {"sample_shift": 1}, {"step_size": 1}):
        assert check.q4(lambda *a, w=wrong: locate_sample(*a, **w)).status == FAIL, wrong
    assert check.q4(lambda *a: locate_sample(*a) or {"blend_index": 0}).status == FAIL   # never None
    assert check.q4(lambda *a: {"blend_index": 1, "step": 1, "rank": 1, "microbatch": 0}).status == FAIL  # hard-coded
    assert check.q4(stub).status == NOT_ATTEMPTED


def test_q5(capsys):
    result = check.q5(restart_with_new_blend)
    assert result.passed, result.message
    for wrong in ({"refuse": lambda a, b: False}, {"refuse": lambda a, b: a != b}, {"read_from": "old"},
                  {"start": lambda c, m, r: r * m}):
        assert check.q5(lambda *a, w=wrong: restart_with_new_blend(*a, **w)).status == FAIL, wrong

    def counts_nothing(*args):
        return {**restart_with_new_blend(*args), "already_trained": 0}

    assert check.q5(counts_nothing).status == FAIL
    assert check.q5(stub).status == NOT_ATTEMPTED


def test_q4_q5_compare_with_the_real_sampler_and_guard():
    """The references agree with the worked examples the notebook gives."""
    assert restart.locate_sample([3, 1], 1, 0, 0, 1, 2, 2) == {"blend_index": 1, "step": 1, "rank": 1,
                                                                 "microbatch": 0}
    assert restart.locate_sample([3, 1], 1, 0, 2, 1, 2, 2) is None
    assert restart.restart_with_new_blend([3, 1], [1, 1], 8, 2, 1, 2) == {
        "refused": True, "first_microbatch": [[0, 5], [1, 5]], "already_trained": 1}
    assert restart.restart_with_new_blend([3, 1], [6, 2], 8, 2, 1, 2)["refused"] is False   # same shares: same samples
    assert restart.restart_with_new_blend([3, 1], [1, 1], 0, 2, 0, 2)["refused"] is False   # nothing trained yet


def test_the_layout_mistakes_are_defined_once_for_chapters_0_and_6():
    """ch00 q1 and ch06 q2 name the same layout mistakes from labsupport.check.layout_mistakes: chapter 0 uses
    them as they are, chapter 6 a variant that keeps at least one of their texts."""
    from labsupport.check import ch00, layout_mistakes as layout

    pairs = [(layout.ACCEPTS_INDIVISIBLE, "accepts_indivisible_layout"), (layout.ONE_NODE_ONLY, "dp_one_node"),
             (layout.REFUSES_TP_ACROSS_NODES, "refuses_tp_across_nodes"), (layout.DIVIDES_BY_TP_ONLY, "dp_ignores_pp"),
             (layout.RAISES_LEGAL_LAYOUT, "raises_legal_layout")]
    for shared, name in pairs:
        in_ch00, in_ch06 = ch00.RULES["q1"][shared.name], check.RULES["q2"][name]
        assert in_ch00 == shared.but(formula=in_ch00.formula), shared.name
        assert any(getattr(in_ch06, f) == getattr(shared, f) for f in ("symptom", "ask", "fix")), name
        assert in_ch06.formula and in_ch06.formula != in_ch00.formula       # each chapter's own formula
