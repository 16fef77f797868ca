"""Chapter 6's checks give tiered feedback for the mistakes they recognise: the first time, the
symptom (the call, on the smallest input that shows it, and what its result shows) and a question,
not the fix; on a repeat, the fix; then the formula.  q1 (the sampler's slice), q2 (the batch
arithmetic) and q3 (a diagnosis from a log) as well as the integration questions q4 (where a sample
is read after a resume) and q5 (a restart with a changed blend).  Every message prints plain numbers."""
from __future__ import annotations

import pytest

from labsupport.check import ch06 as check
from labsupport.check._core import FAIL

from tests.check.test_ch06 import batch_arithmetic, diagnose, dp_slice, locate_sample, restart_with_new_blend


@pytest.fixture(autouse=True)
def _fixed_inputs(monkeypatch):
    """The checks' random inputs from a fixed seed: q3's false alarms show only on some random logs."""
    monkeypatch.setenv("LABSUPPORT_CHECK_SEED", "feedback-ch06")


# q1: wrong slices (consumed_samples, micro_batch_size, rank, data_parallel_size) → indices
Q1 = [("strided", lambda c, m, r, d: [c + r + j * d for j in range(m)],
       "dp_slice(consumed_samples=0, micro_batch_size=2, rank=0, data_parallel_size=2) returned [0, 2]; for rank 1 "
       "it returns [1, 3]"),
      ("ranks_overlap", lambda c, m, r, d: list(range(c + r, c + r + m)), "both ranks read [1]"),
      ("from_zero", lambda c, m, r, d: list(range(r * m, (r + 1) * m)),
       "dp_slice(consumed_samples=1, micro_batch_size=1, rank=0, data_parallel_size=1) returned [0]"),
      ("whole_group", lambda c, m, r, d: list(range(c, c + m * d)),
       "returned [0, 1]: 2 indices for micro_batch_size = 1"),
      ("wrong_length", lambda c, m, r, d: list(range(c + r * m, c + r * m + m + 1)),
       "data_parallel_size=1) returned [0, 1]: 2 indices for micro_batch_size = 1")]


