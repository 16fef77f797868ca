"""Checks for chapter 4 (sequence packing and boundary masks): q1 the padding share · q2 first-fit
decreasing · q3 position ids and block mask from EOD positions · q4 book exercise 3 · q5 the document
pieces a GPT sample reads (a transfer exercise: the chapter prints the sample index, not this) · q6
the multiple every packed sequence is padded to under context and sequence parallelism (THD).

The mistakes a check recognises by name are the rows of :data:`RULES`, one table per question (see
:mod:`labsupport.check.rules`), each shown on the smallest input where the learner's function makes it.
Every text a learner reads — feedback, messages, the option lists — is in ``texts/ch04.toml``."""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator

import numpy as np

from labsupport.datasets.bin_packing import best_fit_decreasing as _bfd
from labsupport.datasets.bin_packing import first_fit as _first_fit
from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.bin_packing import padding_share as _padding_share
from labsupport.datasets.gpt_samples import build_sample_idx, get_ltor_masks_and_position_ids, sample_segments
from labsupport.datasets.sft_packing import pad_seq_to_mult as _pad_seq_to_mult
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, same_set, Sealed, short, StepDone
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import Rule, Rules, explain, in_words

CHAPTER = "ch04"
TEXTS = load_texts(CHAPTER)
summary = chapter_summary(CHAPTER)

#: Book exercise 3 (a): what padding every ~300-token example to 4096 wastes (choose the keys).
WASTE_OPTIONS: dict[str, str] = TEXTS["q4"].options["waste"]
#: Book exercise 3 (c): what packing must come with, whatever the model (choose the keys).
MUST_DO_OPTIONS: dict[str, str] = TEXTS["q4"].options["must_do"]
#: Book exercise 3 (c): with which position embeddings must position ids also restart per example?
POSITION_OPTIONS: dict[str, str] = TEXTS["q4"].options["position"]
#: q4's answer keys, sealed (see _core.Sealed): (a), (c) and (c)'s position question
_WASTE, _MUST_DO, _RESET_FOR = (Sealed.load(f"labsupport:ch04:q4:{part}") for part in ("a", "c", "c_reset"))


def _say(question: str, name: str, /, **facts: Any) -> str:
    """The message ``name`` of ``question`` (its ``[qN.messages]`` in texts/ch04.toml), filled from ``facts``."""
    return TEXTS[question].messages[name].format_map(facts)


def _number(value, what: str) -> float:
    expect(isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool),
           f"{what} must be a number, got {short(value)} ({type(value).__name__})")
    return float(value)


# --- q1: padding share --------------------------------------------------------------------------
def _near(a: Any, b: float) -> bool:
    try:
        return abs(float(a) - b) <= 1e-9
    except (TypeError, ValueError):
        return False


_Q1_SMALL = {**dict.fromkeys(("real_share", "percentage"), [([1], 4), ([1, 3], 4)]), "rows_of_longest": [([1, 3], 4)]}
_Q1 = Rules(Rule("real_share", wrong=lambda lengths, s: sum(lengths) / (len(lengths) * s)),
    Rule("percentage", wrong=lambda lengths, s: 100 * _padding_share(lengths, s)),
    Rule("rows_of_longest", wrong=lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths))),
    texts=TEXTS["q1"])


def _q1_facts(case: tuple, got: Any) -> dict[str, Any]:
    lengths, seq_length = case
    slots = len(lengths) * seq_length
    return {"call": f"padding_share({short(lengths, 200)}, {seq_length}) returned {short(float(got))}",
            "counts": _say("q1", "counts", rows=len(lengths), seq_length=seq_length, slots=slots, real=sum(lengths),
                           padding=slots - sum(lengths)),
            "want": short(_padding_share(lengths, seq_length)), "longest": max(lengths)}


