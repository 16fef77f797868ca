"""Checks for chapter 1 (tokenization): a BPE merge step, tokens per character, diagnosing a
tokenizer mismatch, book exercise 4 (tokenizer consistency) and q5, encoding with learned merges.

Every check draws fresh random inputs (sequences, corpus snippets, freshly trained tokenizers)
and compares the learner's function with the ``labsupport`` reference:
:func:`labsupport.datasets.bpe.merge_step`, :func:`labsupport.datasets.tokenizer.tokens_per_character`,
:func:`labsupport.datasets.tokenizer.compare_tokenizers` and :meth:`labsupport.datasets.bpe.ByteBPE.encode`.
The mistakes the checks name are the rows of ``RULES`` (see :mod:`labsupport.check.rules`); q1, q2 and
q5 show a failure on the first hand-picked small input that fails the same way.
"""
from __future__ import annotations

import functools
import math
import random
import shutil
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, Sealed, short
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import choices, first_showing, Rule, Rules
from labsupport.datasets.bpe import ByteBPE, merge, merge_step as _merge_step
from labsupport.datasets.tokenizer import (Tokenizer, compare_tokenizers, read_documents, train_sentencepiece_bytes,
                                           tokens_per_character as _tokens_per_character, workbook_tokenizer)
from labsupport.paths import DOMAINS, data_file

CHAPTER = "ch01"
TEXTS = load_texts(CHAPTER)
#: the mistakes the checks name, by question (each table sits next to its check)
RULES: dict[str, Rules] = {}

#: Book exercise 4: the options the learner chooses from (shown in the solutions notebook).
EXERCISE_4_CAUSES, EXERCISE_4_CHECKS, EXERCISE_4_FIXES = (TEXTS["q4"].options[k] for k in ("causes", "checks", "fixes"))
#: q4's answer keys, sealed (see _core.Sealed).
_CAUSE = Sealed.load("labsupport:ch01:q4:cause")
#: q4: the useful checks.
_CHECKS = Sealed.load("labsupport:ch01:q4:checks")
#: q4: the fixes that remove the cause.
_FIXES = Sealed.load("labsupport:ch01:q4:fixes")


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


def _follows(rules: Rules, case: tuple, got: Any, same: Callable[[Any, Any], bool]) -> str | None:
    """The first rule whose wrong implementation gives the learner's result ``got`` on ``case`` (None: none)."""
    return next((r.name for r in rules.values() if r.wrong is not None and same(got, r.wrong(*case))), None)


def _judge(rules: Rules, plain: dict[str, str], verdict: Callable, run: Callable, small: list, case: Any,
           got: Any) -> None:
    """Fail if ``verdict(case, got)`` names a mistake — a rule of ``rules``, else a plain failure worded by
    ``plain`` — shown on the first of the ``small`` cases where the learner's function (``run``) makes it
    too (else on ``case``); ``verdict`` gives the mistake's name (None: right) and the facts its texts show."""
    kind = verdict(case, got)[0]
    if kind is None:
        return
    case, got = first_showing(run, small, lambda c, g: verdict(c, g)[0], kind) or (case, got)
    facts = verdict(case, got)[1]
    if kind in rules:
        rules.fail(kind, **facts)
    expect(False, plain[kind].format_map(facts))


# ---------------------------------------------------------------------------------------------
# q1: one BPE merge step
_Q1_FORMULA = ("counts = {{}}; for pair in zip(ids, ids[1:]): counts[pair] = counts.get(pair, 0) + 1; "
               "pair = max(counts, key=counts.get) (the first of equal counts); then scan i = 0, 1, …: "
               "at (ids[i], ids[i+1]) == pair append new_id and i += 2, else append ids[i] and i += 1")
#: hand-picked small inputs (ids, new_id) a failure is shrunk to, smallest first
_Q1_SMALL = [(ids, 256) for ids in ([], [5], [1, 2], [1, 2, 3], [7, 7, 7], [1, 2, 1, 2], [1, 2, 7, 7, 7],
                                    [7, 7, 7, 7], [3, 1, 2, 1, 2, 3], [1, 2, 3, 1, 2, 3, 3, 1])]
