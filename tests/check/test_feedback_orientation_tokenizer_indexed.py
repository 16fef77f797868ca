"""Issue #24, chapters 0–2: every named mistake of the checks of ch00–ch02 in its tiers.

For each named mistake a wrong answer that makes it: the first failure shows the symptom (on the
smallest input that shows it) and asks a question, without the fix; the second shows the fix; the
third the formula. The correct answers pass, and no message prints ``np.`` or ``array(``. The question
texts (solutions/NN) state what the checks run."""
from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

from labsupport.check import ch00, ch01, ch02
from labsupport.datasets.bpe import merge_step
from labsupport.datasets.tokenizer import compare_tokenizers, tokens_per_character
from labsupport.distributed.training_memory import training_memory_gb

from tests.check.test_ch00 import correct as dp_size
from tests.check.test_ch00_memory_and_hints import exercise_5
from tests.check.test_ch02 import GOOD as GOOD_Q3_CH02, document_byte_offset, padded_vocab_size, parse_idx
from tests.check.test_hint_tiers import _dp_group, _merge_step_last_tie

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------
# chapter 0's wrong answers
def _dp_with(value=None, warn=None, raise_if=None):
    def data_parallel_size(devices, num_nodes, tp, pp):
        world = devices * num_nodes
        if (raise_if or (lambda d, n, t, p: world % (t * p)))(devices, num_nodes, tp, pp):
            raise ValueError("no")
        for _ in range((warn or (lambda d, n, t, p: int(t > d)))(devices, num_nodes, tp, pp)):
            warnings.warn("slow")
        return (value or (lambda d, n, t, p: world // (t * p)))(devices, num_nodes, tp, pp)
    return data_parallel_size


def _memory_with(per_param):
    return lambda n, method, dp=1: n * per_param(method, dp) / 1e9


def _per_param(adam=18, distopt=lambda dp: 6 + 12 / dp):
    return lambda method, dp: {"bf16_weights": 2, "megatron_adam": adam, "megatron_distopt": distopt(dp)}[method]


# chapter 1's
def _merge_step_with(count_overlaps=True, step_after_match=2, max_replacements=None, mutate=False):
    def merge_step_(ids, new_id):
        if mutate:                      # right result, but it writes into the caller's list
            result = merge_step(list(ids), new_id)
            ids.append(-1)
            return result
        if len(ids) < 2:
            return list(ids), None
        if count_overlaps:
            best = merge_step(list(ids), new_id)[1]
        else:
            best = ch01._nonoverlapping_best(list(ids))
        out, i, done = [], 0, 0
        while i < len(ids):
            if (i + 1 < len(ids) and (ids[i], ids[i + 1]) == best
                    and (max_replacements is None or done < max_replacements)):
                out.append(new_id)
                i, done = i + step_after_match, done + 1
            else:
                out.append(ids[i])
                i += 1
        return out, best
    return merge_step_


def _diagnose_with(**change):
    def diagnose(train, serve, probes):
        out = compare_tokenizers(train, serve, probes)
        for key, fn in change.items():
            out[key] = fn(out, train, serve, probes)
        return out
    return diagnose


def _swapped_garbled(out, train, serve, probes):
    for text in probes:
        try:
            shown = train.decode(serve.encode(text))
        except ValueError:      # an id the training tokenizer does not have: this pair cannot show it
            return out["garbled"]
        if shown != text:
            return shown
    return None


def _by_vocab(out, train, serve, probes):
    return "same" if train.vocab_size == serve.vocab_size else "mismatch"


def _bpe(order=1, first_only=False):
    def bpe_encode(text, merges):
        return ch01._encode(text, [tuple(m) for m in merges], order, first_only=first_only)
    return bpe_encode


# chapter 2's
def _parse_with(lengths="<i4", pointers_at=lambda n: 34 + 4 * n, documents_at=lambda n: 34 + 12 * n, magic=True):
    def parse(raw):
        if magic == "assert":                       # issue #29: refused, but not with the ValueError asked for
            assert raw[:9] == b"MMIDIDX\x00\x00", "bad magic"
        elif magic and raw[:9] != b"MMIDIDX\x00\x00":
            raise ValueError("bad magic")
        version, code, n, d = struct.unpack("<QBQQ", raw[9:34])
        size = np.dtype(lengths).itemsize
        return {"version": version, "dtype_code": code, "num_sequences": n, "num_document_indices": d,
                "sequence_lengths": np.frombuffer(raw, lengths, n, 34) if 34 + size * n <= len(raw) else [],
                "sequence_pointers": np.frombuffer(raw, "<i8", n, pointers_at(n)),
                "document_indices": np.frombuffer(raw, "<i8", d, documents_at(n))}
    return parse


_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


def _tokens_with(pick=lambda d, k: range(int(d[k]), int(d[k + 1])), dtype=None, empty_raises=False):
    def document_tokens(raw_idx, raw_bin, k):
        idx = parse_idx(raw_idx)
        d = idx["document_indices"]
        dt = np.dtype(dtype or _CODES[int(idx["dtype_code"])]).newbyteorder("<")
        parts = [np.frombuffer(raw_bin, dt, int(idx["sequence_lengths"][s]), int(idx["sequence_pointers"][s]))
                 for s in pick(d, k) if s < idx["num_sequences"]]
        if empty_raises:
            return np.concatenate(parts)
        return np.concatenate(parts) if parts else np.zeros(0, dt)
    return document_tokens


def document_tokens(raw_idx, raw_bin, k):
    return _tokens_with()(raw_idx, raw_bin, k)


# ------------------------------------------------------------------------------------------
#: chapter 0: each rule (question, name) of ch00.RULES → (the wrong answer planted for it, mistake name, a phrase
#: of the symptom — the smallest input where one is shrunk to)
CH00_PLANTED = {(q, n): (wrong, n, symptom) for q, wrong, n, symptom in [
    ("q1", _dp_with(raise_if=lambda d, n, t, p: False), "accepts_indivisible",
     "data_parallel_size(devices=1, num_nodes=1, tp=1, pp=2) returned 0, but 1 GPU cannot"),
    ("q1", _dp_with(raise_if=lambda d, n, t, p: (d * n) % (t * p) or t > d, warn=lambda *a: 0),
     "refuses_tp_across_nodes", "data_parallel_size(devices=1, num_nodes=2, tp=2, pp=1) raised ValueError('no')"),
    ("q1", _dp_with(raise_if=lambda d, n, t, p: d % (t * p)), "raises_legal_layout",
     "data_parallel_size(devices=1, num_nodes=2, tp=1, pp=2) raised ValueError('no'), but tp × pp = 2 divides"),
    ("q1", _dp_with(value=lambda d, n, t, p: d * n / (t * p)), "float_division",
     "data_parallel_size(devices=1, num_nodes=1, tp=1, pp=1) returned 1.0, a float"),
    ("q1", _dp_with(value=lambda d, n, t, p: d // (t * p)), "one_node_only",
     "num_nodes=2, tp=1, pp=1) returned 1: 1 replica × tp × pp = 1 GPU, but the job has 2"),
    ("q1", _dp_with(value=lambda d, n, t, p: d * n // t), "divides_by_tp_only",
     "returned 2: 2 replicas × tp × pp = 4 GPUs, but the job has 2"),
    ("q1", _dp_with(warn=lambda *a: 0), "never_warns",
     "data_parallel_size(devices=1, num_nodes=2, tp=2, pp=1) returned 1 without a warning"),
    ("q1", _dp_with(warn=lambda d, n, t, p: 2 * (t > d)), "warns_more_than_once", "warned 2 times"),
    ("q1", _dp_with(warn=lambda d, n, t, p: int(t >= d)), "warns_inside_a_node",
     "data_parallel_size(devices=1, num_nodes=1, tp=1, pp=1) warned ('slow'), but its TP group of 1 GPU fits"),
    ("q2", lambda n, m, dp=1: training_memory_gb(n, m, dp) * 1e9, "bytes_not_gb",
     "memory_gb(1e9, 'bf16_weights', dp=1) returned 2e9"),
    ("q2", lambda n, m, dp=1: training_memory_gb(n, m, dp) * 1e9 / 2 ** 30, "gib_not_gb", "returned 1.86265"),
    ("q2", _memory_with(_per_param(adam=16, distopt=lambda dp: 16)), "zero_16_bytes",
     "memory_gb(1e9, 'megatron_adam', dp=1) returned 16: 16 bytes per parameter"),
    ("q2", _memory_with(_per_param(distopt=lambda dp: 18)), "no_sharding",
     "memory_gb(1e9, 'megatron_distopt', dp=4) returned 18"),
    ("q2", _memory_with(_per_param(distopt=lambda dp: 18 / dp)), "shards_everything",
     "memory_gb(1e9, 'megatron_distopt', dp=4) returned 4.5"),
    ("q2", _memory_with(_per_param(adam=12, distopt=lambda dp: 12)), "bytes_per_param", "12 bytes per parameter"),
    ("q3", lambda r, tp, pp, dp: [r // tp * tp + t for t in range(tp)], "tensor_parallel_group",
     "data_parallel_group(rank=0, tp=2, pp=2, dp=2) returned [0, 1]: GPU 0 = (tp 0, dp 0, pp 0); GPU 1 = (tp 1"),
    ("q3", lambda r, tp, pp, dp: [r % (tp * dp) + tp * dp * p for p in range(pp)], "pipeline_group",
     "returned [0, 4]: GPU 0 = (tp 0, dp 0, pp 0); GPU 4 = (tp 0, dp 0, pp 1)"),
    ("q3", lambda r, tp, pp, dp: [d + dp * (r // dp % tp) + dp * tp * (r // (dp * tp)) for d in range(dp)],
     "dp_varies_fastest", "returned [0, 1, 2]: GPU 0 = (tp 0, dp 0, pp 0); GPU 1 = (tp 1, dp 0, pp 0)"),
]}
CH00_RULED = [(q, n) for q, rules in ch00.RULES.items() for n in rules]

#: (check, wrong answer, mistake name, a phrase of the symptom — the smallest input where one is shrunk to)
NAMED = [(getattr(ch00, q), *CH00_PLANTED[(q, n)]) for q, n in CH00_RULED if (q, n) in CH00_PLANTED]

#: chapters 1 and 2: one planted wrong answer per rule of ch01.RULES and ch02.RULES, by (chapter, question, rule
#: name): (the wrong answer, a phrase of its symptom — on the smallest input where one is shrunk to)
PLANTED = {
    ("ch01", "q1", "tie_not_first"): (_merge_step_last_tie, "merge_step([1, 2, 3], 256) merged (2, 3)"),
    ("ch01", "q1", "modifies_input"): (_merge_step_with(mutate=True), "the caller's list is [-1]"),
    ("ch01", "q1", "overlaps_not_counted"): (
        _merge_step_with(count_overlaps=False),
        "merge_step([1, 2, 7, 7, 7], 256) merged (1, 2), which occurs once among the adjacent pairs"),
    ("ch01", "q1", "keeps_second_token"): (_merge_step_with(step_after_match=1),
                                           "merge_step([1, 2], 256) returned ids [256, 2]: 2 tokens in, 2 out"),
    ("ch01", "q1", "replaces_once"): (_merge_step_with(max_replacements=1),
                                      "merge_step([1, 2, 1, 2], 256) returned ids [256, 1, 2]"),
    ("ch01", "q2", "per_utf8_byte"): (
        lambda tok, texts: sum(len(tok.encode(t)) for t in texts) / sum(len(t.encode()) for t in texts),
        "tokens_per_character(tok, ['한국어']) returned"),
    ("ch01", "q2", "mean_of_ratios"): (lambda tok, texts: float(np.mean([len(tok.encode(t)) / len(t) for t in texts])),
                                       "tokens_per_character(tok, ['a', 'hello world, hello'])"),
    ("ch01", "q2", "characters_per_token"): (lambda tok, texts: 1 / tokens_per_character(tok, texts),
                                             "tokens_per_character(tok, ['hello world']) returned"),
    ("ch01", "q3", "agreement_is_a_count"): (
        _diagnose_with(id_agreement=lambda o, a, b, p: o["id_agreement"] * len(p)), "probe texts"),
    ("ch01", "q3", "names_not_sorted"): (
        _diagnose_with(special_ids_differ=lambda o, a, b, p: o["special_ids_differ"][::-1]), "special_ids_differ = ["),
    ("ch01", "q3", "decoded_the_other_way"): (_diagnose_with(garbled=_swapped_garbled), "garbled = "),
    ("ch01", "q3", "verdict_not_from_fingerprint"): (
        _diagnose_with(verdict=_by_vocab, same_fingerprint=lambda o, a, b, p: a.vocab_size == b.vocab_size),
        "verdict = 'same', but the two .model files differ"),
    ("ch01", "q3", "copy_called_a_mismatch"): (
        _diagnose_with(verdict=lambda o, a, b, p: "same" if a.path == b.path else "mismatch",
                       same_fingerprint=lambda o, a, b, p: a.path == b.path),
        "the same file copied elsewhere: verdict = 'mismatch', but both tokenizers are the same"),
    ("ch01", "q5", "ids_from_257"): (lambda text, merges: ch01._encode(text, merges, first_id=257),
                                     "bpe_encode('aa', [(97, 97)]) returned [257]; bytes are the ids 0 … 255"),
    ("ch01", "q5", "no_merge_applied"): (lambda text, merges: list(text.encode("utf-8")),
                                         "bpe_encode('aa', [(97, 97)]) returned [97, 97]"),
    ("ch01", "q5", "code_points"): (lambda text, merges: [ord(c) for c in text],
                                    "bpe_encode('é', []) returned [233]; the UTF-8 bytes of 'é' are [195, 169]"),
    ("ch01", "q5", "merges_in_reverse"): (_bpe(order=-1),
                                          "bpe_encode('hi! hi', [(104, 105), (256, 33)]) returned [256, 33, 32, 256]"),
    ("ch01", "q5", "first_occurrence_only"): (_bpe(first_only=True),
                                              "bpe_encode('abab', [(97, 98)]) returned [256, 97, 98]"),
    ("ch02", "q1", "lengths_as_int64"): (_parse_with(lengths="<i8"),
                                         "the golden vector (3 uint16 sequences, 102-byte .idx): sequence_lengths = "),
    ("ch02", "q1", "pointers_after_8n"): (
        _parse_with(pointers_at=lambda n: 34 + 8 * n),
        "the golden vector (3 uint16 sequences, 102-byte .idx): sequence_pointers = "),
    ("ch02", "q1", "documents_offset"): (_parse_with(documents_at=lambda n: 34 + 8 * n),
                                         "the golden vector (3 uint16 sequences, 102-byte .idx): document_indices = "),
    ("ch02", "q1", "accepts_bad_magic"): (_parse_with(magic=False), "parse_idx accepted the golden vector"),
    ("ch02", "q1", "bad_magic_not_valueerror"): (_parse_with(magic="assert"), "by raising AssertionError"),
    ("ch02", "q2", "tokens_not_bytes"): (lambda lengths, d, itemsize, k: int(np.sum(lengths[:d[k]])),
                                         "document_byte_offset([5, 2], [0, 1, 2], itemsize=2, k=1) returned 5"),
    ("ch02", "q2", "sequence_k"): (
        lambda lengths, d, itemsize, k: int(np.sum(lengths[:k])) * itemsize,
        "document_byte_offset([3, 2, 4], [0, 2, 3], itemsize=2, k=1) returned 6; document 1 holds sequence 2"),
    ("ch02", "q2", "one_sequence_too_many"): (
        lambda lengths, d, itemsize, k: int(np.sum(lengths[:d[k] + 1])) * itemsize,
        "document_byte_offset([5, 2], [0, 1, 2], itemsize=2, k=1) returned 14"),
    ("ch02", "q3", "padding_is_packing"): (
        lambda: {**GOOD_Q3_CH02, "problems": {"cpu": "tokenize_once", "padding": "packing", "memory": "mmap"}},
        "include 'padding'"),
    ("ch02", "q3", "solutions_swapped"): (     # issue #29: a swapped mapping got the padding hint
        lambda: {**GOOD_Q3_CH02,
                 "problems": {"cpu": "idx_pointers", "random_access": "tokenize_once", "memory": "mmap"}},
        "'cpu' → 'idx_pointers' and 'random_access' → 'tokenize_once' do not go together"),
    ("ch02", "q4", "first_sequence_only"): (
        _tokens_with(pick=lambda d, k: range(int(d[k]), int(d[k + 1]))[:1]),
        "document_tokens(<the hand-made x.idx, x.bin>, k=0) returned [1, 2, 3], expected [1, 2, 3, 4, 5]"),
    ("ch02", "q4", "sequence_k"): (
        _tokens_with(pick=lambda d, k: range(int(d[k]), int(d[k + 1])) if d[k + 1] - d[k] > 1 else [k]),
        "document_tokens(<the hand-made x.idx, x.bin>, k=1) returned [4, 5], expected []; document 1 holds no "
        "sequence"),
    ("ch02", "q4", "wrong_dtype"): (_tokens_with(dtype=np.uint16),
                                    "document_tokens(<a small int32 file>, k=0) returned"),
    ("ch02", "q4", "empty_document"): (_tokens_with(empty_raises=True),
                                       "document_tokens(<the hand-made x.idx, x.bin>, k=1) raised ValueError"),
    ("ch02", "q5", "ignores_tp"): (lambda v, d, t: -(-v // d) * d,
                                   "padded_vocab_size(5, divisible_by=2, tensor_parallel=2) returned 6, expected 8"),
    ("ch02", "q5", "always_adds"): (lambda v, d, t: (v // (d * t) + 1) * d * t,
                                    "padded_vocab_size(8, divisible_by=4, tensor_parallel=1) returned 12, expected 8: "
                                    "8 is already a multiple of 4"),
    ("ch02", "q5", "rounds_down"): (lambda v, d, t: v // (d * t) * d * t,
                                    "padded_vocab_size(5, divisible_by=4, tensor_parallel=1) returned 4, expected 8"),
    ("ch02", "q5", "adds_multiple_not_rounds"): (
        lambda v, d, t: v + d * t, "padded_vocab_size(5, divisible_by=4, tensor_parallel=1) returned 9, expected 8"),
}
#: every (module, question, rule name) of the rule tables of chapters 1 and 2
RULED = [(m, q, name) for m in (ch01, ch02) for q, rules in m.RULES.items() for name in rules]

CORRECT = [(ch00.q1, dp_size), (ch00.q2, training_memory_gb), (ch00.q3, _dp_group), (ch00.q4, exercise_5),
           (ch01.q1, merge_step),
           (ch01.q2, tokens_per_character), (ch01.q3, compare_tokenizers),
           (ch01.q5, lambda text, merges: _bpe()(text, merges)), (ch02.q1, parse_idx), (ch02.q2, document_byte_offset),
           (ch02.q3, lambda: dict(GOOD_Q3_CH02)), (ch02.q4, document_tokens), (ch02.q5, padded_vocab_size)]


def _ids(rows):
    return [f"{r[0].chapter}-{r[0].question}-{r[2]}" for r in rows]


def _no_numpy_repr(text: str) -> None:
    assert "np." not in text and "array(" not in text and "int64(" not in text and "float64(" not in text, text


@pytest.mark.parametrize("check, wrong, name, symptom", NAMED, ids=_ids(NAMED))
def test_named_mistake_tiers(check, wrong, name, symptom, capsys):
    first, second, third = check(wrong), check(wrong), check(wrong)
    for n, result in enumerate((first, second, third), 1):
        assert (result.status, result.mistake, result.tier) == ("failed", name, n), result.message
        assert result.message == first.message                 # the symptom, every time
        _no_numpy_repr(result.message)
    assert symptom in first.message, first.message              # on the smallest input that shows it
    ask, fix, formula = first.hint, second.hint, third.hint
    assert ask.endswith("?"), ask                               # tier 1 asks a question ...
    assert len({ask, fix, formula}) == 3
    assert fix not in first.message and fix not in ask          # ... and does not give the fix
    assert formula not in first.message and formula not in ask and formula not in fix
    out = capsys.readouterr().out
    assert f"hint: {ask}" in out and f"hint: {fix}" in out and f"hint: {formula}" in out
    assert out.index(ask) < out.index(fix) < out.index(formula)


def test_every_named_mistake_of_ch00_02_is_tested():
    """Each mistake(...) name in chapter 0's check module appears in NAMED (no untested message); chapters 1 and 2
    name theirs in rule tables, covered by test_every_rule_of_ch01_02_has_a_planted_answer."""
    import re

    names = set()
    for module in (ch00,):
        source = Path(module.__file__).read_text(encoding="utf-8")
        names |= {(module.CHAPTER, n) for n in re.findall(r'mistake\("([a-z_0-9]+)"', source)}
        names |= {(module.CHAPTER, n) for n in re.findall(r'return "([a-z_0-9]+)"', source)
                  if n not in {"not_an_int", "not_a_list", "not_a_tuple", "not_a_float", "not_a_number", "bad_pair",
                               "bad_ids", "not_an_array", "wrong_size", "wrong_value", "wrong_group", "wrong_pair",
                               "wrong_ids", "wrong_ratio", "wrong_offset", "wrong_tokens", "documents_after_8n",
                               "documents_after_16n"}}
    tested = {(c.chapter, n) for c, _, n, _ in NAMED}
    assert names <= tested, sorted(names - tested)


@pytest.mark.parametrize("module, question, name", RULED, ids=[f"{m.CHAPTER}-{q}-{n}" for m, q, n in RULED])
def test_every_rule_of_ch01_02_shows_its_tiers(module, question, name, capsys):
    """The planted wrong answer of each rule: tier 1 is the symptom (on the smallest input that shows it) and
    the rule's question, a repeat its fix, a third time its formula — the texts of the rule's table row."""
    wrong, symptom = PLANTED[(module.CHAPTER, question, name)]
    rule, check = module.RULES[question][name], getattr(module, question)
    runs = [check(wrong) for _ in range(3)]
    for n, result in enumerate(runs, 1):
        assert (result.status, result.mistake, result.tier) == ("failed", name, n), result.message
        assert result.message == runs[0].message                  # the symptom, every time
        _no_numpy_repr(result.message)
    assert symptom in runs[0].message, runs[0].message
    ask, fix, formula = (r.hint for r in runs)
    for shown, template in ((ask, rule.ask), (fix, rule.fix), (formula, rule.formula or rule.fix)):
        assert shown == template or "{" in template, (shown, template)   # a template without facts: verbatim
    assert ask.endswith("?") and fix not in runs[0].message and fix not in ask
    assert not rule.formula or (formula not in runs[0].message and formula not in ask and formula not in fix)
    out = capsys.readouterr().out
    assert f"hint: {ask}" in out and f"hint: {fix}" in out and out.index(ask) < out.index(fix) < out.rindex(formula)


def test_every_rule_of_ch01_02_has_a_planted_answer():
    """No rule of ch01.RULES or ch02.RULES goes untested, and no planted answer names a rule that does not exist."""
    assert set(PLANTED) == {(m.CHAPTER, q, name) for m, q, name in RULED}
    assert {m.CHAPTER for m, _, _ in RULED} == {"ch01", "ch02"} and len(RULED) == 36   # 3 more: issue #29; 4: ch02 q5


def test_every_rule_of_ch00_has_a_planted_answer_and_every_planted_answer_a_rule():
    """The ch00 part of NAMED is ch00.RULES: one planted wrong answer per rule, none for a name it lacks."""
    assert set(CH00_PLANTED) == set(CH00_RULED), (sorted(set(CH00_RULED) - set(CH00_PLANTED)),
                                                  sorted(set(CH00_PLANTED) - set(CH00_RULED)))
    assert {c.question for c, _, _, _ in NAMED if c.chapter == "ch00"} == {"q1", "q2", "q3"}


@pytest.mark.parametrize("check, right", CORRECT, ids=[f"{c.chapter}-{c.question}" for c, _ in CORRECT])
def test_correct_answers_pass_with_plain_messages(check, right, capsys):
    result = check(right)
    assert result.passed and result.mistake == "" and result.tier == 0, result.message
    _no_numpy_repr(result.message)
    capsys.readouterr()


@pytest.mark.parametrize("check, wrong", [
    (ch00.q1, lambda d, n, t, p: np.int64(7)), (ch00.q2, lambda n, m, dp=1: np.float32(1.5)),
    (ch00.q3, lambda r, tp, pp, dp: [np.int64(r), np.int64(r + 99)]),
    (ch02.q2, lambda lengths, d, itemsize, k: np.int64(3)),
    (ch02.q4, lambda raw_idx, raw_bin, k: np.array([9, 9], dtype=np.int64)),
    (ch02.q5, lambda vocab_size, divisible_by, tensor_parallel: np.int64(3)),
    (ch02.q5, lambda vocab_size, divisible_by, tensor_parallel: np.float64(8)),
], ids=["ch00-q1", "ch00-q2", "ch00-q3", "ch02-q2", "ch02-q4", "ch02-q5", "ch02-q5-float"])
def test_numpy_results_print_as_plain_numbers(check, wrong, capsys):
    result = check(wrong)
    assert result.status == "failed"
    _no_numpy_repr(result.message)
    capsys.readouterr()


# ------------------------------------------------------------------------------------------
def _question(notebook: str, heading: str) -> str:
    path = ROOT / "solutions" / notebook
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and text.startswith(heading):
            return text
    raise AssertionError(f"{notebook}: no markdown cell starts with {heading!r}")


@pytest.mark.parametrize("check, right, notebook, heading, count", [
    (ch01.q1, merge_step, "01_tokenization.ipynb", "### Exercise 1", "60 random sequences"),
    (ch00.q1, dp_size, "00_orientation.ipynb", "### Exercise 1", "30 valid random layouts"),
    (ch00.q3, _dp_group, "00_orientation.ipynb", "### Exercise 3", "40 random layouts"),
    (ch01.q5, lambda text, merges: _bpe()(text, merges), "01_tokenization.ipynb", "### Exercise 5", "20 unseen texts"),
    (ch02.q1, parse_idx, "02_binary_indexing.ipynb", "### Exercise 1", "12 random"),
    (ch02.q2, document_byte_offset, "02_binary_indexing.ipynb", "### Exercise 2", "3 hand-made cases"),
    (ch02.q5, padded_vocab_size, "02_binary_indexing.ipynb", "### Exercise 5", "27 edge cases"),
], ids=["ch01-q1", "ch00-q1", "ch00-q3", "ch01-q5", "ch02-q1", "ch02-q2", "ch02-q5"])
def test_the_count_a_check_states_is_the_count_its_question_states(check, right, notebook, heading, count, capsys):
    result = check(right)
    assert result.passed and count in result.message, result.message
    assert count in _question(notebook, heading)
    capsys.readouterr()


def test_ch01_q4_question_asks_for_what_the_check_requires():
    """'guard' (fail fast when the fingerprints differ) is a required fix: the question says such fixes count."""
    text = _question("01_tokenization.ipynb", "### Exercise 4")
    assert "fail" in text and "removes the cause" in text
    result = ch01.q4(lambda: {"cause": "b", "checks": ["fingerprint", "special_ids", "vocab_size", "roundtrip"],
                              "fixes": ["ship_model", "reprocess"], "explanation": "word " * 20})
    assert not result.passed and "1 fix(es) missing" in result.message


@pytest.mark.parametrize("notebook, heading, needed", [
    ("00_orientation.ipynb", "### Exercise 1", ["ValueError", "warnings.warn", "data_parallel_size(devices=8"]),
    ("00_orientation.ipynb", "### Exercise 2", ["decimal GB", "memory_gb(8e9"]),
    ("00_orientation.ipynb", "### Exercise 3", ["data_parallel_group(1, tp=2, pp=1, dp=2)", "[1, 3]"]),
    ("00_orientation.ipynb", "### Exercise 4", ["exercise_5()", '"choice"', '"reasons"', '"why"', "check.REASONS",
                                                '"nemo"', '"hf"', '"either"']),
    ("01_tokenization.ipynb", "### Exercise 1", ["merge_step([", "(new_ids, pair)"]),
    ("01_tokenization.ipynb", "### Exercise 2", ["tokens_per_character(", "float"]),
    ("01_tokenization.ipynb", "### Exercise 3", ["a float in [0, 1]", "dict"]),
    ("01_tokenization.ipynb", "### Exercise 5", ["[257, 32, 256]"]),
    ("02_binary_indexing.ipynb", "### Exercise 1", ["[5, 2, 7]", "ValueError"]),
    ("02_binary_indexing.ipynb", "### Exercise 2", ["document_byte_offset([3, 2, 4], [0, 2, 3], 2, 1)"]),
    ("02_binary_indexing.ipynb", "### Exercise 4", ["document_tokens(raw_idx_x, raw_bin_x, 0)"]),
    ("02_binary_indexing.ipynb", "### Exercise 5", ["padded_vocab_size(50_257, 128, 8)", "`51_200`", "an int"]),
], ids=lambda v: v if isinstance(v, str) and v.startswith("#") else None)
def test_each_question_states_its_format_and_an_example_call(notebook, heading, needed):
    text = _question(notebook, heading)
    missing = [n for n in needed if n not in text]
    assert not missing, (notebook, heading, missing)


def test_a_small_input_the_answer_cannot_handle_is_skipped_when_shrinking(capsys):
    """Shrinking calls the learner's function on small inputs; one that raises there is skipped, not reported."""
    one_node = _dp_with(value=lambda d, n, t, p: d // (t * p))

    def fragile(devices, num_nodes, tp, pp):
        if (devices, num_nodes) == (1, 2):
            raise ZeroDivisionError("only on this layout")
        return one_node(devices, num_nodes, tp, pp)

    result = ch00.q1(fragile)
    assert result.mistake == "one_node_only" and "ZeroDivisionError" not in result.message, result.message
    assert "num_nodes=2" not in result.message
    capsys.readouterr()