@check(CHAPTER, "q1", hint=TEXTS["q1"].hint)
def q1(padding_share) -> str:
    rng = np.random.default_rng(check_seed())
    for _ in range(40):
        seq_length = int(rng.choice([128, 512, 2048, 4096]))
        lengths = rng.integers(1, seq_length + 1, int(rng.integers(1, 300))).tolist()
        got = _number(padding_share(list(lengths), seq_length),
                      f"padding_share(…{len(lengths)} lengths…, {seq_length})")
        want = _padding_share(lengths, seq_length)
        if not abs(got - want) <= 1e-9:   # NaN fails too
            explain(padding_share, _Q1.values(), (lengths, seq_length), got, _padding_share, _near,
                    lambda rule: _Q1_SMALL[rule.name], _q1_facts)
            expect(False, _say("q1", "wrong", call=f"padding_share({short(lengths, 60)}, {seq_length})", got=short(got),
                               want=short(want)))
    got = _number(padding_share([300] * 1000, 4096), "padding_share([300]*1000, 4096)")
    expect(abs(got - (1 - 300 / 4096)) <= 1e-9,
           _say("q1", "wrong", call="padding_share([300]*1000, 4096)", got=short(got), want=short(1 - 300 / 4096)))
    return "41 random cases"


# --- q2: first-fit decreasing -------------------------------------------------------------------
def _bins_of(value: Any) -> list[list[int]] | None:
    """A learner's packing as lists of ints, or None when it is not one."""
    try:
        return [[int(i) for i in b] for b in value]
    except (TypeError, ValueError):
        return None


def _as_bins(value, n: int, call: str) -> list[list[int]]:
    expect(hasattr(value, "__iter__"), _say("q2", "not_packs", call=call, got=type(value).__name__))
    bins = _bins_of(value)
    expect(bins is not None, _say("q2", "not_packs", call=call, got=short(value)))
    flat = sorted(i for b in bins for i in b)
    repeats = _say("q2", "repeats") if len(set(flat)) != len(flat) else ""
    expect(flat == list(range(n)), _say("q2", "not_each_once", call=call, last=n - 1, count=len(flat), repeats=repeats))
    expect(all(len(b) for b in bins), _say("q2", "empty_pack", call=call))
    return bins


def _fit_in_order(key: Callable[[int, int], tuple]) -> Callable:
    """First fit taking the examples in the order ``key(length, index)`` sorts them (NeMo's: (−length, index))."""
    def fit(lengths: list[int], pack_size: int) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda i: key(lengths[i], i))
        return [[order[j] for j in pack] for pack in _first_fit([lengths[i] for i in order], pack_size).tolist()]
    return fit


def _tie_facts(case: tuple, bins: list[list[int]]) -> dict[str, Any]:
    """The first two equally long examples the learner's packs take in the other order than NeMo's ({} if none)."""
    (lengths, pack_size), where = case, {i: (b, k) for b, pack in enumerate(bins) for k, i in enumerate(pack)}
    i, j = next(((i, j) for i in range(len(lengths)) for j in range(i + 1, len(lengths))
                 if lengths[i] == lengths[j] and where[j] < where[i]), (None, None))
    return {} if i is None else {"call": _say("q2", "call_packs", lengths=short(lengths, 200), pack_size=pack_size,
            got=short(bins, 200), want=short(_ffd(*case).tolist(), 200)), "i": i, "j": j, "tokens": _tokens(lengths[i])}


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _num(value: float) -> str:
    """A number as a learner writes it: 14, not 14.0."""
    return short(int(value)) if float(value).is_integer() else short(value)


_Q2 = Rules(   # plain first fit (the input order), first fit shortest first, best fit decreasing, ties reversed
    Rule("input_order", wrong=_first_fit), Rule("shortest_first", wrong=_fit_in_order(lambda length, i: (length, i))),
    Rule("best_fit", wrong=_bfd), Rule("ties_reversed", wrong=_fit_in_order(lambda length, i: (-length, -i))),
    texts=TEXTS["q2"])
_Q2_FIRST = {"best_fit": [([5, 3, 3, 1], 7)]}    # shown before the generated small problems


def _q2_small() -> Iterator[tuple[list[int], int]]:
    """Small packing problems, smallest first: 2…5 examples of 1…4 tokens, packs of 2…6."""
    for n, size in itertools.product(range(2, 6), range(2, 7)):
        for lengths in itertools.product(range(1, min(size, 4) + 1), repeat=n):
            yield list(lengths), size


