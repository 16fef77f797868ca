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
from typing import Any, Callable

from labsupport.datasets.bpe import ByteBPE, merge_step as _merge_step
from labsupport.paths import DOMAINS, data_file
from labsupport.datasets.tokenizer import (Tokenizer, compare_tokenizers, read_documents, train_sentencepiece_bytes,
                         tokens_per_character as _tokens_per_character, workbook_tokenizer)
from labsupport.check._core import (chapter_summary, check, check_seed, expect, mistake,
                                    parts, RAISED, Sealed, short, try_call)

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
# q1: one BPE merge step
_Q1_FORMULA = ("counts = {}; for pair in zip(ids, ids[1:]): counts[pair] = counts.get(pair, 0) + 1; "
               "pair = max(counts, key=counts.get) (the first of equal counts); then scan i = 0, 1, …: "
               "at (ids[i], ids[i+1]) == pair append new_id and i += 2, else append ids[i] and i += 1")
#: hand-picked small inputs a failure is shrunk to, smallest first
_Q1_SMALL = [[], [5], [1, 2], [1, 2, 3], [7, 7, 7], [1, 2, 1, 2], [1, 2, 7, 7, 7], [7, 7, 7, 7],
             [3, 1, 2, 1, 2, 3], [1, 2, 3, 1, 2, 3, 3, 1]]


def _nonoverlapping_best(ids: list[int]) -> tuple[int, int] | None:
    """The pair a learner finds who counts only non-overlapping occurrences ([7, 7, 7] has (7, 7) once)."""
    counts: dict[tuple[int, int], int] = {}
    for pair in dict.fromkeys(zip(ids, ids[1:])):
        i = n = 0
        while i + 1 < len(ids):
            if (ids[i], ids[i + 1]) == pair:
                n, i = n + 1, i + 2
            else:
                i += 1
        counts[pair] = n
    return max(counts, key=counts.get) if counts else None