RULES["q1"] = Rules(
    Rule("modifies_input"),
    Rule("tie_not_first"),
    Rule("overlaps_not_counted"),
    Rule("keeps_second_token"),
    Rule("replaces_once"),
    formula=_Q1_FORMULA,
    texts=TEXTS["q1"])
#: q1's wrong answers no rule names: plain failures
_Q1_PLAIN = {"not_a_tuple": "{call} returned {got}; expected a (new_ids, pair) tuple",
             "bad_pair": "{call} returned pair {pair}; expected a (left, right) tuple or None",
             "bad_ids": "{call} returned ids {ids} ({ids_type}); expected a list of ints",
             "wrong_pair": "{call} merged pair {pair}; the adjacent positions hold {seen}",
             "wrong_ids": "{call} merged {want_pair} and returned ids {ids}"}


def _nonoverlapping_best(ids: list[int]) -> tuple[int, int] | None:
    """The pair a learner finds who counts only non-overlapping occurrences ([7, 7, 7] has (7, 7) once)."""
    counts = {pair: len(ids) - len(merge(ids, pair, -1)) for pair in dict.fromkeys(zip(ids, ids[1:]))}
    return max(counts, key=counts.get) if counts else None


def _q1_call(fn: Callable, case: tuple[list[int], int]) -> tuple[list[int], Any]:
    """The caller's list after ``fn(ids, new_id)``, and what the call returned."""
    ids = list(case[0])
    return ids, fn(ids, case[1])


def _q1_verdict(case: tuple[list[int], int], out: tuple[list[int], Any]) -> tuple[str | None, dict[str, Any]]:
    """What is wrong with ``merge_step(*case)`` leaving the caller's list as ``after`` and returning ``got``
    (``out``; None: nothing), and the facts its message shows."""
    (before, new_id), (after, got) = case, out
    want_ids, want_pair = _merge_step(before, new_id)
    counts = Counter(zip(before, before[1:]))
    facts = {"call": f"merge_step({short(before, 80)}, {new_id})", "after": short(after, 80), "got": short(got),
             "want_pair": want_pair, "new_id": new_id, "n_in": len(before),
             "times": {1: "once", 2: "twice"}.get(counts[want_pair], f"{counts[want_pair]} times")}
    if after != before:
        return "modifies_input", facts
    if not (isinstance(got, tuple) and len(got) == 2):
        return "not_a_tuple", facts
    ids, pair = got
    facts.update(pair=short(pair), ids=short(ids), ids_type=type(ids).__name__)
    if not (pair is None or (isinstance(pair, (tuple, list)) and len(pair) == 2)):
        return "bad_pair", facts
    if not hasattr(ids, "__iter__") or isinstance(ids, (str, bytes)):
        return "bad_ids", facts
    ids, pair = list(ids), tuple(pair) if pair is not None else None
    shown = counts if len(counts) <= 8 else {p: counts[p] for p in (want_pair, pair) if p in counts}
    seen = ", ".join(f"{a, b}: {n}" for (a, b), n in shown.items()) + ("" if len(counts) <= 8 else ", …")
    facts.update(pair=short(pair), ids=short(ids, 80), n_out=len(ids), seen=seen or "no pair",
                 pair_times={1: "once", 2: "twice"}.get(counts[pair], f"{counts[pair]} times"))
    if pair != want_pair:
        if want_pair is not None and pair in counts and counts[pair] == counts[want_pair]:
            return "tie_not_first", facts
        if want_pair is not None and pair == _nonoverlapping_best(before):
            return "overlaps_not_counted", facts
        return "wrong_pair", facts
    if ids == want_ids:
        return None, facts
    stepped = [new_id if p == want_pair else p[0] for p in zip(before, before[1:])] + before[-1:]
    if want_pair is not None and ids == stepped:    # one step on after a match: [7, 7, 7] → [N, N, 7]
        return "keeps_second_token", facts
    if 0 < ids.count(new_id) < want_ids.count(new_id):
        return "replaces_once", facts
    return "wrong_ids", facts