def _first_fit_violation(bins: list[list[int]], lengths: list[int], pack_size: int) -> str:
    """In words: the first example (longest first) placed into a later pack while an earlier one had room."""
    where = {i: b for b, pack in enumerate(bins) for i in pack}
    filled = [0] * len(bins)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        earlier = [b for b in range(where[i]) if filled[b] and pack_size - filled[b] >= lengths[i]]
        if earlier:
            return _say("q2", "violation", example=i, tokens=_tokens(lengths[i]), pack=where[i], earlier=earlier[0],
                        free=pack_size - filled[earlier[0]])
        filled[where[i]] += lengths[i]
    return ""


def _packs(fn: Callable) -> Callable:
    """``fn``'s packing as (the lengths it puts in each pack, its packs of indices): packings are compared by
    their lengths, so equally long examples may swap."""
    def packing(lengths: list[int], pack_size: int) -> tuple:
        bins = _bins_of(fn(lengths, pack_size))
        try:
            return (None if bins is None else [[lengths[i] for i in b] for b in bins]), bins
        except IndexError:
            return None, bins
    return packing


def _q2_facts(case: tuple, got: tuple) -> dict[str, Any]:
    (lengths, pack_size), (packs, bins) = case, got
    want = _ffd(lengths, pack_size).tolist()
    first = bins[0][0] if bins and bins[0] else 0
    return {"call": _say("q2", "call", lengths=short(lengths, 200), pack_size=pack_size, got=short(bins, 200),
                         packs=short(packs, 200), want=short([[lengths[i] for i in b] for b in want], 200)),
            "first": first, "first_tokens": _tokens(lengths[first]), "longest": want[0][0],
            "violation": _first_fit_violation(bins, lengths, pack_size)}


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(first_fit_decreasing) -> str:
    rng = np.random.default_rng(check_seed())
    for _ in range(60):
        pack_size = int(rng.integers(8, 200))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(0, 80))).tolist()
        call = f"first_fit_decreasing({short(lengths, 50)}, {pack_size})"
        bins = _as_bins(first_fit_decreasing(list(lengths), pack_size), len(lengths), call)
        got = [[lengths[i] for i in b] for b in bins]
        over = [sum(pack) for pack in got if sum(pack) > pack_size]
        expect(not over, _say("q2", "overfull", call=call, tokens=over[0] if over else 0, pack_size=pack_size))
        want = [[lengths[i] for i in b] for b in _ffd(lengths, pack_size).tolist()]
        if got != want:   # compared by their lengths: packs, each shown on the smallest problem that shows it
            explain(_packs(first_fit_decreasing), [rule.but(wrong=_packs(rule.wrong)) for rule in _Q2.values()],
                    (lengths, pack_size), (got, bins), _packs(_ffd), lambda a, b: a[0] == b[0],
                    lambda rule: itertools.chain(_Q2_FIRST.get(rule.name, []), _q2_small()), _q2_facts)
            why = _first_fit_violation(bins, lengths, pack_size)
            why = f"; {why}" if why else ""
            expect(len(got) == len(want), _say("q2", "pack_count", call=call, got=len(got), want=len(want), why=why))
            expect(False, _say("q2", "pack_lengths", call=call, got=short(got, 80), want=short(want, 80), why=why))
        if bins != (nemo := _ffd(lengths, pack_size).tolist()):   # the same lengths, other examples: ties
            explain(lambda *c: _bins_of(first_fit_decreasing(*c)), [_Q2["ties_reversed"]], (lengths, pack_size),
                    bins, lambda *c: _ffd(*c).tolist(), lambda a, b: a == b, lambda rule: _q2_small(), _tie_facts)
            if facts := _tie_facts((lengths, pack_size), bins):   # another tie order: np.argsort is not stable, so
                _Q2["ties_reversed"].fail(**facts)                # argsort(lengths)[::-1] reverses only some ties
            expect(False, _say("q2", "pack_indices", call=call, got=short(bins, 80), want=short(nemo, 80)))
    return "60 random cases, same packs as NeMo's first_fit_decreasing"


# --- q3: position ids and the block mask -----------------------------------------------------------
def _as_array(value) -> np.ndarray:
    return np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)


