"""Checks for chapter 1 (tokenization): a BPE merge step, tokens per character, diagnosing a
tokenizer mismatch, and book exercise 4 (tokenizer consistency).

Every check draws fresh random inputs (sequences, corpus snippets, freshly trained tokenizers)
and compares the learner's function with the ``labsupport`` reference:
:func:`labsupport.datasets.bpe.merge_step`, :func:`labsupport.datasets.tokenizer.tokens_per_character` and
:func:`labsupport.datasets.tokenizer.compare_tokenizers`.
"""
from __future__ import annotations

import functools
import math
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from labsupport.datasets.bpe import ByteBPE, merge_step as _merge_step
from labsupport.paths import DOMAINS, data_file
from labsupport.datasets.tokenizer import (Tokenizer, compare_tokenizers, read_documents, train_sentencepiece_bytes,
                         tokens_per_character as _tokens_per_character, workbook_tokenizer)
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, Sealed, short

CHAPTER = "ch01"

#: Book exercise 4: the options the learner chooses from (shown in the solutions notebook).
EXERCISE_4_CAUSES = {
    "a": "the learning rate was too high, so fine-tuning diverged",
    "b": "the serving stack loads a different tokenizer than the one that preprocessed the training data "
         "(another .model file, or the same vocabulary with different special-token ids)",
    "c": "the deployment GPU rounds bf16 differently from the training GPU",
    "d": "the data blend over-sampled a small dataset",
}
EXERCISE_4_CHECKS = {
    "fingerprint": "compare the serving tokenizer's fingerprint (sha256 of the .model) with the one recorded "
                   "beside the preprocessed data / checkpoint",
    "special_ids": "compare bos / eos / eod / pad ids between preprocessing, training and serving",
    "vocab_size": "compare the serving tokenizer's vocabulary size with the model's embedding rows",
    "roundtrip": "decode a sample of training token ids (.bin) with the serving tokenizer and read it; "
                 "encode one text with both tokenizers and compare the ids",
    "loss_curve": "re-inspect the training loss curve",
    "gpu_util": "check GPU utilisation while serving",
    "batch_size": "lower the serving batch size",
}
EXERCISE_4_FIXES = {
    "ship_model": "ship the exact tokenizer .model with the checkpoint and load it from there",
    "guard": "record the tokenizer fingerprint at preprocessing and assert it when training and serving start",
    "reprocess": "if the tokenizer must change, re-preprocess the data and fine-tune again with the new tokenizer",
    "more_epochs": "fine-tune for more epochs",
    "temperature": "lower the sampling temperature",
    "bigger_vocab": "switch serving to a tokenizer with a bigger vocabulary",
}
#: q4's answer keys, sealed (see _core.Sealed).
_CAUSE = Sealed("labsupport:ch01:q4:cause", [
    "7c2b5328d42fceaa6f77a5e7f9055bfbbd7dc0070ea91849b4fc70421de986c1",
])
#: q4: the useful checks.
_CHECKS = Sealed("labsupport:ch01:q4:checks", [
    "4587707d7f2484851e70f040e69353e432879ce1acec7b56184efefc9e47a075",
    "6785443cd69c16185cbff6f0e2274b19d30f6a4ac469d1321e1180bad344d947",
    "ce352d11a2348c8742f77076dd13b046a6dca93e2b227ed37ef6c62bab85fbd4",
    "ceeff5e5cde0dda090298e1ad82c7cda522eeef5dc0b3618580db635d47c9540",
])
#: q4: the fixes that remove the cause.
_FIXES = Sealed("labsupport:ch01:q4:fixes", [
    "0754a340b4e0aaa46e9a083b19709f8bcd8f63f9692504ae2635bd5a8bb26937",
    "0cbfaebdcd1c638d392274ff4b2a77fdc253ae1f1193f580a4220b11f42a4e8d",
    "30d6910685edb322accf8839e7eced1510f5cfadbdedcfe38df1c3eab016f340",
])


summary = chapter_summary(CHAPTER)


@functools.lru_cache(maxsize=1)
def _corpus() -> dict[str, list[str]]:
    return {d: read_documents(data_file(d)) for d in DOMAINS}


def _snippet(rng: random.Random, domain: str, lo: int = 40, hi: int = 1500) -> str:
    doc = rng.choice(_corpus()[domain])
    n = rng.randint(lo, hi)
    start = rng.randint(0, max(0, len(doc) - n))
    return doc[start:start + n]