@check(CHAPTER, "q1", hint=TEXTS["q1"].hint)
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
        _judge(RULES["q1"], _Q1_PLAIN, _q1_verdict, functools.partial(_q1_call, merge_step), _Q1_SMALL,
               (before, new_id), (ids, got))
        cases += 1
    return f"{cases} random sequences (4 empty or one-token, 26 with many ties and runs, 30 from random text)"


# ---------------------------------------------------------------------------------------------
# q2: tokens per character
_Q2_FORMULA = ("tokens per character = sum(len(tok.encode(t)) for t in texts) / sum(len(t) for t in texts)")
#: hand-picked small inputs a failure is shrunk to
_Q2_SMALL = [["hello world"], ["한국어"], ["a", "hello world, hello"], ["hi", "안녕하세요 세계"],
             ["def f(x):\n    return x", "한국어 텍스트"]]

_Q2_SYMPTOM = "{where} returned {value:.6g} ({shown})"
RULES["q2"] = Rules(
    Rule("per_utf8_byte",
         symptom=_Q2_SYMPTOM,
         wrong=lambda tok, texts: sum(len(tok.encode(t)) for t in texts) / sum(len(t.encode("utf-8")) for t in texts)),
    Rule("mean_of_ratios",
         symptom=_Q2_SYMPTOM,
         wrong=lambda tok, texts: statistics.fmean(len(tok.encode(t)) / len(t) for t in texts if t)),
    Rule("characters_per_token",
         symptom=_Q2_SYMPTOM,
         wrong=lambda tok, texts: sum(len(t) for t in texts) / sum(len(tok.encode(t)) for t in texts)),
    formula=_Q2_FORMULA,
    texts=TEXTS["q2"])
_Q2_PLAIN = {"not_a_float": "{where} returned {got}; expected a float", "wrong_ratio": _Q2_SYMPTOM}


def _q2_verdict(case: tuple[Tokenizer, list[str], str], got: Any) -> tuple[str | None, dict[str, Any]]:
    """What is wrong with ``got`` for ``(tok, texts, where)`` (None: nothing), and the facts its message shows."""
    tok, texts, where = case
    count = lambda n, what: f"{n} {what}" + ("" if n == 1 else "s")  # noqa: E731
    shown = "; ".join(f"{short(t, 24)}: {count(len(tok.encode(t)), 'token')}, {count(len(t), 'character')}, "
                      f"{count(len(t.encode('utf-8')), 'UTF-8 byte')}" for t in texts[:3])
    facts = {"where": where, "got": short(got), "value": got, "shown": shown + ("; …" if len(texts) > 3 else "")}
    if not (isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got)):
        return "not_a_float", facts
    want = _tokens_per_character(tok, texts)
    if abs(got - want) <= 1e-9 * want:
        return None, facts
    same = lambda a, b: math.isclose(a, b, rel_tol=1e-9)  # noqa: E731
    return _follows(RULES["q2"], (tok, texts), got, same) or "wrong_ratio", facts


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(tokens_per_character) -> str:
    """Checked: 8 lists of 3–12 random snippets (a random emoji/Hangul text added to some), one per domain
    and tokenizer: the workbook's and one freshly trained."""
    rng = random.Random(check_seed())
    toks = [Tokenizer(workbook_tokenizer())]
    sample = [_snippet(rng, d, 200, 3000) for d in DOMAINS for _ in range(15)]
    proto = train_sentencepiece_bytes(sample, rng.choice([1500, 2000]), hard_vocab_limit=False)
    toks.append(Tokenizer.from_bytes(proto, "fresh_random.model"))
    small = [(toks[0], s, f"tokens_per_character(tok, {short(s, 80)})") for s in _Q2_SMALL]
    cases = 0
    for tok in toks:
        for domain in DOMAINS:
            texts = [_snippet(rng, domain) for _ in range(rng.randint(3, 12))]
            if rng.random() < 0.3:
                texts.append(_random_text(rng))  # emoji and rare Hangul: byte fallback
            got = tokens_per_character(tok, list(texts))
            _judge(RULES["q2"], _Q2_PLAIN, _q2_verdict, lambda c: tokens_per_character(c[0], list(c[1])), small,
                   (tok, texts, f"{len(texts)} random {domain} snippets with {tok.path.name}"), got)
            cases += 1
    return f"{cases} random domain samples with 2 tokenizers"