def _documents(tokens: np.ndarray, eod: int, eod_starts: bool) -> np.ndarray:
    """Document number of every token: EOD ends its document, or (``eod_starts``, a mistake) starts the next."""
    is_eod = (np.asarray(tokens) == eod).astype(int)
    return np.cumsum(is_eod) if eod_starts else np.concatenate([[0], np.cumsum(is_eod[:-1])]).astype(int)


def _positions(doc: np.ndarray) -> np.ndarray:
    """Every token's position in its document (``doc`` never decreases: its first token is the first match)."""
    return np.arange(doc.size) - np.searchsorted(doc, doc)


def _block_mask(doc: np.ndarray) -> np.ndarray:
    """True = masked: the future, and every key of another document."""
    return np.triu(np.ones((doc.size, doc.size), dtype=bool), 1) | (doc[:, None] != doc[None, :])


def _megatron(tokens, eod) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's (position_ids, attention_mask) of one sample, as numpy: positions and mask reset per document."""
    mask, _, pos = get_ltor_masks_and_position_ids(tokens, eod, True, True, False)
    return pos.numpy(), mask.numpy()[0]


_POSITIONS, _MASK = (TEXTS["q3"].messages[f"{part}_formula"] for part in ("positions", "mask"))
_Q3 = Rules(
    Rule("restart_at_eod", wrong=lambda t, e: _positions(_documents(t, e, eod_starts=True)), formula=_POSITIONS),
    Rule("no_restart", wrong=lambda t, e: np.arange(len(t)), formula=_POSITIONS),
    Rule("inverted", wrong=lambda t, e: ~_megatron(t, e)[1], formula=_MASK),
    Rule("causal_only", wrong=lambda t, e: np.triu(np.ones((len(t), len(t)), dtype=bool), 1), formula=_MASK),
    Rule("eod_cut_off", wrong=lambda t, e: _block_mask(_documents(t, e, eod_starts=True)), formula=_MASK),
    texts=TEXTS["q3"])
#: the smallest (tokens, eod) that shows each rule
_Q3_SMALL = {"restart_at_eod": ([1, 0, 1], 0), "no_restart": ([1, 0, 1], 0), "inverted": ([1, 1], 0),
             "causal_only": ([0, 1], 0), "eod_cut_off": ([1, 0], 0)}


def _pair_words(tokens: np.ndarray, eod: int, i: int, j: int, masked: bool) -> str:
    """In words: what the learner's mask does with query i and key j, and where those tokens are."""
    def _span(doc: np.ndarray, d: int) -> str:
        where = np.flatnonzero(doc == d)
        return f"token {where[0]}" if where.size == 1 else f"tokens {where[0]}…{where[-1]}"

    doc = _documents(tokens, eod, eod_starts=False)
    does = _say("q3", "hides" if masked else "lets", i=i, j=j)
    if j > i:
        return _say("q3", "future", does=does)
    if doc[i] == doc[j]:
        last = np.flatnonzero(doc == doc[i])[-1]
        ended = _say("q3", "eod_included") if tokens[last] == eod else ""
        return _say("q3", "same_document", does=does, span=_span(doc, doc[i]), ended=ended)
    return _say("q3", "other_document", does=does, i=i, j=j, key_span=_span(doc, doc[j]),
                ends=np.flatnonzero(doc == doc[j])[-1], query_span=_span(doc, doc[i]))


def _q3_positions_facts(case: tuple, pos: np.ndarray) -> dict[str, Any]:
    tokens, eod = case
    want = _megatron(tokens, eod)[0]
    first = int(np.flatnonzero(pos != want)[0])
    eods = np.flatnonzero(np.asarray(tokens) == eod).tolist()
    return {"call": f"positions_and_mask({short(np.asarray(tokens).tolist(), 200)}, eod_token={eod}) gave "
                    f"position_ids {short(pos.tolist(), 200)} (the EOD at {in_words(eods, 'nowhere')})",
            "want": short(want.tolist(), 200), "first": first, "first_position": int(pos[first])}


def _q3_mask_facts(case: tuple, mask: np.ndarray) -> dict[str, Any]:
    tokens, eod = case
    i, j = (int(v) for v in np.argwhere(mask != _megatron(tokens, eod)[1])[0])
    return {"call": f"positions_and_mask({short(np.asarray(tokens).tolist(), 200)}, eod_token={eod}): "
                    + _pair_words(np.asarray(tokens), eod, i, j, bool(mask[i, j])), "i": i}


