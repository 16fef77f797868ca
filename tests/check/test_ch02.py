"""labsupport.check.ch02: each check passes a correct answer, fails plausible mistakes and
hard-coded answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

import math
import struct

import numpy as np

from labsupport.check import ch02 as check


def stub(*args):
    raise NotImplementedError("exercise")


def parse_idx(raw: bytes) -> dict:
    if raw[:9] != b"MMIDIDX\x00\x00":
        raise ValueError("bad magic")
    version, code, n, d = struct.unpack("<QBQQ", raw[9:34])
    return {"version": version, "dtype_code": code, "num_sequences": n, "num_document_indices": d,
            "sequence_lengths": np.frombuffer(raw, "<i4", n, 34),
            "sequence_pointers": np.frombuffer(raw, "<i8", n, 34 + 4 * n),
            "document_indices": np.frombuffer(raw, "<i8", d, 34 + 12 * n)}


def document_byte_offset(lengths, document_indices, itemsize, k):
    return int(np.asarray(lengths[: document_indices[k]], dtype=np.int64).sum()) * itemsize


GOOD = {"problems": {"cpu": "tokenize_once", "random_access": "idx_pointers", "memory": "mmap"},
        "explanation": "Tokenizing every step repeats CPU work so the GPU waits; the .bin holds ids "
                       "made once. Text has no index, the .idx gives offsets for O(1) access. "
                       "Loading all of it does not fit in RAM; mmap pages in only what is read."}


def test_q1(capsys):
    assert check.q1(parse_idx).passed

    def no_magic_check(raw):
        return parse_idx(b"MMIDIDX\x00\x00" + raw[9:])

    def pointers_as_int32(raw):
        out = parse_idx(raw)
        n = out["num_sequences"]
        out["sequence_pointers"] = np.frombuffer(raw, "<i4", n, 34 + 4 * n)
        return out

    def off_by_header(raw):  # forgets the dtype byte: header of 33 bytes
        out = parse_idx(raw)
        n = out["num_sequences"]
        out["sequence_lengths"] = np.frombuffer(raw, "<i4", n, 33)
        return out

    assert not check.q1(no_magic_check).passed
    assert not check.q1(pointers_as_int32).passed
    assert not check.q1(off_by_header).passed
    assert check.q1(stub).status == "not attempted"
    out = capsys.readouterr().out
    assert "✅ q1 passed" in out and "hint:" in out


def test_q2(capsys):
    assert check.q2(document_byte_offset).passed
    assert not check.q2(lambda L, d, s, k: int(np.sum(L[:k])) * s).passed           # k, not d[k]
    assert not check.q2(lambda L, d, s, k: int(np.sum(L[: d[k]]))).passed          # tokens, not bytes
    assert not check.q2(lambda L, d, s, k: int(np.sum(L[: d[k] + 1])) * s).passed  # end, not start
    assert not check.q2(lambda L, d, s, k: 0).passed
    assert check.q2(stub).status == "not attempted"


def test_q3(capsys):
    res = check.q3(lambda: GOOD)
    assert res.passed and res.manual == {"explanation": GOOD["explanation"]}
    swapped = {**GOOD, "problems": {"cpu": "mmap", "random_access": "idx_pointers", "memory": "tokenize_once"}}
    assert not check.q3(lambda: swapped).passed
    padding = {**GOOD, "problems": {"cpu": "tokenize_once", "padding": "packing", "memory": "mmap"}}
    assert not check.q3(lambda: padding).passed
    assert not check.q3(lambda: {**GOOD, "explanation": "mmap"}).passed
    assert not check.q3(lambda: {**GOOD, "problems": {**GOOD["problems"], "vocab": "fp32"}}).passed
    assert check.q3(stub).status == "not attempted"


def document_tokens(raw_idx, raw_bin, k):
    idx = parse_idx(raw_idx)
    codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
    dtype = np.dtype(codes[idx["dtype_code"]])
    first, last = int(idx["document_indices"][k]), int(idx["document_indices"][k + 1])
    parts = [np.frombuffer(raw_bin, dtype, int(idx["sequence_lengths"][s]), int(idx["sequence_pointers"][s]))
             for s in range(first, last)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def test_q4_transfer(capsys):
    result = check.q4(document_tokens)
    assert result.passed and "multi-sequence and empty" in result.message

    def first_sequence_only(raw_idx, raw_bin, k):             # ignores the second sequence of a document
        idx = parse_idx(raw_idx)
        s = int(idx["document_indices"][k])
        codes = {1: np.uint8, 4: np.int32, 5: np.int64, 8: np.uint16}
        if s == int(idx["document_indices"][k + 1]):
            return np.zeros(0, np.int64)
        return np.frombuffer(raw_bin, codes[idx["dtype_code"]], int(idx["sequence_lengths"][s]),
                             int(idx["sequence_pointers"][s]))

    def always_uint16(raw_idx, raw_bin, k):                     # ignores the dtype code
        idx = parse_idx(raw_idx)
        first, last = int(idx["document_indices"][k]), int(idx["document_indices"][k + 1])
        parts = [np.frombuffer(raw_bin, np.uint16, int(idx["sequence_lengths"][s]), int(idx["sequence_pointers"][s]))
                 for s in range(first, last)]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint16)

    for wrong in (first_sequence_only, always_uint16):
        failed = False
        for _ in range(5):                                      # random datasets: a miss needs a few tries
            if not check.q4(wrong).passed:
                failed = True
                break
        assert failed, wrong.__name__
    assert not check.q4(lambda raw_idx, raw_bin, k: [1, 2]).passed
    assert check.q4(stub).status == "not attempted"


def test_q3_shows_a_model_answer_once_passed(capsys):
    result = check.q3(lambda: GOOD)
    assert result.passed and "model answer" in result.message and check.MODEL_ANSWER_Q3 in result.message
    assert "model answer" not in check.q3(lambda: {"problems": {}, "explanation": ""}).message


def test_q1_header_is_an_ungraded_first_step(capsys):
    from labsupport.check._core import results

    before = len(results("ch02"))

    def header_only(raw):
        version, code, n, d = struct.unpack("<QBQQ", raw[9:34])
        return {"version": version, "dtype_code": code, "num_sequences": n, "num_document_indices": d}

    assert check.q1_header(header_only) is None, "nothing under the cell but its line"
    assert "✅ step 1 of q1: the header fields are right" in capsys.readouterr().out
    assert not check.q1(header_only).passed                          # the arrays are still missing

    def two_fields_wrong(raw):
        return {**header_only(raw), "version": 0, "dtype_code": 200}

    check.q1_header(two_fields_wrong)
    out = capsys.readouterr().out
    assert "❌ step 1 of q1" in out
    assert "version = " in out and "dtype_code = " in out                # both wrong fields named
    check.q1_header(stub)
    assert "not attempted" in capsys.readouterr().out
    assert len(results("ch02")) == before + 1                           # only the q1 call was recorded


def padded_vocab_size(vocab_size, divisible_by, tensor_parallel):
    multiple = divisible_by * tensor_parallel
    return math.ceil(vocab_size / multiple) * multiple


def test_q5_vocab_padding(capsys):
    from labsupport.models.vocab_padding import padded_vocab_size as reference

    result = check.q5(padded_vocab_size)
    assert result.passed and f"{len(check._Q5_EDGES)} edge cases" in result.message, result.message
    assert check.q5(reference).passed
    assert check.q5(lambda v, d, t: np.int64(reference(v, d, t))).passed              # a numpy int is an int
    for wrong, name, shown in (
            (lambda v, d, t: -(-v // d) * d, "ignores_tp", "padded_vocab_size(5, divisible_by=2, tensor_parallel=2) "
             "returned 6, expected 8"),
            (lambda v, d, t: (v // (d * t) + 1) * d * t, "always_adds", "padded_vocab_size(8, divisible_by=4, "
             "tensor_parallel=1) returned 12, expected 8"),
            (lambda v, d, t: v // (d * t) * d * t, "rounds_down", "padded_vocab_size(5, divisible_by=4, "
             "tensor_parallel=1) returned 4, expected 8"),
            (lambda v, d, t: v + d * t, "adds_multiple_not_rounds", "padded_vocab_size(5, divisible_by=4, "
             "tensor_parallel=1) returned 9, expected 8"),
            (lambda v, d, t: v + (d * t - v % (d * t)), "always_adds", "returned 12, expected 8")):  # the same, again
        failed = check.q5(wrong)
        assert (failed.status, failed.mistake) == ("failed", name), failed.message
        assert shown in failed.message, failed.message                  # shown on the smallest case
    for other in (lambda v, d, t: v, lambda v, d, t: -(-v // t) * t, lambda v, d, t: v + 1):
        failed = check.q5(other)
        assert failed.status == "failed" and not failed.mistake, failed.message
    as_float = check.q5(lambda v, d, t: float(padded_vocab_size(v, d, t)))
    assert as_float.status == "failed" and "expected an int" in as_float.message
    wrong_for_tp_3 = check.q5(lambda v, d, t: padded_vocab_size(v, d, t) + (t == 3))   # edges hold TP 3
    assert wrong_for_tp_3.status == "failed" and "tensor_parallel=3" in wrong_for_tp_3.message
    assert check.q5(stub).status == "not attempted"
    capsys.readouterr()