def _replace_keeping_second(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """The replacement of a learner who steps on by one token after a match ([7, 7, 7] → [N, N, 7])."""
    return [new_id if (a, b) == pair else a for a, b in zip(ids, ids[1:])] + ids[-1:]


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _q1_kind(before: list[int], after: list[int], got: Any, new_id: int) -> str | None:
    """What is wrong with ``merge_step(before, new_id)`` returning ``got`` (None: nothing)."""
    if after != before:
        return "modifies_input"
    if not (isinstance(got, tuple) and len(got) == 2):
        return "not_a_tuple"
    got_ids, got_pair = got
    if not (got_pair is None or (isinstance(got_pair, (tuple, list)) and len(got_pair) == 2)):
        return "bad_pair"
    if not hasattr(got_ids, "__iter__") or isinstance(got_ids, (str, bytes)):
        return "bad_ids"
    want_ids, want_pair = _merge_step(before, new_id)
    got_pair = tuple(got_pair) if got_pair is not None else None
    if got_pair != want_pair:
        counts = Counter(zip(before, before[1:]))
        if want_pair is not None and got_pair in counts and counts[got_pair] == counts[want_pair]:
            return "tie_not_first"
        if want_pair is not None and got_pair == _nonoverlapping_best(before):
            return "overlaps_not_counted"
        return "wrong_pair"
    got_ids = list(got_ids)
    if got_ids == want_ids:
        return None
    if want_pair is not None and got_ids == _replace_keeping_second(before, want_pair, new_id):
        return "keeps_second_token"
    if 0 < got_ids.count(new_id) < want_ids.count(new_id):
        return "replaces_once"
    return "wrong_ids"


def _q1_fail(fn: Callable, kind: str, before: list[int], got: Any, new_id: int) -> None:
    """Fail with ``kind`` shown on the smallest hand-picked input that shows it (else the random one)."""
    for small in _Q1_SMALL:
        ids = list(small)
        g = try_call(fn, ids, 256)
        if g is not RAISED and _q1_kind(small, ids, g, 256) == kind:
            before, got, new_id = list(small), g, 256
            break
    call = f"merge_step({short(before, 80)}, {new_id})"
    if kind == "modifies_input":
        after = list(before)
        try_call(fn, after, new_id)
        mistake(kind, symptom=f"after {call} the caller's list is {short(after, 80)}",
                ask="Is the list the caller passed in still the same after your call? Which line writes into it?",
                fix="build a new list (out = [] … out.append(…)); never assign into ids, pop or insert", formula=_Q1_FORMULA)
    expect(kind != "not_a_tuple", f"{call} returned {short(got)}; expected a (new_ids, pair) tuple")
    got_ids, got_pair = got
    expect(kind != "bad_pair", f"{call} returned pair {short(got_pair)}; expected a (left, right) tuple or None")
    expect(kind != "bad_ids", f"{call} returned ids {short(got_ids)} ({type(got_ids).__name__}); expected a list of ints")
    got_pair = tuple(got_pair) if got_pair is not None else None
    want_ids, want_pair = _merge_step(before, new_id)
    counts = Counter(zip(before, before[1:]))
    shown = counts if len(counts) <= 8 else {p: counts[p] for p in (want_pair, got_pair) if p in counts}
    seen = ", ".join(f"{a, b}: {n}" for (a, b), n in shown.items()) + ("" if len(counts) <= 8 else ", …")
    if kind == "tie_not_first":
        mistake(kind, symptom=f"{call} merged {short(got_pair)}; {short(got_pair)} and {want_pair} both occur "
                              f"{_times(counts[want_pair])}",
                ask="When two pairs are equally frequent, which one does the exercise say wins — and which one does "
                    "your code pick?",
                fix="on a tie the pair that occurs FIRST wins: count in a dict (it keeps insertion order) and take "
                    "max(counts, key=counts.get), which keeps the first of equal counts", formula=_Q1_FORMULA)
    if kind == "overlaps_not_counted":
        mistake(kind, symptom=f"{call} merged {short(got_pair)}; the adjacent positions hold {seen}",
                ask="How many adjacent positions of [7, 7, 7] hold (7, 7), and how many does your counting find?",
                fix="count every adjacent position i, overlaps included: for pair in zip(ids, ids[1:])",
                formula=_Q1_FORMULA)
    expect(kind != "wrong_pair", f"{call} merged pair {short(got_pair)}; the adjacent positions hold {seen or 'no pair'}")
    got_ids = list(got_ids)
    if kind == "keeps_second_token":
        mistake(kind, symptom=f"{call} returned ids {short(got_ids, 80)}: {len(before)} tokens in, {len(got_ids)} out",
                ask=f"After {want_pair} became {new_id}, is its second token still in your list? How many tokens "
                    "does one replacement consume?",
                fix="a replacement consumes both tokens: append new_id and skip two (i += 2), so [7, 7, 7] → "
                    "[new_id, 7]",
                formula=_Q1_FORMULA)
    if kind == "replaces_once":
        mistake(kind, symptom=f"{call} returned ids {short(got_ids, 80)}: {want_pair} is still in it",
                ask=f"How many occurrences of {want_pair} does your result still hold, and why did the scan stop?",
                fix="replace every non-overlapping occurrence: scan the whole list, not only up to the first match",
                formula=_Q1_FORMULA)
    expect(False, f"{call} merged {want_pair} and returned ids {short(got_ids, 80)}")


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
    """Checked: 60 random sequences — 4 empty or one-token, 26 of the ids 0–3 (many ties and runs such as
    [7, 7, 7]) and 30 UTF-8 byte sequences of random text — and that the input list is not modified."""
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
        kind = _q1_kind(before, ids, got, new_id)
        if kind:
            _q1_fail(merge_step, kind, before, got, new_id)
        cases += 1
    return f"{cases} random sequences (4 empty or one-token, 26 with many ties and runs, 30 from random text)"


# ---------------------------------------------------------------------------------------------
# q2: tokens per character
_Q2_FORMULA = ("tokens per character = sum(len(tok.encode(t)) for t in texts) / sum(len(t) for t in texts)")
#: hand-picked small inputs a failure is shrunk to
_Q2_SMALL = [["hello world"], ["한국어"], ["a", "hello world, hello"], ["hi", "안녕하세요 세계"],
             ["def f(x):\n    return x", "한국어 텍스트"]]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _q2_kind(got: Any, tok: Tokenizer, texts: list[str]) -> str | None:
    """What is wrong with ``got`` (None: nothing): per UTF-8 byte, a mean of ratios, upside down."""
    if not (isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got)):
        return "not_a_float"
    want = _tokens_per_character(tok, texts)
    if abs(got - want) <= 1e-9 * want:
        return None
    lengths = [len(tok.encode(t)) for t in texts]
    nonempty = [(n, len(t)) for n, t in zip(lengths, texts) if t]
    for value, kind in ((sum(lengths) / sum(len(t.encode("utf-8")) for t in texts), "per_utf8_byte"),
                        (sum(n / c for n, c in nonempty) / len(nonempty), "mean_of_ratios"),
                        (sum(len(t) for t in texts) / sum(lengths), "characters_per_token")):
        if math.isclose(got, value, rel_tol=1e-9):
            return kind
    return "wrong_ratio"