def _q3_mistake(fn: Callable, part: int, got: np.ndarray, tokens: np.ndarray, eod: int) -> None:
    """Name a wrong ``part`` (0: the position ids, 1: the mask), on the smallest sequence that shows it."""
    names = ("restart_at_eod", "no_restart") if part == 0 else ("inverted", "causal_only", "eod_cut_off")

    def learner(t: np.ndarray, e: int) -> np.ndarray:
        out = _as_array(fn(t, e)[part])
        return out if part == 0 else out.reshape(len(t), len(t)).astype(bool)
    explain(learner, [_Q3[n] for n in names], (tokens, eod), got, lambda t, e: _megatron(t, e)[part],
            np.array_equal, lambda rule: [(np.array(_Q3_SMALL[rule.name][0]), _Q3_SMALL[rule.name][1])],
            _q3_mask_facts if part else _q3_positions_facts)


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
def q3(positions_and_mask) -> str:
    rng = np.random.default_rng(check_seed())
    mask_pending = False
    for _ in range(50):
        s = int(rng.integers(1, 40))
        eod = int(rng.integers(0, 5))
        tokens = rng.integers(0, 5, s)
        call = f"positions_and_mask({short(tokens.tolist(), 200)}, eod_token={eod})"
        out = positions_and_mask(tokens.copy(), eod)
        expect(isinstance(out, tuple) and len(out) == 2, _say("q3", "not_a_pair", call=call))
        pos = _as_array(out[0])
        want_pos, want_mask = _megatron(tokens, eod)
        expect(pos.shape == (s,), _say("q3", "positions_shape", call=call, shape=short(pos.shape), s=s))
        if not np.array_equal(pos, want_pos):
            _q3_mistake(positions_and_mask, 0, pos, tokens, eod)
            expect(False, _say("q3", "positions", call=call, got=short(pos.tolist(), 200),
                               want=short(want_pos.tolist(), 200), first=int(np.flatnonzero(pos != want_pos)[0])))
        if out[1] is None:                     # step 1 of 2: position ids first, the mask still to write
            mask_pending = True
            continue
        mask = _as_array(out[1])
        expect(mask.shape in ((s, s), (1, s, s)), _say("q3", "mask_shape", call=call, shape=short(mask.shape), s=s))
        mask = mask.reshape(s, s)
        expect(mask.dtype == bool, _say("q3", "mask_dtype", call=call, dtype=mask.dtype))
        if not np.array_equal(mask, want_mask):
            _q3_mistake(positions_and_mask, 1, mask, tokens, eod)
            i, j = (int(v) for v in np.argwhere(mask != want_mask)[0])
            words = _pair_words(tokens, eod, i, j, bool(mask[i, j]))
            expect(False, _say("q3", "mask", call=call, words=words, i=i, j=j))
    if mask_pending:
        raise StepDone(_say("q3", "mask_pending"))
    return "50 random token sequences"


# --- q4: book exercise 3 -------------------------------------------------------------------------
#: Exercise 3's numbers: every example exactly 300 tokens, rows (packs) of 4096.
_EXAMPLE, _ROW = 300, 4096
_PER_PACK = _ROW // _EXAMPLE                       # 13 whole examples: 3900 real tokens in a packed row
_GAIN = _PER_PACK * _EXAMPLE / _EXAMPLE            # real tokens per row, packed / padded = 13
_SHARE = 1 - _EXAMPLE / _ROW                       # the padding share of a padded row
#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = TEXTS["q4"].messages["model_answer"]
_Q4 = Rules(   # named by what the numbers are (see _Q4_SHOWS), so no wrong implementations; (a): q1's again
    Rule("real_share", ask=_Q1["real_share"].ask, formula=TEXTS["q4"].messages["share_formula"]),
    Rule("share_percentage", ask=_Q1["percentage"].ask, formula=TEXTS["q4"].messages["share_formula"]),
    Rule("examples_over_row"), Rule("gain_over_row"), Rule("gain_counts_slots"), Rule("gain_upside_down"),
    texts=TEXTS["q4"])