def _random_text(rng: random.Random) -> str:
    pools = [lambda: rng.choice(" \t\n"), lambda: chr(rng.randint(0x21, 0x7E)),
             lambda: chr(rng.randint(0xAC00, 0xD7A3)), lambda: chr(rng.randint(0x1F600, 0x1F64F))]
    return "".join(rng.choice(pools)() for _ in range(rng.randint(1, 80)))


# ---------------------------------------------------------------------------------------------
def _q1_mistake(before: list[int], got_pair: Any, want_pair: Any) -> str:
    """Name a tie broken the wrong way: the learner's pair occurs exactly as often as the right one."""
    if got_pair is None or want_pair is None or got_pair == want_pair:
        return ""
    counts = Counter(zip(before, before[1:]))
    if got_pair in counts and counts[got_pair] == counts[want_pair]:
        return (f" — both occur {counts[want_pair]} times: on a tie the pair that occurs FIRST wins "
                "(a dict keeps insertion order, max keeps the first of equal counts)")
    return ""


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the recipe
    "reread chapter 1's 'Byte-level BPE from scratch' (§6.2.1): one training step counts the adjacent pairs, "
    "picks one and replaces it; the exercise text fixes what counts as a pair, which pair wins a tie and how the "
    "replacing scans",
    "count every adjacent position i (ids[i], ids[i+1]) — overlapping ones too, so [7, 7, 7] has (7, 7) twice; on "
    "equal counts the pair that occurs first wins; then build a NEW list, scanning left to right and replacing "
    "each occurrence that does not overlap the previous replacement",
    "count adjacent pairs (overlaps count), take the most frequent (ties: the pair "
    "seen first), then scan left to right replacing each non-overlapping occurrence by new_id; return "
    "(new_ids, pair), or (list(ids), None) when there are fewer than two tokens. Do not modify the input."))
def q1(merge_step) -> str:
    rng = random.Random(check_seed())
    cases = 0
    for k in range(60):
        if k < 4:
            ids = [rng.randint(0, 255) for _ in range(k % 2)]  # empty and single-token inputs
        elif k < 30:
            ids = [rng.randint(0, 3) for _ in range(rng.randint(2, 40))]  # many ties and overlaps
        else:
            text = _random_text(rng)
            ids = list(text.encode("utf-8")) + [rng.randint(256, 300) for _ in range(rng.randint(0, 5))]
            if rng.random() < 0.2:
                rng.shuffle(ids)
        new_id = rng.randint(256, 5000)
        before = list(ids)
        got = merge_step(ids, new_id)
        want_ids, want_pair = _merge_step(before, new_id)
        call = f"merge_step({short(before, 80)}, {new_id})"
        expect(ids == before, f"{call} modified its input list; build a new list instead")
        expect(isinstance(got, tuple) and len(got) == 2, f"{call} returned {short(got)}; expected a (new_ids, pair) tuple")
        got_ids, got_pair = got
        expect(got_pair is None or (isinstance(got_pair, (tuple, list)) and len(got_pair) == 2),
               f"{call} returned pair {short(got_pair)}; expected a (left, right) tuple or None")
        expect(hasattr(got_ids, "__iter__") and not isinstance(got_ids, (str, bytes)),
               f"{call} returned ids {short(got_ids)} ({type(got_ids).__name__}); expected a list of ints")
        got_pair = tuple(got_pair) if got_pair is not None else None
        expect(got_pair == want_pair, f"{call} merged pair {short(got_pair)}, expected {want_pair}"
               + _q1_mistake(before, got_pair, want_pair))
        got_ids = list(got_ids)
        expect(got_ids == want_ids, f"{call} returned ids {short(got_ids)}, expected {short(want_ids)}")
        cases += 1
    return f"{cases} random sequences"