def _q2_fail(fn: Callable, kind: str, tok: Tokenizer, texts: list[str], got: Any, where: str) -> None:
    tok0 = Tokenizer(workbook_tokenizer())
    for small in _Q2_SMALL:
        g = try_call(fn, tok0, list(small))
        if g is not RAISED and _q2_kind(g, tok0, small) == kind:
            tok, texts, got, where = tok0, list(small), g, f"tokens_per_character(tok, {short(small, 80)})"
            break
    expect(kind != "not_a_float", f"{where} returned {short(got)}; expected a float")
    counts = [(len(tok.encode(t)), len(t), len(t.encode("utf-8"))) for t in texts]
    shown = "; ".join(f"{short(t, 24)}: {_count(n, 'token')}, {_count(c, 'character')}, {_count(b, 'UTF-8 byte')}"
                      for t, (n, c, b) in zip(texts[:3], counts[:3])) + ("; …" if len(texts) > 3 else "")
    symptom = f"{where} returned {got:.6g} ({shown})"
    if kind == "per_utf8_byte":
        mistake(kind, symptom=symptom,
                ask="What did you divide the tokens by — and is len(text) the same as len(text.encode('utf-8')) for Korean?",
                fix="divide by the characters (len of the str, code points), not the UTF-8 bytes", formula=_Q2_FORMULA)
    if kind == "mean_of_ratios":
        mistake(kind, symptom=symptom,
                ask="Is your number one ratio of totals, or an average of per-text ratios? Which one lets a "
                    "one-word text weigh as much as a page?",
                fix="add up the tokens of all texts and the characters of all texts, then divide once",
                formula=_Q2_FORMULA)
    if kind == "characters_per_token":
        mistake(kind, symptom=symptom, ask="Which count goes above the fraction bar in 'tokens per character'?",
                fix="tokens per character = tokens / characters; yours is characters / tokens", formula=_Q2_FORMULA)
    expect(False, symptom)


@check(CHAPTER, "q2", hint=(
    "reread chapter 1's 'SentencePiece: lossless, BPE vs unigram, four domains', which compared the domains: "
    "what is counted above the fraction bar, and what below it?",
    "one ratio of totals over the whole list, not a mean of per-text ratios: all tokens (each text encoded on its "
    "own with the tokenizer you are given) over all characters (code points: len of the str, not UTF-8 bytes)",
    "tokens per character = (sum over texts of len(tok.encode(text))) / (sum of len(text)); "
    "encode each text on its own, count characters (len of the str), not UTF-8 bytes; use the tokenizer "
    "you are given."))