#: (rule, the answer's field it is about, does (share s, examples per pack p, gain g) show it?), in this order
_Q4_SHOWS = (
    ("real_share", "a_padding_share", lambda s, p, g: abs(s - _EXAMPLE / _ROW) <= 1e-3),
    ("share_percentage", "a_padding_share", lambda s, p, g: abs(s - 100 * _SHARE) <= 0.1),
    ("examples_over_row", "b_examples_per_pack", lambda s, p, g: p != _PER_PACK and p * _EXAMPLE > _ROW),
    ("gain_over_row", "b_speedup", lambda s, p, g: g != _GAIN and g * _EXAMPLE > _ROW * (1 + 1e-12)),
    ("gain_counts_slots", "b_speedup", lambda s, p, g: abs(g - _ROW / _EXAMPLE) <= 1e-3),
    ("gain_upside_down", "b_speedup", lambda s, p, g: 0 < g < 1))


def _q4_mistake(share: float, per_pack: float, gain: float, problems: list[tuple[str, str]]) -> None:
    """Name the first recognised mistake among exercise 3's numbers, with the other failing parts."""
    for name, field, shows in _Q4_SHOWS:
        if shows(share, per_pack, gain):
            others = [text for f, text in problems if f != field]
            _Q4.fail(name, also=f" | also: {' | '.join(others)}" if others else "", share=short(share),
                     share_n=_num(share), per_pack=_num(per_pack), pack_tokens=_num(per_pack * _EXAMPLE),
                     gain=short(gain), gain_n=_num(gain), gain_tokens=_num(gain * _EXAMPLE))


@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
def q4(exercise_3) -> tuple[str, dict[str, str]]:
    answer = exercise_3()
    expect(isinstance(answer, dict), _say("q4", "not_a_dict", type=type(answer).__name__))
    for key in ("a_padding_share", "a_wasted", "b_examples_per_pack", "b_speedup", "c_must_do",
                "c_reset_positions_for", "why"):
        expect(key in answer, _say("q4", "missing", key=key))
    why = answer.get("why", "")
    share = _number(answer["a_padding_share"], "a_padding_share")
    per_pack = _number(answer["b_examples_per_pack"], "b_examples_per_pack")
    speedup = _number(answer["b_speedup"], "b_speedup")
    problems: list[tuple[str, str]] = []     # (field, message): every failing part, named at once

    def part(condition: bool, message: str, field: str = "") -> bool:
        if not condition:
            problems.append((field, message))
        return bool(condition)

    def choice(key: str, options: dict[str, str], right: Sealed) -> None:   # known keys first, then the set
        chosen = set(answer[key])
        unknown = _say("q4", f"{key}_unknown", unknown=sorted(chosen - set(options)), options=sorted(options))
        if part(chosen <= set(options), unknown):
            part(same_set(chosen, right), _say("q4", key))

    part(abs(share - _SHARE) <= 0.01, _say("q4", "a_padding_share", share=_num(share)), "a_padding_share")
    choice("a_wasted", WASTE_OPTIONS, _WASTE)
    part(per_pack == _PER_PACK, _say("q4", "b_examples_per_pack", per_pack=_num(per_pack)), "b_examples_per_pack")
    part(abs(speedup - _GAIN) <= 1e-9, _say("q4", "b_speedup", speedup=_num(speedup)), "b_speedup")
    choice("c_must_do", MUST_DO_OPTIONS, _MUST_DO)
    choice("c_reset_positions_for", POSITION_OPTIONS, _RESET_FOR)
    part(isinstance(why, str) and len(why.split()) >= 5, _say("q4", "why"))
    _q4_mistake(share, per_pack, speedup, problems)
    with parts() as check_part:
        for _, text in problems:
            check_part(False, text)
    return "(a), (b), (c) correct. Compare your reasons with this model answer: " + MODEL_ANSWER_Q4, {"why": why}



# --- q5: the document pieces of a GPT sample ------------------------------------------------------
def _window(sizes: list[int], doc_idx: list[int], first: int, last: int) -> list[tuple[int, int, int]]:
    """The (document, start, stop) pieces of stream tokens [first, last)."""
    pieces, pos = [], 0
    for d in doc_idx:
        a, b = max(first - pos, 0), min(last - pos, sizes[d])
        if a < b:
            pieces.append((int(d), int(a), int(b)))
        pos += sizes[d]
    return pieces


