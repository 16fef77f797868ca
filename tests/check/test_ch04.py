"""labsupport.check.ch04: each check passes the reference, fails plausible mistakes and
hard-coded answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

import math

import numpy as np

from labsupport.check import ch04 as check
from labsupport.datasets.bin_packing import first_fit_decreasing, padding_share
from labsupport.datasets.gpt_samples import get_ltor_masks_and_position_ids


def stub(*args):
    raise NotImplementedError("exercise")


GOOD_Q4 = {"a_padding_share": 1 - 300 / 4096, "a_wasted": ["compute", "memory", "throughput"],
           "b_examples_per_pack": 13, "b_speedup": 13,
           "c_must_do": ["block_mask", "boundary_loss"], "c_reset_positions_for": ["learned_absolute"],
           "why": "Padding burns compute and memory on empty slots; packing fills them, but each example must "
                  "stay isolated in attention, positions and loss."}


def test_q1_padding_share(capsys):
    assert check.q1(padding_share).passed
    real_share = lambda lengths, s: sum(lengths) / (len(lengths) * s)                # the complement
    batch_max = lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths))  # padded to the longest
    hard_coded = lambda lengths, s: 0.9268
    for wrong in (real_share, batch_max, hard_coded):
        assert check.q1(wrong).status == "failed"
    assert check.q1(stub).status == "not attempted"
    assert "hint:" in capsys.readouterr().out


def test_q2_first_fit_decreasing():
    assert check.q2(lambda lengths, p: first_fit_decreasing(lengths, p).tolist()).passed

    def naive(lengths, pack_size, decreasing=True, best=False):
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i]) if decreasing else range(len(lengths))
        bins, room = [], []
        for i in order:
            fits = [b for b in range(len(bins)) if room[b] >= lengths[i]]
            if fits:
                b = min(fits, key=lambda b: room[b]) if best else fits[0]
                bins[b].append(i)
                room[b] -= lengths[i]
            else:
                bins.append([i])
                room.append(pack_size - lengths[i])
        return bins

    assert check.q2(naive).passed                                        # any tie order among equal lengths
    assert check.q2(lambda l, p: naive(l, p, decreasing=False)).status == "failed"   # plain first fit
    assert check.q2(lambda l, p: naive(l, p, best=True)).status == "failed"          # best fit
    assert check.q2(lambda l, p: [[i] for i in range(len(l))]).status == "failed"    # no packing
    assert check.q2(lambda l, p: naive(l, p + 5)).status == "failed"                 # overfull packs
    assert check.q2(stub).status == "not attempted"


def test_q3_positions_and_mask():
    def reference(tokens, eod):
        mask, _, pos = get_ltor_masks_and_position_ids(tokens, eod, True, True, False)
        return pos, mask[0]

    def inverted(tokens, eod):
        pos, mask = reference(tokens, eod)
        return pos, ~mask

    def restart_at_eod(tokens, eod):  # positions restart *at* the EOD instead of after it
        pos, mask = reference(tokens, eod)
        out, p = [], 0
        for t in np.asarray(tokens):
            p = 0 if t == eod else p
            out.append(p)
            p += 1
        return np.array(out), mask

    def causal_only(tokens, eod):
        mask, _, pos = get_ltor_masks_and_position_ids(tokens, eod, True, False, False)
        return pos, mask

    assert check.q3(reference).passed
    assert check.q3(lambda t, e: tuple(x.numpy() for x in reference(t, e))).passed    # numpy is fine
    for wrong in (inverted, restart_at_eod, causal_only):
        assert check.q3(wrong).status == "failed", wrong.__name__
    assert check.q3(stub).status == "not attempted"
    # step 1 of 2: right positions and no mask yet → not passed, not failed either (🟡, no hint): told the positions
    # are right (issue #29: a correct step 1 showed ❌)
    half = check.q3(lambda t, e: (reference(t, e)[0], None))
    assert half.status == "not attempted" and "position_ids are right" in half.message and half.hint == ""
    wrong_half = check.q3(lambda t, e: (restart_at_eod(t, e)[0], None))
    assert wrong_half.status == "failed"
    assert "position_ids" in wrong_half.message and "are right" not in wrong_half.message


def test_q4_exercise_3():
    result = check.q4(lambda: dict(GOOD_Q4))
    assert result.passed and "why" in result.manual
    for key, bad in (("a_padding_share", 300 / 4096), ("a_wasted", ["compute", "examples"]),
                     ("b_examples_per_pack", 1), ("b_examples_per_pack", 14), ("b_examples_per_pack", 13.65),
                     ("b_speedup", 2.0), ("c_must_do", ["block_mask"]),
                     ("c_must_do", ["block_mask", "boundary_loss", "raise_lr"]),
                     ("c_must_do", ["block_mask", "reset_positions", "boundary_loss"]),
                     ("c_reset_positions_for", ["learned_absolute", "rotary"]), ("c_reset_positions_for", []),
                     ("why", "")):
        assert check.q4(lambda: {**GOOD_Q4, key: bad}).status == "failed", key
    assert check.q4(stub).status == "not attempted"


def test_q4_boundary_loss_is_asked_for_sft_and_called_a_choice_in_pretraining():
    """Issue #30: Megatron-LM (--eod-mask-loss) and NeMo (eod_mask_loss=False) leave the boundary loss on in
    pre-training; the question is about SFT examples, where masking it is required — the option and the model
    answer say both, and the key still requires it."""
    option = check.MUST_DO_OPTIONS["boundary_loss"]
    assert "SFT" in option and "eod_mask_loss" in option and "off by default" in option
    assert "for SFT" in check.MODEL_ANSWER_Q4 and "eod_mask_loss is a choice" in check.MODEL_ANSWER_Q4
    assert check.q4(lambda: {**GOOD_Q4, "c_must_do": ["block_mask"]}).status == "failed"


def test_q5_sample_documents():
    from labsupport.datasets.gpt_samples import build_sample_idx, sample_segments

    def reference(sizes, doc_idx, seq, k):
        sizes, doc_idx = np.asarray(sizes, np.int32), np.asarray(doc_idx, np.int32)
        si = build_sample_idx(sizes, doc_idx, seq, 1, int(sizes.sum()))   # epochs do not change the walk
        return sample_segments(sizes, doc_idx, si, k)

    def walk(sizes, doc_idx, seq, k, n_tokens=None):                      # a learner's loop
        want = seq + 1 if n_tokens is None else n_tokens
        pos, out, start = 0, [], k * seq
        for d in doc_idx:
            a, b = max(start - pos, 0), min(start + want - pos, sizes[d])
            if a < b:
                out.append((d, a, b))
            pos += sizes[d]
        return out

    assert check.q5(walk).passed
    assert check.q5(lambda *a: walk(*a[:4], n_tokens=a[2])).status == "failed"        # S tokens, not S + 1
    assert check.q5(lambda s, d, q, k: walk(s, d, q, k + 1)).status == "failed"        # off by one sample
    assert check.q5(stub).status == "not attempted"
    assert reference([5, 2, 7], [0, 1, 2], 4, 1) == [(0, 4, 5), (1, 0, 2), (2, 0, 2)]


def test_q4_names_every_failing_part():
    """#13: two wrong parts of the structured answer are both named in one run."""
    result = check.q4(lambda: {**GOOD_Q4, "b_speedup": 2.0, "c_must_do": ["block_mask"]})
    assert result.status == "failed" and "2 parts to fix" in result.message
    assert "(b) speed-up 2" in result.message and "(c) not the right set" in result.message