# ---------------------------------------------------------------------------------------------
# q3: diagnosing a tokenizer mismatch
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


RULES["q3"] = Rules(
    Rule("agreement_is_a_count"),
    Rule("names_not_sorted"),
    Rule("decoded_the_other_way"),
    Rule("verdict_not_from_fingerprint"),
    Rule("copy_called_a_mismatch"),
    formula=_Q3_FORMULA,
    texts=TEXTS["q3"])


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
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
            "same data, bos/eos swapped": tok("swapped.model",
                                              train_sentencepiece_bytes(english, vocab, bos_id=3, eos_id=2)),
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
            verdict = named and named[1] in ("verdict_not_from_fingerprint", "copy_called_a_mismatch")
            shown = ({named[0]} if named else set()) | ({"verdict", "same_fingerprint"} if verdict else set())
            wrong = [f"{key} = {short(got[key], 90)}, expected {short(want[key], 90)}"
                     for key in bad if key not in shown]
            if named:
                RULES["q3"].fail(named[1], scenario=name, n=len(probes), agreement=short(got["id_agreement"]),
                                 others=f" (also: {'; '.join(wrong)})" if wrong else "",
                                 special=short(got["special_ids_differ"]),
                                 want_special=short(want["special_ids_differ"]),
                                 garbled=short(got["garbled"], 60), want_garbled=short(want["garbled"], 60),
                                 vocab=want["vocab_sizes"][0])
            expect(not wrong, f"{name}: " + "; ".join(wrong))       # every wrong field at once
    return f"{len(scenarios)} freshly trained tokenizer pairs"


# ---------------------------------------------------------------------------------------------
@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
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
        for key, chosen, right in (("checks", checks, _CHECKS), ("fixes", fixes, _FIXES)):   # extras by name, the
            wrong, missing = choices(chosen, right)                                       # missing ones counted
            part(not (wrong or missing), TEXTS["q4"].say(
                "options", key=key, wrong=TEXTS["q4"].say(f"wrong_{key}", wrong=wrong) if wrong else "",
                missing=TEXTS["q4"].say(f"missing_{key}", n=missing, sep="; and " if wrong else "") if missing else ""))
        part(isinstance(text, str) and len(text.split()) >= 15,
             "explanation: a few sentences (15+ words) in your own words")
    return TEXTS["q4"].say("passed", model_answer=MODEL_ANSWER_Q4), {"explanation": text}


#: Shown once q4 passes, to compare the free-text explanation with.
MODEL_ANSWER_Q4 = TEXTS["q4"].messages["model_answer"]


# ---------------------------------------------------------------------------------------------
# q5: encoding unseen text with learned merges
_Q5_FORMULA = ("ids = list(text.encode('utf-8')); for k, pair in enumerate(merges): replace every non-overlapping "
               "occurrence of pair in ids by 256 + k, scanning left to right (your merge_step's replacing part)")
#: hand-picked small inputs a failure is shrunk to: (text, merges)
_Q5_SMALL = [("é", []), ("aa", [(97, 97)]), ("abab", [(97, 98)]), ("hi! hi", [(104, 105), (256, 33)]),
             ("한", [(237, 149)]), ("abcabc", [(97, 98), (256, 99)]), ("aaaa", [(97, 97), (256, 256)])]