# ---------------------------------------------------------------------------------------------
def _q2_mistake(got: float, tok: Tokenizer, texts: list[str]) -> str:
    """A known wrong ratio, named: per UTF-8 byte, the mean of per-text ratios, or characters per token."""
    lengths = [len(tok.encode(t)) for t in texts]
    nonempty = [(n, len(t)) for n, t in zip(lengths, texts) if t]
    candidates = (
        (sum(lengths) / sum(len(t.encode("utf-8")) for t in texts),
         "that is tokens per UTF-8 BYTE; divide by the characters (len of the str) instead"),
        (sum(n / c for n, c in nonempty) / len(nonempty),
         "that is the mean of the per-text ratios; divide the total tokens by the total characters"),
        (sum(len(t) for t in texts) / sum(lengths), "that is characters per token, upside down"),
    )
    for value, text in candidates:
        if math.isclose(got, value, rel_tol=1e-9):
            return " — " + text
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 1's 'SentencePiece: lossless, BPE vs unigram, four domains', which compared the domains: "
    "what is counted above the fraction bar, and what below it?",
    "one ratio of totals over the whole list, not a mean of per-text ratios: all tokens (each text encoded on its "
    "own with the tokenizer you are given) over all characters (code points: len of the str, not UTF-8 bytes)",
    "tokens per character = (sum over texts of len(tok.encode(text))) / (sum of len(text)); "
    "encode each text on its own, count characters (len of the str), not UTF-8 bytes; use the tokenizer "
    "you are given."))
def q2(tokens_per_character) -> str:
    rng = random.Random(check_seed())
    toks = [Tokenizer(workbook_tokenizer())]
    sample = [_snippet(rng, d, 200, 3000) for d in DOMAINS for _ in range(15)]
    proto = train_sentencepiece_bytes(sample, rng.choice([1500, 2000]), hard_vocab_limit=False)
    toks.append(Tokenizer.from_bytes(proto, "fresh_random.model"))
    cases = 0
    for tok in toks:
        for domain in DOMAINS:
            texts = [_snippet(rng, domain) for _ in range(rng.randint(3, 12))]
            if rng.random() < 0.3:
                texts.append(_random_text(rng))  # emoji and rare Hangul: byte fallback
            got = tokens_per_character(tok, list(texts))
            want = _tokens_per_character(tok, texts)
            expect(isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got),
                   f"tokens_per_character returned {short(got)}; expected a float")
            if abs(got - want) > 1e-9 * want:
                expect(False, f"{len(texts)} random {domain} snippets with {tok.path.name}: got {got:.6f}, "
                              f"expected {want:.6f}" + _q2_mistake(got, tok, texts))
            cases += 1
    return f"{cases} random domain samples with 2 tokenizers"


# ---------------------------------------------------------------------------------------------
_Q3_KEYS = ("same_fingerprint", "vocab_sizes", "special_ids_differ", "id_agreement", "garbled", "verdict")


def _q3_equal(key: str, got, want) -> bool:
    """One field of the learner's diagnosis against the reference (a malformed value is just wrong)."""
    try:
        if key == "id_agreement":
            return isinstance(got, (int, float)) and abs(got - want) <= 1e-9
        if key in ("vocab_sizes", "special_ids_differ"):  # a list or a tuple, in the reference's order
            return not isinstance(got, (str, bytes, set, frozenset, dict)) and list(got) == list(want)
        return bool(got == want)
    except (TypeError, ValueError):
        return False


def _q3_mistake(key: str, got: Any, want: Any, train: Tokenizer, serve: Tokenizer, probes: list[str]) -> str:
    """A known wrong field, named: a count for the fraction, unsorted names, or garbled decoded the other way."""
    try:
        if key == "id_agreement" and isinstance(got, (int, float)) and probes \
                and abs(got - want * len(probes)) <= 1e-9 and abs(want * len(probes) - want) > 1e-9:
            return f" (that is a count; divide by the {len(probes)} probe texts for a fraction)"
        if key == "special_ids_differ" and not isinstance(got, (str, bytes, dict)) and sorted(got) == list(want):
            return " (the right names: sort them)"
        if key == "garbled" and got is not None:
            for text in probes:
                swapped = train.decode(serve.encode(text))
                if swapped != text:
                    if got == swapped:
                        return (" (that is train_tok.decode(serve_tok.encode(t)): decode the TRAINING ids with the "
                                "SERVING tokenizer)")
                    break
    except Exception:  # noqa: BLE001 - a malformed field, or ids one tokenizer cannot decode: no named mistake
        return ""
    return ""