def _arith(dp=None, acc=None, tokens=None, consumed=None, layout_check=True, batch_check=True, refuse_if=None):
    """exercise 2's answer, with one part replaced: each part is f(devices, nodes, tp, pp, micro, global, seq,
    steps, dp)."""
    def batch_arithmetic_(cfg, steps):
        t, m = cfg.trainer, cfg.model
        v = (t.devices, t.num_nodes, m.tensor_model_parallel_size, m.pipeline_model_parallel_size,
             m.micro_batch_size, m.global_batch_size, m.encoder_seq_length, steps)
        world = v[0] * v[1]
        if layout_check and world % (v[2] * v[3]):
            raise ValueError("layout")
        if refuse_if and refuse_if(*v):
            raise ValueError("refused")
        d = dp(*v) if dp else max(world // (v[2] * v[3]), 1)
        if batch_check and v[5] % (v[4] * d):
            raise ValueError("global batch")
        right = {"data_parallel_size": d, "accumulation_steps": v[5] // (v[4] * d),
                 "tokens_per_step": v[5] * v[6], "consumed_samples": v[7] * v[5]}
        for key, f in (("accumulation_steps", acc), ("tokens_per_step", tokens), ("consumed_samples", consumed)):
            if f:
                right[key] = f(*v, d)
        return right
    return batch_arithmetic_


Q2 = [("dp_ignores_pp", _arith(dp=lambda d, n, t, p, m, g, s, k: d * n // t),
       "data_parallel_size = 2: 2 replica(s) of TP × PP = 2 GPUs would need 4 GPUs"),
      ("dp_one_node", _arith(dp=lambda d, n, t, p, m, g, s, k: max(d // (t * p), 1)), "per node × 2 = 2"),
      ("accumulation_without_dp", _arith(acc=lambda d, n, t, p, m, g, s, k, dp: g // m),
       "samples per optimizer step, but global_batch_size"),
      ("tokens_one_microbatch", _arith(tokens=lambda d, n, t, p, m, g, s, k, dp: m * s),
       "tokens_per_step = 16 = 1 × 16 tokens"),
      ("tokens_one_rank", _arith(tokens=lambda d, n, t, p, m, g, s, k, dp: g // dp * s),
       "tokens_per_step = 48 = 3 × 16 tokens"),
      ("tokens_without_accumulation", _arith(tokens=lambda d, n, t, p, m, g, s, k, dp: m * dp * s),
       "but one optimizer step trains on global_batch_size"),
      ("consumed_is_steps", _arith(consumed=lambda d, n, t, p, m, g, s, k, dp: k),
       "consumed_samples = 2 after 2 steps, 1 per step"),
      ("consumed_steps_times_micro", _arith(consumed=lambda d, n, t, p, m, g, s, k, dp: k * m),
       "consumed_samples = 4 after 2 steps, 2 per step"),
      ("consumed_without_accumulation", _arith(consumed=lambda d, n, t, p, m, g, s, k, dp: k * m * dp),
       "one step reads global_batch_size"),
      ("accepts_indivisible_layout", _arith(layout_check=False), "cannot be cut into whole replicas of TP × PP"),
      ("accepts_indivisible_batch", _arith(batch_check=False), "cannot be cut into whole micro-steps"),
      ("refuses_tp_across_nodes", _arith(refuse_if=lambda d, n, t, p, m, g, s, k: t > d),
       "only TP = 2 is wider than one node of 1 GPU"),
      ("raises_legal_layout", _arith(refuse_if=lambda d, n, t, p, m, g, s, k: t <= d < t * p),
       "divides the 2 GPUs and micro × DP")]


def _diagnose_with(suspect=None, fix=None, before=None):
    """exercise 3's answer with its suspect or fix changed (``suspect(log, right)``, ``fix(log, right)``), or
    a rule ``before(log)`` tried first."""
    def diagnose_(log):
        first = before(log) if before else None
        if first:
            return first
        right = diagnose(log)
        return {"suspect": suspect(log, right) if suspect else right["suspect"],
                "fix": fix(log, right) if fix else right["fix"]}
    return diagnose_


def _misses(s):
    other = check.SUSPECTS[(check.SUSPECTS.index(s) + 1) % len(check.SUSPECTS)]
    return _diagnose_with(suspect=lambda log, right: other if right["suspect"] == s else right["suspect"])


def _wrong_fix(s, wrong):
    return _diagnose_with(fix=lambda log, right: wrong if right["suspect"] == s else right["fix"])


def _alarm(field, sick, suspect, fix):
    return _diagnose_with(before=lambda log: {"suspect": suspect, "fix": fix} if sick(log[field]) else None)


def _named(s):
    return f"named suspect {check.SUSPECTS[(check.SUSPECTS.index(s) + 1) % len(check.SUSPECTS)]!r}, whose field"


Q3 = ([(f"missed_{s}", _misses(s), _named(s)) for s in check.SUSPECTS]
      + [(f"wrong_fix_{s}", _wrong_fix(s, "mmap" if s != "load_everything" else "packing"),
          "is what is wrong: it leaves")
         for s in check.SUSPECTS if s != "no_boundary_mask"]
      + [("wrong_fix_no_boundary_mask", _wrong_fix("no_boundary_mask", "packing"),
          "is what is wrong: it leaves cross_document_"),
         ("flag_on_fused", _wrong_fix("no_boundary_mask", "reset_attention_mask"),
          "this log's attention_path = 'fused'"),
         ("cu_seqlens_on_unfused", _wrong_fix("no_boundary_mask", "cu_seqlens"), "attention_path = 'unfused'"),
         ("flag_read_as_symptom",
          _diagnose_with(before=lambda log: {"suspect": "no_boundary_mask", "fix": "cu_seqlens"}
                         if log["attention_path"] == "fused" and not log["reset_attention_mask"] else None),
          "but cross_document_attention = 0.0: no attention pair crosses a document"),
         ("false_alarm_data_share", _alarm("data_share", lambda v: v > 0.1, "tokenize_every_step", "binary_index"),
          "lies inside its healthy range 0.01 – 0.15"),
         ("false_alarm_real_token_share", _alarm("real_token_share", lambda v: v < 0.96, "padding", "packing"),
          "lies inside its healthy range 0.93 – 1.0"),
         ("false_alarm_small_domain_gap", _alarm("small_domain_gap", lambda v: v > 0.6, "small_set_oversampled",
                                                 "cap_epochs"), "lies inside its healthy range 0.0 – 0.8"),
         ("false_alarm_rss_over_corpus", _alarm("rss_over_corpus", lambda v: v > 0.1, "load_everything", "mmap"),
          "lies inside its healthy range 0.001 – 0.2")])

Q4 = [("step_from_zero", {"step_base": 0}), ("step_from_resume", {"from_resume": True}),
      ("rank_strided", {"rank_rule": "strided"}), ("rank_beyond_dp", {"rank_rule": "no_wrap"}),
      ("k_off_by_one", {"sample_shift": 1}), ("step_is_microstep", {"step_size": "micro × DP"})]
Q5 = [("refusal_missed", {"refuse": lambda a, b: False}),
      ("refused_weights_not_samples", {"refuse": lambda a, b: a != b}),          # compares weights, not samples
      ("old_blend", {"read_from": "old"}), ("from_zero", {"start": lambda c, m, r: r * m})]


def _raw_weights_locate(weights, domain, k, consumed, micro, dp, global_bs):
    """exercise 4's answer with chapter 3's greedy rule run on the data_prefix numbers, not their shares (issue #29):
    the largest domain takes almost every position, so a smaller domain's sample is never found (ValueError)."""
    counts, pairs = [0] * len(weights), []
    for i in range(4096):
        errors = [w * max(i, 1) - c for w, c in zip(weights, counts)]
        d = errors.index(max(errors))
        pairs.append((d, counts[d]))
        counts[d] += 1
    i = pairs.index((domain, k))
    if i < consumed:
        return None
    return {"blend_index": i, "step": i // global_bs + 1, "rank": i % (micro * dp) // micro,
            "microbatch": i % global_bs // (micro * dp)}


def _locate_with(wrong):
    if wrong.get("step_size") == "micro × DP":   # steps of one micro × DP group: gradient accumulation forgotten
        return lambda w, d, k, c, m, dp, g: locate_sample(w, d, k, c, m, dp, g, step_size=m * dp)
    return lambda *a: locate_sample(*a, **wrong)


#: (question, rule name) → (the wrong answer planted for that rule of check.RULES, a phrase of its symptom)
PLANTED = {**{("q1", n): (w, p) for n, w, p in Q1}, **{("q2", n): (w, p) for n, w, p in Q2},
           **{("q3", n): (w, p) for n, w, p in Q3},
           **{("q4", n): (_locate_with(w), "locate_sample(weights=") for n, w in Q4},
           ("q4", "raw_weights"): (_raw_weights_locate, "which is where the blend of the raw weights"),
           **{("q5", n): (lambda *a, w=w: restart_with_new_blend(*a, **w), "restart_with_new_blend(old_weights=")
              for n, w in Q5}}
RIGHT = {"q1": dp_slice, "q2": batch_arithmetic, "q3": diagnose, "q4": locate_sample, "q5": restart_with_new_blend}
#: how each question's symptom starts: the call, on the smallest input that shows the mistake
CALL = {"q1": "dp_slice(", "q2": "batch_arithmetic(", "q3": "diagnose(", "q4": "locate_sample(weights=",
        "q5": "restart_with_new_blend(old_weights="}
RULED = [(q, n) for q, rules in check.RULES.items() for n in rules]


def _plain_text(text: str) -> bool:
    return "np." not in text and "array(" not in text and "int64" not in text


def _tiers(question, answer, name, capsys):
    """Three runs of the same wrong answer: (result, printed output) each."""
    runs = []
    for tier in (1, 2, 3):
        result = question(answer)
        out = capsys.readouterr().out
        assert (result.status, result.mistake, result.tier) == (FAIL, name, tier), result.message
        assert _plain_text(result.message) and _plain_text(result.hint), result.message + result.hint
        runs.append((result, out))
    return runs


@pytest.mark.parametrize("question, name", RULED, ids=[f"{q}-{n}" for q, n in RULED])
def test_every_rule_is_named_in_its_tiers(question, name, capsys):
    """The answer planted for each rule of check.RULES: tier 1 the symptom and a question, a repeat the fix, the
    third time the formula; then the right answer passes."""
    check_q, (wrong, symptom) = getattr(check, question), PLANTED[(question, name)]
    (first, out1), (second, _), (third, _) = _tiers(check_q, wrong, name, capsys)
    assert first.message == second.message == third.message            # the symptom, every time
    assert first.message.startswith(CALL[question]) and symptom in first.message, first.message
    assert first.message in out1 and f"hint: {first.hint}" in out1
    assert first.hint.rstrip().endswith("?")                           # tier 1 asks
    assert second.hint not in out1 and third.hint not in out1          # neither the fix nor the formula yet
    assert len({first.hint, second.hint, third.hint}) == 3
    assert second.hint not in first.hint and third.hint not in second.hint   # the fix, then the formula, new
    assert not second.hint.rstrip().endswith("?")
    passed = check_q(RIGHT[question])                                   # the right answer after the mistakes
    assert passed.passed and passed.mistake == "" and passed.tier == 0, passed.message
    capsys.readouterr()


def test_every_rule_has_a_planted_answer_and_every_planted_answer_a_rule():
    assert set(PLANTED) == set(RULED), (sorted(set(RULED) - set(PLANTED)), sorted(set(PLANTED) - set(RULED)))
    assert len(RULED) >= 45


def test_the_same_wrong_answer_is_named_alike_whatever_the_random_inputs(monkeypatch, capsys):
    """A failure is shown on hand-picked small inputs, so the mistake (and its tier count) does not depend on
    which random case failed first."""
    for seed in ("a", "b", "c"):
        monkeypatch.setenv("LABSUPPORT_CHECK_SEED", seed)
        for (question, name), (wrong, _) in PLANTED.items():
            if question in ("q4", "q5") or name.startswith(("false_alarm", "flag_read")):  # only on some inputs
                continue
            result = getattr(check, question)(wrong)
            # a fix wrong on one attention path only: all of a run's logs may take the other path
            assert result.mistake == name or (result.passed and name in ("flag_on_fused", "cu_seqlens_on_unfused")), \
                (seed, name, result.message)
    capsys.readouterr()


def test_unrecognised_wrong_answers_fall_back_to_the_question_tiers(capsys):
    result = check.q5(lambda *a: {**restart_with_new_blend(*a), "already_trained": -1})
    assert result.status == FAIL and result.mistake == "" and result.hint == check.q5.hint[0]
    assert "already_trained = -1, expected" in result.message and _plain_text(result.message)
    result = check.q4(lambda *a: None)
    assert result.status == FAIL and result.mistake == "" and "expected a dict" in result.message
    capsys.readouterr()


def test_every_answer_type_mistake_is_reported_in_plain_words(capsys):
    import numpy as np

    def numpy_answer(*args):
        out = restart_with_new_blend(*args)
        return {**out, "refused": "yes"}

    result = check.q5(numpy_answer)
    assert result.status == FAIL and "expected True or False" in result.message
    result = check.q4(lambda *a: {k: np.int64(v + 1) for k, v in (locate_sample(*a) or {"blend_index": 0}).items()})
    assert result.status == FAIL and _plain_text(result.message), result.message
    capsys.readouterr()


def _submission(tmp_path, student, change=None):
    """solutions/06 as ``student``'s submission, with ``change(source)`` applied to q4's answer cell."""
    import json

    from labsupport.paths import REPO_ROOT

    nb = json.loads((REPO_ROOT / "solutions" / "06_end_to_end.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if change and cell["cell_type"] == "code" and "def blend_pairs" in src:
            cell["source"] = change(src)
    path = tmp_path / student / "06_end_to_end.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_the_grader_gives_the_solutions_full_marks_and_flags_the_reference(tmp_path):
    """The grader runs q4 and q5 in its own process against the student's sandboxed functions:
    the solutions get 5/5; an answer that calls build_blending_indices is flagged, and the
    reference cannot even run while chapter 6 is graded (q5, which uses it, fails too)."""
    from labsupport.workbook.grading.exercise import discover
    from labsupport.workbook.grading.grader import Options, grade_file

    chapters = discover()
    assert {"q4", "q5"} <= {q.name for q in chapters["06"].questions}
    graded = grade_file(_submission(tmp_path, "honest"), chapters, Options(seed="t", rounds=1))
    assert [(r.question, r.status, r.flags) for r in graded.rows] == [
        (f"q{n}", "passed", []) for n in range(1, 6)], [(r.question, r.status, r.reason) for r in graded.rows]
    cheat = ("    from labsupport.datasets.blending import build_blending_indices, normalize_weights\n"
             "    di, si = build_blending_indices(normalize_weights(weights), size)\n"
             "    return list(zip(di.tolist(), si.tolist()))\n")
    graded = grade_file(_submission(tmp_path, "cheat", lambda src: src.replace(
        "    ### BEGIN SOLUTION\n    shares", "    ### BEGIN SOLUTION\n" + cheat + "    shares", 1)),
        chapters, Options(seed="t", rounds=1))
    rows = {r.question: r for r in graded.rows}
    assert any(f.startswith("reference:") for f in rows["q4"].flags), rows["q4"].flags
    assert rows["q4"].points == 0 and rows["q4"].status == "flagged" and rows["q5"].status == "failed"
    assert "not available while grading" in rows["q5"].reason


@pytest.mark.parametrize("chapter", ["00", "06"])
def test_exercises_are_numbered_as_their_checks(chapter):
    """Issue #24: the book's exercise 5 (NeMo or Hugging Face) moved to chapter 0, where that
    trade-off is taught; chapter 6's later questions moved up. In both solutions notebooks the
    headings run "Exercise 1 … n", each followed by its ``check.qN(...)``, and the check module
    has exactly q1 … qn."""
    import importlib
    import json
    import re

    from labsupport.paths import REPO_ROOT

    path = next((REPO_ROOT / "solutions").glob(f"{chapter}_*.ipynb"))
    order = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            order += [f"Exercise {n}" for n in re.findall(r"^### Exercise (\d+)\b", src, re.M)]
        else:
            order += re.findall(r"\bcheck\.(q\d+)\(", src)
    n = sum(item.startswith("Exercise") for item in order)
    assert order == [x for k in range(1, n + 1) for x in (f"Exercise {k}", f"q{k}")], order
    module = importlib.import_module(f"labsupport.check.ch{chapter}")
    checks = sorted(name for name, fn in vars(module).items() if getattr(fn, "is_check", False))
    assert checks == [f"q{k}" for k in range(1, n + 1)]


def test_the_framework_question_is_chapter_0s():
    from labsupport.check import ch00

    assert ch00.REASONS and callable(ch00.q4) and "exercise_5" in ch00.q4.__doc__
    assert not hasattr(check, "REASONS") and "exercise_5" not in (check.q4.__doc__ or "")
    assert all(s.salt.startswith("labsupport:ch00:q4:") for s in (ch00._CHOICE, ch00._NEEDED, ch00._WRONG))


def test_q3_a_blame_no_calm_log_shows_and_no_threshold_explains_fails_plainly(capsys):
    """A suspect named on some random logs only, whose own field has no threshold (a boolean): no named
    mistake fits, so the check says which field is healthy and asks which is not."""
    odd = _diagnose_with(before=lambda log: {"suspect": "tokenizer_mismatch", "fix": "same_tokenizer"}
                         if 0.5 < log["small_domain_gap"] <= 0.8 else None)
    result = check.q3(odd)
    assert result.mistake == "" and result.status == FAIL, result.message
    assert "decode_roundtrip_ok = True is healthy in this log; which field is not?" in result.message
    assert _plain_text(result.message)
    capsys.readouterr()