def _encode(text: str, merges: list[tuple[int, int]], order: int = 1, first_only: bool = False,
            first_id: int = 256) -> list[int]:
    """``text`` encoded with the merges applied in training order (``order=-1``: the latest first), each
    over the whole sequence (``first_only``: each up to its first occurrence); merge k makes ``first_id + k``."""
    ids = list(text.encode("utf-8"))
    for k in list(range(len(merges)))[::order]:
        pair = tuple(merges[k])
        end = next((i + 2 for i, p in enumerate(zip(ids, ids[1:])) if p == pair), 0) if first_only else len(ids)
        ids = merge(ids[:end], pair, first_id + k) + ids[end:]
    return ids


RULES["q5"] = Rules(
    Rule("no_merge_applied", wrong=lambda text, merges: _encode(text, [])),
    Rule("code_points", wrong=lambda text, merges: [ord(c) for c in text]),
    Rule("merges_in_reverse", wrong=lambda text, merges: _encode(text, merges, order=-1)),
    Rule("first_occurrence_only", wrong=lambda text, merges: _encode(text, merges, first_only=True)),
    Rule("ids_from_257", wrong=lambda text, merges: _encode(text, merges, first_id=257)),
    formula=_Q5_FORMULA,
    texts=TEXTS["q5"])
_Q5_PLAIN = {"not_a_list": "{call} returned {got}; expected a list of ints", "wrong_ids": "{symptom}{expected}"}


def _leftover(got: list[int], merges: list[tuple[int, int]]) -> str:
    """The first learned pair still adjacent in ``got`` (a correct encoding has none)."""
    where = {tuple(p): k for k, p in reversed(list(enumerate(merges)))}
    for i, pair in enumerate(zip(got, got[1:])):
        if pair in where:
            return f"; it still holds merges[{where[pair]}] = {pair} at position {i}"
    return ""


def _q5_verdict(case: tuple[str, list[tuple[int, int]]], got: Any) -> tuple[str | None, dict[str, Any]]:
    """What is wrong with ``bpe_encode(*case)`` returning ``got`` (None: nothing), and the facts its message
    shows; ByteBPE.encode decides what is right."""
    text, merges = case
    want = ByteBPE(merges=list(merges)).encode(text)
    call = f"bpe_encode({short(text, 60)}, {short(merges, 60) if len(merges) <= 4 else f'<{len(merges)} merges>'})"
    facts = {"call": call, "got": short(got), "text": short(text), "utf8": list(text.encode("utf-8")),
             "expected": f", expected {short(want)}" if len(text) <= 8 else "",
             "m0": short(merges[0]) if merges else "none"}
    if not (isinstance(got, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in got)):
        return "not_a_list", facts
    facts["symptom"] = f"{call} returned {short(got)}" + _leftover(got, merges)
    if got == want:
        return None, facts
    return _follows(RULES["q5"], case, got, lambda a, b: a == b) or "wrong_ids", facts


@check(CHAPTER, "q5", hint=TEXTS["q5"].hint)
def q5(bpe_encode) -> str:
    """Checked: 20 random texts (corpus snippets, Korean, emoji, whitespace) encoded with the merges of ByteBPE
    models trained on *other* random snippets, against ByteBPE.encode; also a text no merge applies to."""
    rng = random.Random(check_seed())
    for i in range(20):
        model = ByteBPE.train(_snippet(rng, rng.choice(DOMAINS), 300, 2000), num_merges=rng.randint(10, 120))
        text = _snippet(rng, rng.choice(DOMAINS), 20, 400) if i % 2 else _random_text(rng)
        merges = [tuple(p) for p in model.merges]
        got = bpe_encode(text, list(merges))
        _judge(RULES["q5"], _Q5_PLAIN, _q5_verdict, lambda c: bpe_encode(c[0], list(c[1])), _Q5_SMALL, (text, merges),
               got)
    got = bpe_encode("🙂", [(1, 2)])
    expect(got == list("🙂".encode("utf-8")), f"bpe_encode('🙂', [(1, 2)]) returned {short(got)}; no merge applies to "
           f"that text: expected its UTF-8 bytes {list('🙂'.encode('utf-8'))}")
    return "20 unseen texts, models with 10–120 merges, and a text no merge applies to"