@check(CHAPTER, "q3", hint=(
    "reread chapter 1's 'The invariant: one tokenizer everywhere' (§6.2.4, §6.2.9): what identifies a tokenizer "
    "file exactly, and how does the damage show when the wrong one decodes training ids?",
    "the fingerprint alone decides the verdict; the other fields describe the damage: both vocabulary sizes, the "
    "special-token names whose ids differ, the share of probe texts both encode identically, and the first probe "
    "that does not survive 'encode with the training tokenizer, decode with the serving one'",
    "compare fingerprints (the decisive test), vocab sizes, the special ids "
    "(tok.special_ids(), sorted names whose ids differ), the FRACTION of probe texts encoded identically, and "
    "serve_tok.decode(train_tok.encode(t)): the first text that does not come back is 'garbled' (else None)."))
def q3(diagnose_tokenizer_mismatch) -> str:
    rng = random.Random(check_seed())
    english = [_snippet(rng, rng.choice(["web", "books", "code"]), 200, 3000) for _ in range(100)]
    other = [_snippet(rng, rng.choice(["web", "books", "code"]), 200, 3000) for _ in range(100)]
    vocab = rng.choice([800, 1000, 1200])
    with tempfile.TemporaryDirectory() as tmp:
        def tok(name, proto):
            path = Path(tmp) / name
            path.write_bytes(proto)
            return Tokenizer(path)

        a = tok("preprocess.model", train_sentencepiece_bytes(english, vocab))
        scenarios = {
            "the same file copied elsewhere": Tokenizer(shutil.copy(a.path, Path(tmp) / "serving_copy.model")),
            "other training data, same vocab size": tok("other_data.model", train_sentencepiece_bytes(other, vocab)),
            "same data, bos/eos swapped": tok("swapped.model", train_sentencepiece_bytes(english, vocab, bos_id=3, eos_id=2)),
            "same data, bigger vocab": tok("bigger.model", train_sentencepiece_bytes(english, vocab + 200)),
        }
        order = list(scenarios)
        rng.shuffle(order)
        for name in order:
            serve = scenarios[name]
            probes = [_snippet(rng, rng.choice(DOMAINS), 40, 400) for _ in range(rng.randint(3, 8))]
            want = compare_tokenizers(a, serve, probes)
            got = diagnose_tokenizer_mismatch(a, serve, list(probes))
            expect(isinstance(got, dict), f"{name}: returned {type(got).__name__}, expected a dict")
            missing = [k for k in _Q3_KEYS if k not in got]
            expect(not missing, f"{name}: missing key(s) {missing}")
            wrong = [f"{key} = {short(got[key], 90)}, expected {short(want[key], 90)}"
                     + _q3_mistake(key, got[key], want[key], a, serve, probes)
                     for key in _Q3_KEYS if not _q3_equal(key, got[key], want[key])]
            expect(not wrong, f"{name}: " + "; ".join(wrong))       # every wrong field at once
    return f"{len(scenarios)} freshly trained tokenizer pairs"


# ---------------------------------------------------------------------------------------------
@check(CHAPTER, "q4", hint=(
    "training went fine and only the served output is broken text: what differs between training and serving? "
    "(chapter 1, 'The invariant: one tokenizer everywhere')",
    "suspect the tokenizer the serving stack loads (book §6.2.4 pitfall, §6.2.9): ids only mean something with "
    "the tokenizer that wrote them. A useful check looks at the two tokenizers themselves, not at training, "
    "hardware or batch sizes; a fix removes the cause rather than the symptom.",
    "Training was fine and the output is broken text: suspect the tokenizer the "
    "serving stack loads (book §6.2.4 pitfall, §6.2.9). Checks compare the tokenizers themselves; fixes "
    "make the same .model travel with the model and fail fast when it does not."))