def q2(tokens_per_character) -> str:
    """Checked: 8 lists of 3–12 random snippets (a random emoji/Hangul text added to some), one per domain
    and tokenizer: the workbook's and one freshly trained."""
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
            kind = _q2_kind(got, tok, texts)
            if kind:
                _q2_fail(tokens_per_character, kind, tok, texts, got,
                         f"{len(texts)} random {domain} snippets with {tok.path.name}")
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


_Q3_FORMULA = ("same_fingerprint = train_tok.fingerprint == serve_tok.fingerprint; verdict from it alone; "
               "special_ids_differ = sorted(k for k in a if a[k] != b[k]) with a, b = tok.special_ids(); "
               "id_agreement = (texts with train_tok.encode(t) == serve_tok.encode(t)) / len(probe_texts); "
               "garbled = the first serve_tok.decode(train_tok.encode(t)) != t, else None")


def _q3_kind(key: str, got: Any, want: Any, train: Tokenizer, serve: Tokenizer, probes: list[str],
             answer: dict) -> str | None:
    """A known wrong field, named: a count for the fraction, unsorted names, garbled decoded the other way,
    a verdict that does not follow the fingerprints."""
    try:
        if key == "id_agreement" and isinstance(got, (int, float)) and probes \
                and abs(got - want * len(probes)) <= 1e-9 and abs(want * len(probes) - want) > 1e-9:
            return "agreement_is_a_count"
        if key == "special_ids_differ" and not isinstance(got, (str, bytes, dict)) and sorted(got) == list(want):
            return "names_not_sorted"
        if key == "garbled" and got is not None:
            for text in probes:
                swapped = train.decode(serve.encode(text))
                if swapped != text:
                    return "decoded_the_other_way" if got == swapped else None
        if key in ("verdict", "same_fingerprint") and train.fingerprint != serve.fingerprint \
                and train.vocab_size == serve.vocab_size and answer.get("verdict") == "same":
            return "verdict_not_from_fingerprint"
        if key in ("verdict", "same_fingerprint") and train.fingerprint == serve.fingerprint \
                and answer.get("verdict") == "mismatch":
            return "copy_called_a_mismatch"
    except Exception:  # noqa: BLE001 - a malformed field, or ids one tokenizer cannot decode: no named mistake
        return None
    return None


def _q3_fail(kind: str, name: str, probes: list[str], got: dict, want: dict, wrong: list[str]) -> None:
    others = f" (also: {'; '.join(wrong)})" if wrong else ""
    if kind == "agreement_is_a_count":
        mistake(kind, symptom=f"{name}: id_agreement = {short(got['id_agreement'])} for {len(probes)} probe texts" + others,
                ask="The table asks for a fraction of the probe texts: what range can a fraction take?",
                fix="divide the number of identically encoded texts by len(probe_texts)", formula=_Q3_FORMULA)
    if kind == "names_not_sorted":
        mistake(kind, symptom=f"{name}: special_ids_differ = {short(got['special_ids_differ'])}, expected "
                              f"{short(want['special_ids_differ'])}" + others,
                ask="Your names are the right ones: what does the table say about their order?",
                fix="return sorted(names)", formula=_Q3_FORMULA)
    if kind == "decoded_the_other_way":
        mistake(kind, symptom=f"{name}: garbled = {short(got['garbled'], 60)}, expected {short(want['garbled'], 60)}"
                              + others,
                ask="Which tokenizer wrote the training ids, and which one reads them when the model serves? "
                    "Which way round did you decode?",
                fix="garbled is serve_tok.decode(train_tok.encode(t)); you decoded serving ids with the training "
                    "tokenizer", formula=_Q3_FORMULA)
    if kind == "verdict_not_from_fingerprint":
        mistake(kind, symptom=f"{name}: verdict = 'same', but the two .model files differ (both have "
                              f"{want['vocab_sizes'][0]} pieces)" + others,
                ask="Two tokenizers with the same vocabulary size: are they the same tokenizer? What identifies a "
                    "tokenizer file exactly?",
                fix="decide same_fingerprint and the verdict from the fingerprints alone (tok.fingerprint)",
                formula=_Q3_FORMULA)
    if kind == "copy_called_a_mismatch":
        mistake(kind, symptom=f"{name}: verdict = 'mismatch', but both tokenizers are the same bytes (equal "
                              "fingerprints) at two paths" + others,
                ask="A byte-for-byte copy at another path: is it another tokenizer? What does your test compare?",
                fix="compare the fingerprints (sha256 of the .model bytes), not paths, file names or objects",
                formula=_Q3_FORMULA)


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
            bad = [key for key in _Q3_KEYS if not _q3_equal(key, got[key], want[key])]
            kinds = {key: _q3_kind(key, got[key], want[key], a, serve, probes, got) for key in bad}
            named = next(((key, kind) for key, kind in kinds.items() if kind), None)
            wrong = [f"{key} = {short(got[key], 90)}, expected {short(want[key], 90)}"
                     for key in bad if named is None or key != named[0]]
            if named:
                _q3_fail(named[1], name, probes, got, want, wrong)
            expect(not wrong, f"{name}: " + "; ".join(wrong))       # every wrong field at once
    return f"{len(scenarios)} freshly trained tokenizer pairs"