def _sample_right(sizes, doc_idx, seq, k):
    return _window(sizes, doc_idx, k * seq, k * seq + seq + 1)


#: Small streams (sizes, doc_idx, S, k), smallest first, on which the recognised mistakes show.
_Q5_SMALL = [([8], [0], 2, 1), ([2, 3], [0, 1], 2, 0), ([2, 3], [1, 0], 2, 0), ([3, 3], [1, 0], 2, 1),
             ([5, 2, 7], [0, 1, 2], 4, 1), ([5, 2, 7], [2, 0, 1], 4, 1)]


def _pieces(got: Any) -> list[tuple[int, ...]] | None:
    try:
        pieces = [tuple(int(v) for v in piece) for piece in got]
    except (TypeError, ValueError):
        return None
    return pieces if all(len(p) == 3 for p in pieces) else None


def _stream_words(sizes: list[int], doc_idx: list[int], seq: int, k: int) -> str:
    """In words: which stream tokens sample k reads, and where the documents around them lie in the stream."""
    first, last = k * seq, k * seq + seq           # inclusive
    near, pos = [], 0
    for d in doc_idx:
        if pos <= last and pos + sizes[d] - 1 >= first:
            near.append(_say("q5", "document", d=d, first=pos, last=pos + sizes[d] - 1))
        pos += sizes[d]
    return _say("q5", "stream", k=k, n=seq + 1, first=first, last=last, near=", ".join(near))


_Q5 = Rules(   # wrong windows of the stream: (sizes, doc_idx, S, k) → pieces
    Rule("stride_s_plus_1", wrong=lambda sizes, docs, s, k: _window(sizes, docs, k * (s + 1), k * (s + 1) + s + 1)),
    Rule("s_tokens", wrong=lambda sizes, docs, s, k: _window(sizes, docs, k * s, k * s + s)),
    Rule("stop_inclusive", wrong=lambda *case: [(d, a, b - 1) for d, a, b in _sample_right(*case)]),
    Rule("ignores_doc_idx", wrong=lambda sizes, docs, s, k: _window(sizes, range(len(sizes)), k * s, k * s + s + 1)),
    texts=TEXTS["q5"])


def _q5_facts(case: tuple, got: Any) -> dict[str, Any]:
    sizes, doc_idx, seq, k = case
    got = _pieces(got)
    n_tokens = sum(b - a for _, a, b in got)
    return {"call": f"sample_documents({short(sizes)}, {short(doc_idx)}, {seq}, {k}) returned {short(got, 200)}: "
                    f"{n_tokens} tokens; {_stream_words(sizes, doc_idx, seq, k)} (expected "
                    f"{short(_sample_right(*case), 200)})",
            "n_tokens": n_tokens, "seq": seq, "k": k, "window": seq + 1, "start": k * (seq + 1), "before": k - 1,
            "before_ends": (k - 1) * seq + seq}


@check(CHAPTER, "q5", hint=TEXTS["q5"].hint)
def q5(sample_documents) -> str:
    rng = np.random.default_rng(check_seed())
    cases = 0
    while cases < 60:
        sizes = rng.integers(1, 12, int(rng.integers(1, 7))).astype(np.int32)
        epochs = int(rng.integers(1, 4))
        doc_idx = rng.permutation(np.tile(np.arange(sizes.size, dtype=np.int32), epochs))
        seq = int(rng.integers(2, 9))
        if int(sizes.sum()) < 2 or epochs * int(sizes.sum()) - 1 < seq:   # Megatron needs 2+ tokens per epoch
            continue
        si = build_sample_idx(sizes, doc_idx, seq, epochs, int(sizes.sum()))
        k = int(rng.integers(0, len(si) - 1))
        call = f"sample_documents({sizes.tolist()}, {doc_idx.tolist()}, {seq}, {k})"
        got = sample_documents(sizes.tolist(), doc_idx.tolist(), seq, k)
        want = sample_segments(sizes, doc_idx, si, k)
        expect(isinstance(got, (list, tuple)) and _pieces(got) is not None,
               _say("q5", "not_pieces", call=call, got=short(got)))
        got = _pieces(got)
        if got != want:
            explain(sample_documents, _Q5.values(), (sizes.tolist(), doc_idx.tolist(), seq, k), got, _sample_right,
                    lambda a, b: _pieces(a) == b, lambda rule: _Q5_SMALL, _q5_facts)
            expect(False, _say("q5", "wrong", call=call, got=short(got, 200), n_tokens=sum(b - a for _, a, b in got),
                               want=short(want, 200), stream=_stream_words(sizes.tolist(), doc_idx.tolist(), seq, k)))
        cases += 1
    return f"{cases} random streams with repeated documents (epochs)"