def q4(exercise_4) -> tuple[str, dict[str, str]]:
    answer = exercise_4()
    expect(isinstance(answer, dict), f"exercise_4() must return a dict, got {type(answer).__name__}")
    for key in ("cause", "checks", "fixes", "explanation"):
        expect(key in answer, f"missing key {key!r}")
    expect(isinstance(answer["cause"], str) and answer["cause"] in EXERCISE_4_CAUSES,
           f"cause = {short(answer['cause'])}; answer one of {sorted(EXERCISE_4_CAUSES)}")
    for key, options in (("checks", EXERCISE_4_CHECKS), ("fixes", EXERCISE_4_FIXES)):
        value = answer[key]
        expect(isinstance(value, (list, tuple, set)) and all(isinstance(v, str) for v in value),
               f"{key} must be a list of option keys, got {short(value)}")
        unknown = sorted(set(value) - set(options))
        expect(not unknown, f"{key}: unknown option(s) {unknown}; choose from {sorted(options)}")
    checks, fixes = set(answer["checks"]), set(answer["fixes"])
    text = answer["explanation"]
    with parts() as part:  # name every failing part at once
        part(answer["cause"] in _CAUSE, "cause: training was fine, so what differs between training and serving?")
        extra = sorted(c for c in checks if c not in _CHECKS)
        if part(not extra, f"checks: {extra} would not reveal a tokenizer problem"):
            part(len(checks) == len(_CHECKS), f"checks: {len(_CHECKS) - len(checks)} useful check(s) missing")
        extra = sorted(f for f in fixes if f not in _FIXES)
        if part(not extra, f"fixes: {extra} do not remove the cause"):
            part(len(fixes) == len(_FIXES), f"fixes: {len(_FIXES) - len(fixes)} fix(es) missing")
        part(isinstance(text, str) and len(text.split()) >= 15,
             "explanation: a few sentences (15+ words) in your own words")
    return ("cause, checks and fixes correct. Compare your explanation with this model answer: " + MODEL_ANSWER_Q4,
            {"explanation": text})


#: Shown once q4 passes, to compare the free-text explanation with.
MODEL_ANSWER_Q4 = (
    "The serving stack decodes with a different tokenizer (another .model, vocabulary or special ids) than the one "
    "that wrote the training data, so every id means another piece. Compare the fingerprint stored beside the data "
    "with the serving tokenizer's, and their vocabulary sizes and special ids; encode probe texts with both. Fix: "
    "ship the exact .model with the checkpoint and refuse to serve when the fingerprints differ.")


def _q5_mistake(got: list[int], want: list[int], text: str) -> str:
    """A known wrong encoding, named: no merge applied, code points instead of bytes, or the merge order."""
    if got == list(text.encode("utf-8")):
        return " — those are the UTF-8 bytes unchanged: apply the merges"
    if got == [ord(c) for c in text] and any(ord(c) > 127 for c in text):
        return " — those are code points (ord); start from text.encode('utf-8')"
    if len(got) == len(want):
        return " — same length: check the merge order"
    return ""


@check(CHAPTER, "q5", hint=(
    "reread how chapter 1's ByteBPE encodes unseen text with what training learned: where does encoding start, "
    "and in which order are the learned merges applied? (try the exercise's 'hi! hi' by hand)",
    "start from the UTF-8 bytes; merge k makes the id 256 + k. Apply the merges one after another in the order "
    "they were learned — a later merge may use a token an earlier one made — each over the whole sequence",
    "start from the UTF-8 bytes; merge k turns the pair merges[k] into id 256 + k. Apply the "
    "merges in the order they were learned (a later merge can use a token an earlier one made), each over the "
    "whole sequence, left to right without overlaps — your merge_step's replacing part does that."))
def q5(bpe_encode) -> str:
    """Checked: 20 random texts (corpus snippets, Korean, emoji, whitespace) encoded with the merges of ByteBPE
    models trained on *other* random snippets, against ByteBPE.encode; also a text no merge applies to."""
    rng = random.Random(check_seed())
    for i in range(20):
        model = ByteBPE.train(_snippet(rng, rng.choice(DOMAINS), 300, 2000), num_merges=rng.randint(10, 120))
        text = _snippet(rng, rng.choice(DOMAINS), 20, 400) if i % 2 else _random_text(rng)
        want = model.encode(text)
        got = bpe_encode(text, list(model.merges))
        expect(isinstance(got, list) and all(isinstance(x, int) for x in got),
               f"bpe_encode({short(text, 40)}, <{len(model.merges)} merges>) returned {short(got)}; expected a list of ints")
        expect(got == want, f"bpe_encode({short(text, 60)}, <{len(model.merges)} merges>) returned {short(got)}, "
               f"expected {short(want)}" + _q5_mistake(got, want, text))
    expect(bpe_encode("🙂", [(1, 2)]) == list("🙂".encode("utf-8")), "a text no merge applies to stays its bytes")
    return "20 unseen texts, models with 10–120 merges"