# ---------------------------------------------------------------------------------------------
@check(CHAPTER, "q4", hint=(
    "training went fine and only the served output is broken text: what differs between training and serving? "
    "(chapter 1, 'The invariant: one tokenizer everywhere')",
    "suspect the tokenizer the serving stack loads (book §6.2.4 pitfall, §6.2.9): ids only mean something with "
    "the tokenizer that wrote them. A useful check looks at the two tokenizers themselves, not at training, "
    "hardware or batch sizes; a fix removes the cause (the same .model everywhere) or stops a mismatched "
    "tokenizer from being used (fail fast), rather than hiding the symptom.",
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
        expect(not unknown, f"{key}: unknown option(s) {short(unknown)}; choose from {sorted(options)}")
    checks, fixes = set(answer["checks"]), set(answer["fixes"])
    text = answer["explanation"]
    with parts() as part:  # name every failing part at once
        part(answer["cause"] in _CAUSE, "cause: training was fine, so what differs between training and serving?")
        extra = sorted(c for c in checks if c not in _CHECKS)
        if part(not extra, f"checks: {extra} would not reveal a tokenizer problem"):
            part(len(checks) == len(_CHECKS), f"checks: {len(_CHECKS) - len(checks)} useful check(s) missing")
        extra = sorted(f for f in fixes if f not in _FIXES)
        if part(not extra, f"fixes: {extra} neither remove the cause nor stop a mismatched tokenizer from being used"):
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


_Q5_FORMULA = ("ids = list(text.encode('utf-8')); for k, pair in enumerate(merges): replace every non-overlapping "
               "occurrence of pair in ids by 256 + k, scanning left to right (your merge_step's replacing part)")
#: hand-picked small inputs a failure is shrunk to: (text, merges)
_Q5_SMALL = [("é", []), ("aa", [(97, 97)]), ("abab", [(97, 98)]), ("hi! hi", [(104, 105), (256, 33)]),
             ("한", [(237, 149)]), ("abcabc", [(97, 98), (256, 99)]), ("aaaa", [(97, 97), (256, 256)])]


def _apply(ids: list[int], merges: list[tuple[int, int]], order: list[int], first_only: bool = False) -> list[int]:
    for k in order:
        out, i, done = [], 0, False
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(merges[k]) and not done:
                out.append(256 + k)
                i, done = i + 2, first_only
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return ids


def _q5_kind(got: Any, text: str, merges: list[tuple[int, int]]) -> str | None:
    if not (isinstance(got, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in got)):
        return "not_a_list"
    raw = list(text.encode("utf-8"))
    want = _apply(raw, merges, list(range(len(merges))))
    if got == want:
        return None
    if got == raw:
        return "no_merge_applied"
    if got == [ord(c) for c in text] and any(ord(c) > 127 for c in text):
        return "code_points"
    if got == _apply(raw, merges, list(range(len(merges)))[::-1]):
        return "merges_in_reverse"
    if got == _apply(raw, merges, list(range(len(merges))), first_only=True):
        return "first_occurrence_only"
    return "wrong_ids"


def _leftover(got: list[int], merges: list[tuple[int, int]]) -> str:
    """The first learned pair still adjacent in ``got`` (a correct encoding has none)."""
    where = {tuple(p): k for k, p in reversed(list(enumerate(merges)))}
    for i, pair in enumerate(zip(got, got[1:])):
        if pair in where:
            return f"; it still holds merges[{where[pair]}] = {pair} at position {i}"
    return ""


def _q5_fail(fn: Callable, kind: str, text: str, merges: list[tuple[int, int]], got: Any) -> None:
    for t, m in _Q5_SMALL:
        g = try_call(fn, t, list(m))
        if g is not RAISED and _q5_kind(g, t, m) == kind:
            text, merges, got = t, m, g
            break
    shown = short(merges, 60) if len(merges) <= 4 else f"<{len(merges)} merges>"
    call = f"bpe_encode({short(text, 60)}, {shown})"
    expect(kind != "not_a_list", f"{call} returned {short(got)}; expected a list of ints")
    symptom = f"{call} returned {short(got)}" + _leftover(got, merges)
    if kind == "no_merge_applied":
        mistake(kind, symptom=symptom + " — the UTF-8 bytes of the text",
                ask="What does each learned merge do to the byte sequence, and did your loop apply any of them?",
                fix="apply the merges: merge k replaces every occurrence of the pair merges[k] by the id 256 + k",
                formula=_Q5_FORMULA)
    if kind == "code_points":
        mistake(kind, symptom=f"{call} returned {short(got)}; the UTF-8 bytes of {short(text)} are "
                              f"{list(text.encode('utf-8'))}",
                ask="Does byte-level BPE start from characters or from bytes? What does ord give for a non-ASCII "
                    "character?",
                fix="start from list(text.encode('utf-8')), not from ord(c) of each character", formula=_Q5_FORMULA)
    if kind == "merges_in_reverse":
        mistake(kind, symptom=symptom,
                ask="A later merge can use a token an earlier merge made: did that token exist when your encoder "
                    "tried the later merge?",
                fix="apply the merges in training order, k = 0, 1, 2, …, each over the whole sequence",
                formula=_Q5_FORMULA)
    if kind == "first_occurrence_only":
        mistake(kind, symptom=symptom,
                ask="How many occurrences of a pair does your encoder replace per merge?",
                fix="each merge replaces every non-overlapping occurrence, scanning the whole sequence left to right",
                formula=_Q5_FORMULA)
    expect(False, symptom + (f", expected {short(_apply(list(text.encode('utf-8')), merges, list(range(len(merges)))))}"
                             if len(text) <= 8 else ""))


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
        merges = [tuple(p) for p in model.merges]
        want = model.encode(text)
        got = bpe_encode(text, list(merges))
        kind = _q5_kind(got, text, merges)
        if kind != "not_a_list" and (got == want) == bool(kind):   # ByteBPE.encode decides what is right
            kind = None if got == want else "wrong_ids"
        if kind:
            _q5_fail(bpe_encode, kind, text, merges, got)
    got = bpe_encode("🙂", [(1, 2)])
    expect(got == list("🙂".encode("utf-8")), f"bpe_encode('🙂', [(1, 2)]) returned {short(got)}; no merge applies to "
           f"that text: expected its UTF-8 bytes {list('🙂'.encode('utf-8'))}")
    return "20 unseen texts, models with 10–120 merges, and a text no merge applies to"