def pad_multiple(context_parallel_size, tensor_parallel_size, sequence_parallel):
    cp_multiple = 2 * context_parallel_size if context_parallel_size > 1 else 1
    sp_multiple = context_parallel_size * tensor_parallel_size if sequence_parallel and tensor_parallel_size > 1 else 1
    return cp_multiple * sp_multiple // math.gcd(cp_multiple, sp_multiple)


def test_q6_pad_multiple(capsys):
    from labsupport.datasets.sft_packing import pad_seq_to_mult as reference

    result = check.q6(pad_multiple)
    assert result.passed and f"all {len(check._Q6_CASES)} combinations" in result.message, result.message
    assert len(check._Q6_CASES) == 128 and check._Q6_CASES[0] == (1, 1, False)
    assert check.q6(reference).passed
    assert check.q6(lambda cp, tp, sp: np.int64(reference(cp, tp, sp))).passed       # a numpy int is an int
    assert pad_multiple(2, 4, True) == 8 and pad_multiple(1, 4, True) == 4           # Bridge's own example
    cp_m = lambda cp: 2 * cp if cp > 1 else 1                                         # noqa: E731
    sp_m = lambda cp, tp, sp: cp * tp if sp and tp > 1 else 1                          # noqa: E731
    for wrong, name, shown in (
            (lambda cp, tp, sp: math.lcm(cp, sp_m(cp, tp, sp)), "cp_not_doubled",
             "pad_multiple(2, 1, False) returned 2, expected 4"),
            (lambda cp, tp, sp: math.lcm(2 * cp, sp_m(cp, tp, sp)), "doubles_cp_1",
             "pad_multiple(1, 1, False) returned 2, expected 1"),
            (lambda cp, tp, sp: cp_m(cp), "sp_ignored", "pad_multiple(1, 2, True) returned 1, expected 2"),
            (lambda cp, tp, sp: math.lcm(cp_m(cp), sp_m(cp, tp, True)), "sp_when_off",
             "pad_multiple(1, 2, False) returned 2, expected 1"),
            (lambda cp, tp, sp: cp_m(cp) * sp_m(cp, tp, sp), "product_not_lcm",
             "pad_multiple(2, 2, True) returned 16 = 4 × 4, expected 4"),
            (lambda cp, tp, sp: math.lcm(cp_m(cp), tp if sp and tp > 1 else 1), "sp_over_tp_only",
             "pad_multiple(2, 4, True) returned 4, expected 8"),
            (lambda cp, tp, sp: cp if cp > 1 else 1, "sp_ignored",              # two mistakes: the first shown
             "pad_multiple(1, 2, True) returned 1, expected 2")):
        failed = check.q6(wrong)
        assert (failed.status, failed.mistake) == ("failed", name), failed.message
        assert shown in failed.message, failed.message                  # shown on the smallest case
    # SP's CP·TP without the TP > 1 test is the same rule (TP = 1: lcm(2·CP, CP) = 2·CP): no mistake to name
    assert check.q6(lambda cp, tp, sp: math.lcm(cp_m(cp), cp * tp if sp else 1)).passed
    for other in (lambda cp, tp, sp: 3, lambda cp, tp, sp: reference(cp, tp, sp) + (cp == 8)):
        failed = check.q6(other)
        assert failed.status == "failed" and not failed.mistake, failed.message
    for not_int in (lambda *a: float(reference(*a)), lambda *a: reference(*a) == 1, lambda *a: True):
        failed = check.q6(not_int)
        assert failed.status == "failed" and "expected an int" in failed.message, failed.message
    assert check.q6(stub).status == "not attempted"
    capsys.readouterr()


def test_q6_question_states_the_count_the_format_and_bridges_example(capsys):
    """The question says what the check tests (all 128 cases, an int) and Bridge's own example, which passes."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "solutions" / "04_packing_and_masks.ipynb"
    text = next("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("### Exercise 6"))
    result = check.q6(pad_multiple)
    assert result.passed and "all 128 combinations" in result.message and "all 128 combinations" in text
    words = " ".join(text.split())                                   # the lines as one, however wrapped
    for needed in ("pad_multiple(2, 4, True)` returns `8`", "pad_multiple(1, 4, True)` returns `4`", "an int",
                   "2·CP chunks", "CP·TP ranks", "pad_seq_to_mult"):
        assert needed in words, needed
    assert "(transfer)" not in text.splitlines()[0]                  # q5 is the chapter's transfer question
    capsys.readouterr()