# --- q6: the multiple a packed sequence is padded to under CP and SP (THD) ------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _cp_multiple(cp: int) -> int:
    return 2 * cp if cp > 1 else 1


def _sp_multiple(cp: int, tp: int, sp: bool) -> int:
    return cp * tp if sp and tp > 1 else 1


#: every (context_parallel_size, tensor_parallel_size, sequence_parallel) with CP and TP in 1…8, smallest first
_Q6_CASES = sorted(itertools.product(range(1, 9), range(1, 9), (False, True)),
                   key=lambda c: (c[0] * c[1], c[0], c[1], c[2]))
_Q6 = Rules(   # tried in this order: sp_when_off before doubles_cp_1, tp_only before sp_ignored (they overlap)
    Rule("cp_not_doubled", wrong=lambda cp, tp, sp: math.lcm(cp, _sp_multiple(cp, tp, sp))),
    Rule("sp_when_off", wrong=lambda cp, tp, sp: math.lcm(_cp_multiple(cp), _sp_multiple(cp, tp, True))),
    Rule("doubles_cp_1", wrong=lambda cp, tp, sp: math.lcm(2 * cp, _sp_multiple(cp, tp, sp))),
    Rule("sp_over_tp_only", wrong=lambda cp, tp, sp: math.lcm(_cp_multiple(cp), tp if sp and tp > 1 else 1)),
    Rule("sp_ignored", wrong=lambda cp, tp, sp: _cp_multiple(cp)),
    Rule("product_not_lcm", wrong=lambda cp, tp, sp: _cp_multiple(cp) * _sp_multiple(cp, tp, sp)),
    texts=TEXTS["q6"])


def _q6_facts(case: tuple, got: Any) -> dict[str, Any]:
    """What the q6 messages say about ``pad_multiple(*case)`` returning ``got``."""
    cp, tp, sp = case
    return {"call": f"pad_multiple({cp}, {tp}, {sp})", "got": short(got), "type": type(got).__name__,
            "want": _pad_seq_to_mult(*case), "cp": cp, "tp": tp, "sp": sp, "two_cp": 2 * cp, "cp_tp": cp * tp,
            "cp_multiple": _cp_multiple(cp), "sp_multiple": _sp_multiple(cp, tp, sp)}


@check(CHAPTER, "q6", hint=TEXTS["q6"].hint)
def q6(pad_multiple) -> str:
    """Checked: every case of :data:`_Q6_CASES`, each an int equal to
    :func:`labsupport.datasets.sft_packing.pad_seq_to_mult`."""
    for case in _Q6_CASES:
        got, want = pad_multiple(*case), _pad_seq_to_mult(*case)
        if _is_int(got) and got == want:
            continue
        facts = _q6_facts(case, got)
        expect(_is_int(got), _say("q6", "not_int", **facts))
        explain(pad_multiple, _Q6.values(), case, int(got), _pad_seq_to_mult, lambda a, b: _is_int(a) and a == b,
                lambda rule: _Q6_CASES, _q6_facts)
        expect(False, _say("q6", "wrong", **facts))
    return (f"all {len(_Q6_CASES)} combinations of CP 1…8, TP 1…8 and sequence parallelism on and off, each "
            "Megatron-Bridge's pad_seq_to_mult")


#: Every named mistake of this chapter's checks, by question (see labsupport.check.rules).
RULES: dict[str, Rules] = {"q1": _Q1, "q2": _Q2, "q3": _Q3, "q4": _Q4, "q5": _Q5, "q6": _Q6}
