"""Checks for chapter 4 (sequence packing and boundary masks): padding share, first-fit
decreasing, position ids and block mask from EOD positions, book exercise 3, and the document
pieces a GPT sample reads (a transfer exercise: the chapter prints the sample index, not this).

The mistakes a check recognises by name are the rows of :data:`RULES`, one table per question (see
:mod:`labsupport.check.rules`), each shown on the smallest input where the learner's function makes it."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import numpy as np

from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.bin_packing import padding_share as _padding_share
from labsupport.datasets.gpt_samples import build_sample_idx, get_ltor_masks_and_position_ids, sample_segments
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, same_set, Sealed, short
from labsupport.check.texts import load_texts
from labsupport.check.rules import Rule, Rules, explain

CHAPTER = "ch04"
TEXTS = load_texts(CHAPTER)

#: Book exercise 3 (a): what padding every ~300-token example to 4096 wastes (choose the keys).
WASTE_OPTIONS: dict[str, str] = {
    "compute": "GPU compute (FLOPs) spent on pad tokens",
    "memory": "activation memory held for pad positions",
    "throughput": "real tokens per step, so many more steps for the same data",
    "examples": "training examples, which are dropped",
    "quality": "the gradient of each example, which padding contaminates",
}
#: Book exercise 3 (c): what packing must come with, whatever the model (choose the keys).
MUST_DO_OPTIONS: dict[str, str] = {
    "block_mask": "a block-diagonal causal attention mask (or cu_seqlens for a varlen kernel), "
                  "so no example attends to another",
    "boundary_loss": "no loss on a label that belongs to another example or to padding",
    "shuffle_inside": "shuffle the tokens inside each pack",
    "raise_lr": "raise the learning rate in proportion to the examples per pack",
    "one_per_pack": "keep a single example per pack",
}
#: Book exercise 3 (c): with which position embeddings must position ids also restart per example?
POSITION_OPTIONS: dict[str, str] = {
    "learned_absolute": "learned absolute position embeddings (GPT-2, the chapter's TinyCausalLM)",
    "rotary": "rotary position embeddings (RoPE: Llama and its descendants)",
}
#: q4's answer keys, sealed (see _core.Sealed): (a) ...
_WASTE = Sealed("labsupport:ch04:q4:a", [
    "05b24c6ab945be78c3954b1d5aeef290dfff01cea153dbd7bc739d8435f8f5e7",
    "b553044edcd10490248436a4355b2c059528e7328d0d497977f7c56c2cd2e65c",
    "d597acc67aad89ce5177b7ec4bdbcaab01bbc2738b2cd4eaaf1b69b5870c6bf6",
])
#: ... (c) ...
_MUST_DO = Sealed("labsupport:ch04:q4:c", [
    "553568954a4592b99a97e6dc3e238c557afe0aaa5a7c102c4bc5caec0a741e7f",
    "981765e273f8d9efe3043d72e3475e6a664ce6c3aa7d0b49b286465501cba193",
])
#: ... and (c)'s position question.
_RESET_FOR = Sealed("labsupport:ch04:q4:c_reset", [
    "af4faf21f5d590ba29203c1cd611ffed3bb2c781157628a38204cf08b1e133f8",
])


summary = chapter_summary(CHAPTER)


def _number(value, what: str) -> float:
    expect(isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool),
           f"{what} must be a number, got {short(value)} ({type(value).__name__})")
    return float(value)


def _words_list(items: list[int]) -> str:
    if not items:
        return "nowhere"
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# --- q1: padding share --------------------------------------------------------------------------
def _near(a: Any, b: float) -> bool:
    try:
        return abs(float(a) - b) <= 1e-9
    except (TypeError, ValueError):
        return False


_Q1_SMALL = {"real_share": [([1], 4), ([1, 3], 4)], "percentage": [([1], 4), ([1, 3], 4)],
             "rows_of_longest": [([1, 3], 4)]}
_Q1 = Rules(
    Rule("real_share", wrong=lambda lengths, s: sum(lengths) / (len(lengths) * s)),
    Rule("percentage", wrong=lambda lengths, s: 100 * _padding_share(lengths, s)),
    Rule("rows_of_longest", wrong=lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths))),
    texts=TEXTS["q1"])


def _q1_facts(case: tuple, got: Any) -> dict[str, Any]:
    lengths, seq_length = case
    slots = len(lengths) * seq_length
    return {"call": f"padding_share({short(lengths, 200)}, {seq_length}) returned {short(float(got))}",
            "counts": f"{len(lengths)} row(s) of {seq_length} slots = {slots} slots, {sum(lengths)} of them real "
                      f"tokens, {slots - sum(lengths)} padding",
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
            expect(False, f"padding_share({short(lengths, 60)}, {seq_length}) returned {short(got)}, expected "
                   f"{short(want)}")
    got = _number(padding_share([300] * 1000, 4096), "padding_share([300]*1000, 4096)")
    expect(abs(got - (1 - 300 / 4096)) <= 1e-9, f"padding_share([300]*1000, 4096) returned {short(got)}, expected "
           f"{short(1 - 300 / 4096)}")
    return "41 random cases"


# --- q2: first-fit decreasing -------------------------------------------------------------------
def _bins_of(value: Any) -> list[list[int]] | None:
    """A learner's packing as lists of ints, or None when it is not one."""
    try:
        return [[int(i) for i in b] for b in value]
    except (TypeError, ValueError):
        return None


def _as_bins(value, n: int, call: str) -> list[list[int]]:
    expect(isinstance(value, (list, tuple)) or hasattr(value, "__iter__"),
           f"{call} must return a list of packs (lists of indices), got {type(value).__name__}")
    bins = _bins_of(value)
    expect(bins is not None, f"{call} must return a list of packs (lists of indices), got {short(value)}")
    flat = sorted(i for b in bins for i in b)
    expect(flat == list(range(n)), f"{call}: every index 0…{n - 1} must appear exactly once; got "
           f"{len(flat)} indices{' with repeats' if len(set(flat)) != len(flat) else ''}")
    expect(all(len(b) for b in bins), f"{call}: a pack is empty")
    return bins


def _fit_in_order(lengths: list[int], pack_size: int, order: list[int], best: bool = False) -> list[list[int]]:
    """Place the examples in ``order``: into the first pack with room (or the fullest, ``best``)."""
    packs: list[list[int]] = []
    room: list[int] = []
    for i in order:
        fits = [b for b, free in enumerate(room) if lengths[i] <= free]
        if not fits:
            packs.append([i])
            room.append(pack_size - lengths[i])
            continue
        b = min(fits, key=lambda p: room[p]) if best else fits[0]
        packs[b].append(i)
        room[b] -= lengths[i]
    return packs


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _num(value: float) -> str:
    """A number as a learner writes it: 14, not 14.0."""
    return short(int(value)) if float(value).is_integer() else short(value)


def _decreasing(lengths: list[int]) -> list[int]:
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


_Q2 = Rules(
    Rule("input_order", wrong=lambda lengths, p: _fit_in_order(lengths, p, list(range(len(lengths))))),
    Rule("shortest_first", wrong=lambda lengths, p: _fit_in_order(lengths, p, sorted(range(len(lengths)),
                                                                                      key=lambda i: (lengths[i], i)))),
    Rule("best_fit", wrong=lambda lengths, p: _fit_in_order(lengths, p, _decreasing(lengths), best=True)),
    texts=TEXTS["q2"])
_Q2_FIRST = {"best_fit": [([5, 3, 3, 1], 7)]}    # shown before the generated small problems


def _q2_small() -> Iterator[tuple[list[int], int]]:
    """Small packing problems, smallest first: 2…5 examples of 1…4 tokens, packs of 2…6."""
    for n in range(2, 6):
        for size in range(2, 7):
            for lengths in itertools.product(range(1, min(size, 4) + 1), repeat=n):
                yield list(lengths), size


def _pack_lengths_of(bins: Any, lengths: list[int]) -> list[list[int]] | None:
    bins = _bins_of(bins)
    try:
        return None if bins is None else [[lengths[i] for i in b] for b in bins]
    except IndexError:
        return None


def _first_fit_violation(bins: list[list[int]], lengths: list[int], pack_size: int) -> str:
    """In words: the first example (longest first) placed into a later pack while an earlier one had room."""
    where = {i: b for b, pack in enumerate(bins) for i in pack}
    filled = [0] * len(bins)
    for i in _decreasing(lengths):
        earlier = [b for b in range(where[i]) if filled[b] and pack_size - filled[b] >= lengths[i]]
        if earlier:
            return (f"example {i} ({_tokens(lengths[i])}) went into pack {where[i]}, though pack {earlier[0]}, "
                    f"before it, still had {pack_size - filled[earlier[0]]} free slots")
        filled[where[i]] += lengths[i]
    return ""


def _packs(fn: Callable) -> Callable:
    """``fn``'s packing as (the lengths it puts in each pack, its packs of indices): packings are compared by
    their lengths, so equally long examples may swap."""
    def packing(lengths: list[int], pack_size: int) -> tuple:
        out = fn(lengths, pack_size)
        return _pack_lengths_of(out, lengths), _bins_of(out)
    return packing


def _q2_facts(case: tuple, got: tuple) -> dict[str, Any]:
    (lengths, pack_size), (packs, bins) = case, got
    want = _fit_in_order(lengths, pack_size, _decreasing(lengths))
    first = bins[0][0] if bins and bins[0] else 0
    return {"call": f"first_fit_decreasing({short(lengths, 200)}, {pack_size}) returned {short(bins, 200)}: packs "
                    f"of lengths {short(packs, 200)}, first-fit decreasing gives "
                    f"{short(_pack_lengths_of(want, lengths), 200)}",
            "first": first, "first_tokens": _tokens(lengths[first]), "longest": want[0][0],
            "violation": _first_fit_violation(bins, lengths, pack_size)}


def _q2_mistake(fn: Callable, bins: list[list[int]], lengths: list[int], pack_size: int) -> None:
    right = _packs(lambda lengths, p: _fit_in_order(lengths, p, _decreasing(lengths)))
    explain(_packs(fn), [rule.but(wrong=_packs(rule.wrong)) for rule in _Q2.values()], (lengths, pack_size),
          (_pack_lengths_of(bins, lengths), bins), right, lambda a, b: a[0] == b[0],
          lambda rule: itertools.chain(_Q2_FIRST.get(rule.name, []), _q2_small()), _q2_facts)


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(first_fit_decreasing) -> str:
    rng = np.random.default_rng(check_seed())
    cases = 0
    for _ in range(60):
        pack_size = int(rng.integers(8, 200))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(0, 80))).tolist()
        call = f"first_fit_decreasing({short(lengths, 50)}, {pack_size})"
        bins = _as_bins(first_fit_decreasing(list(lengths), pack_size), len(lengths), call)
        over = [b for b in bins if sum(lengths[i] for i in b) > pack_size]
        expect(not over, f"{call}: a pack holds {sum(lengths[i] for i in over[0]) if over else 0} > {pack_size} tokens")
        want = _pack_lengths_of(_ffd(lengths, pack_size).tolist(), lengths)
        got = [[lengths[i] for i in b] for b in bins]
        if got != want:
            _q2_mistake(first_fit_decreasing, bins, lengths, pack_size)
            why = _first_fit_violation(bins, lengths, pack_size)
            expect(len(got) == len(want), f"{call}: {len(got)} packs, first-fit decreasing gives {len(want)}"
                   + (f"; {why}" if why else ""))
            expect(False, f"{call}: pack lengths {short(got, 80)}, expected {short(want, 80)}"
                   + (f"; {why}" if why else ""))
        cases += 1
    return f"{cases} random cases, same packs as NeMo's first_fit_decreasing"


# --- q3: position ids and the block mask -----------------------------------------------------------
def _as_array(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _documents(tokens: np.ndarray, eod: int, eod_starts: bool) -> np.ndarray:
    """Document number of every token: EOD ends its document, or (``eod_starts``, a mistake) starts the next."""
    is_eod = (np.asarray(tokens) == eod).astype(int)
    return np.cumsum(is_eod) if eod_starts else np.concatenate([[0], np.cumsum(is_eod[:-1])]).astype(int)


def _positions(doc: np.ndarray) -> np.ndarray:
    starts = np.array([np.flatnonzero(doc == doc[i])[0] for i in range(doc.size)], dtype=int)
    return np.arange(doc.size) - starts


def _block_mask(doc: np.ndarray) -> np.ndarray:
    """True = masked: the future, and every key of another document."""
    s = doc.size
    return np.triu(np.ones((s, s), dtype=bool), 1) | (doc[:, None] != doc[None, :])


def _right_positions(tokens, eod):
    return _positions(_documents(tokens, eod, eod_starts=False))


def _right_mask(tokens, eod):
    return _block_mask(_documents(tokens, eod, eod_starts=False))


_POSITIONS_FORMULA = ("position_ids[i] = i − (index of the first token of i's document); a document starts right "
                      "after an EOD")
_MASK_FORMULA = ("masked[i, j] = (j > i) or (doc[j] != doc[i]), doc[t] = the number of EODs before token t (an EOD "
                 "belongs to the document it ends); True = masked")
_Q3 = Rules(
    Rule("restart_at_eod",
         wrong=lambda t, e: _positions(_documents(t, e, eod_starts=True)),
         formula=_POSITIONS_FORMULA),
    Rule("no_restart", wrong=lambda t, e: np.arange(len(t)), formula=_POSITIONS_FORMULA),
    Rule("inverted", wrong=lambda t, e: ~_right_mask(t, e), formula=_MASK_FORMULA),
    Rule("causal_only", wrong=lambda t, e: np.triu(np.ones((len(t), len(t)), dtype=bool), 1), formula=_MASK_FORMULA),
    Rule("eod_cut_off", wrong=lambda t, e: _block_mask(_documents(t, e, eod_starts=True)), formula=_MASK_FORMULA),
    texts=TEXTS["q3"]
)
#: the smallest (tokens, eod) that shows each rule
_Q3_SMALL = {"restart_at_eod": ([1, 0, 1], 0), "no_restart": ([1, 0, 1], 0), "inverted": ([1, 1], 0),
             "causal_only": ([0, 1], 0), "eod_cut_off": ([1, 0], 0)}


def _span(doc: np.ndarray, d: int) -> str:
    where = np.flatnonzero(doc == d)
    return f"token {where[0]}" if where.size == 1 else f"tokens {where[0]}…{where[-1]}"


def _pair_words(tokens: np.ndarray, eod: int, i: int, j: int, masked: bool) -> str:
    """In words: what the learner's mask does with query i and key j, and where those tokens are."""
    doc = _documents(tokens, eod, eod_starts=False)
    does = f"your mask {'hides key' if masked else 'lets query'} {j if masked else i} " + \
           (f"from query {i}" if masked else f"see key {j}")
    if j > i:
        return f"{does}, which is in its future"
    if doc[i] == doc[j]:
        last = np.flatnonzero(doc == doc[i])[-1]
        ended = ", the EOD that ends it included" if tokens[last] == eod else ""
        return f"{does}, though both are in the same document ({_span(doc, doc[i])}{ended})"
    ends = np.flatnonzero(doc == doc[j])[-1]
    return (f"{does}, but key {j} is in an earlier document ({_span(doc, doc[j])}, ended by the EOD at {ends}) "
            f"and query {i} in another ({_span(doc, doc[i])})")


def _q3_positions_facts(case: tuple, pos: np.ndarray) -> dict[str, Any]:
    tokens, eod = case
    want = _right_positions(tokens, eod)
    first = int(np.flatnonzero(pos != want)[0])
    eods = np.flatnonzero(np.asarray(tokens) == eod).tolist()
    return {"call": f"positions_and_mask({short(np.asarray(tokens).tolist(), 200)}, eod_token={eod}) gave "
                    f"position_ids {short(pos.tolist(), 200)} (the EOD at {_words_list(eods)})",
            "want": short(want.tolist(), 200), "first": first, "first_position": int(pos[first])}


def _q3_mask_facts(case: tuple, mask: np.ndarray) -> dict[str, Any]:
    tokens, eod = case
    i, j = (int(v) for v in np.argwhere(mask != _right_mask(tokens, eod))[0])
    return {"call": f"positions_and_mask({short(np.asarray(tokens).tolist(), 200)}, eod_token={eod}): "
                    + _pair_words(np.asarray(tokens), eod, i, j, bool(mask[i, j])), "i": i}


def _q3_mistake(fn: Callable, part: int, got: np.ndarray, tokens: np.ndarray, eod: int) -> None:
    """Name a wrong ``part`` (0: the position ids, 1: the mask), on the smallest sequence that shows it."""
    names = ("restart_at_eod", "no_restart") if part == 0 else ("inverted", "causal_only", "eod_cut_off")

    def learner(t: np.ndarray, e: int) -> np.ndarray:
        out = _as_array(fn(t, e)[part])
        return out if part == 0 else out.reshape(len(t), len(t)).astype(bool)
    explain(learner, [_Q3[n] for n in names], (tokens, eod), got, _right_mask if part else _right_positions,
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
        expect(isinstance(out, tuple) and len(out) == 2, f"{call} must return (position_ids, attention_mask)")
        pos = _as_array(out[0])
        want_mask, _, want_pos = get_ltor_masks_and_position_ids(tokens, eod, True, True, False)
        want_mask, want_pos = want_mask.numpy()[0], want_pos.numpy()
        expect(pos.shape == (s,), f"{call}: position_ids has shape {short(pos.shape)}, expected ({s},)")
        if not np.array_equal(pos, want_pos):
            _q3_mistake(positions_and_mask, 0, pos, tokens, eod)
            first = int(np.flatnonzero(pos != want_pos)[0])
            expect(False, f"{call}: position_ids {short(pos.tolist(), 200)}, expected {short(want_pos.tolist(), 200)} "
                   f"(first difference at token {first})")
        if out[1] is None:                     # step 1 of 2: position ids first, the mask still to write
            mask_pending = True
            continue
        mask = _as_array(out[1])
        expect(mask.shape in ((s, s), (1, s, s)), f"{call}: attention_mask has shape {short(mask.shape)}, "
               f"expected ({s}, {s})")
        mask = mask.reshape(s, s)
        expect(mask.dtype == bool, f"{call}: attention_mask must be boolean (True = masked), got {mask.dtype}")
        if not np.array_equal(mask, want_mask):
            _q3_mistake(positions_and_mask, 1, mask, tokens, eod)
            i, j = (int(v) for v in np.argwhere(mask != want_mask)[0])
            expect(False, f"{call}: {_pair_words(tokens, eod, i, j, bool(mask[i, j]))} (row = query {i}, "
                   f"column = key {j})")
    expect(not mask_pending, "step 1 done: position_ids are right on all 50 random sequences. Now return the "
           "attention mask instead of None as the second value")
    return "50 random token sequences"


# --- q4: book exercise 3 -------------------------------------------------------------------------
#: Exercise 3's numbers: every example exactly 300 tokens, rows (packs) of 4096.
_EXAMPLE, _ROW = 300, 4096
_PER_PACK = _ROW // _EXAMPLE                       # 13 whole examples: 3900 real tokens in a packed row
_GAIN = _PER_PACK * _EXAMPLE / _EXAMPLE            # real tokens per row, packed / padded = 13
_Q4_FORMULA = ("examples per pack = ⌊4096 / 300⌋ = 13; gain = real tokens per packed row / per padded row = "
               "13 × 300 / 300 = 13")


_SHARE_FORMULA = "padding share = 1 − 300 / 4096 (a fraction of the slots)"
_Q4 = Rules(   # named by what the numbers are (see _Q4_SHOWS), so no wrong implementations
    _Q1["real_share"].but(   # q1's mistakes again, on exercise 3's numbers: the same question to ask
        wrong=None, symptom="(a) a_padding_share = {share}: that is 300 / 4096, the share of a row the example's own "
                            "tokens fill{also}",
        fix="Padding is the rest of the row: 1 − 300 / 4096.", formula=_SHARE_FORMULA),
    _Q1["percentage"].but(name="share_percentage", wrong=None,
                          symptom="(a) a_padding_share = {share_n}, a share above 1{also}",
                          fix="Give a fraction between 0 and 1, not a percentage.", formula=_SHARE_FORMULA),
    Rule("examples_over_row"),
    Rule("gain_over_row"),
    Rule("gain_counts_slots"),
    Rule("gain_upside_down"),
    formula=_Q4_FORMULA,
    texts=TEXTS["q4"])
#: (rule, the answer's field it is about, does (share s, examples per pack p, gain g) show it?), in this order
_Q4_SHOWS = (
    ("real_share", "a_padding_share", lambda s, p, g: abs(s - _EXAMPLE / _ROW) <= 1e-3),
    ("share_percentage", "a_padding_share", lambda s, p, g: abs(s - 100 * (1 - _EXAMPLE / _ROW)) <= 0.1),
    ("examples_over_row", "b_examples_per_pack", lambda s, p, g: p != _PER_PACK and p * _EXAMPLE > _ROW),
    ("gain_over_row", "b_speedup", lambda s, p, g: g != _GAIN and g * _EXAMPLE > _ROW * (1 + 1e-12)),
    ("gain_counts_slots", "b_speedup", lambda s, p, g: abs(g - _ROW / _EXAMPLE) <= 1e-3),
    ("gain_upside_down", "b_speedup", lambda s, p, g: 0 < g < 1),
)


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
    expect(isinstance(answer, dict), f"exercise_3() must return a dict, got {type(answer).__name__}")
    for key in ("a_padding_share", "a_wasted", "b_examples_per_pack", "b_speedup", "c_must_do",
                "c_reset_positions_for", "why"):
        expect(key in answer, f"missing key {key!r}")
    why = answer.get("why", "")
    share = _number(answer["a_padding_share"], "a_padding_share")
    per_pack = _number(answer["b_examples_per_pack"], "b_examples_per_pack")
    speedup = _number(answer["b_speedup"], "b_speedup")
    problems: list[tuple[str, str]] = []     # (field, message): every failing part, named at once

    def part(condition: bool, message: str, field: str = "") -> bool:
        if not condition:
            problems.append((field, message))
        return bool(condition)

    part(abs(share - (1 - _EXAMPLE / _ROW)) <= 0.01, f"(a) padding share {_num(share)}: for 300 real tokens in a "
         "row of 4096, what fraction of the row is padding?", "a_padding_share")
    wasted = set(answer["a_wasted"])
    if part(wasted <= set(WASTE_OPTIONS),
            f"(a) unknown keys {sorted(wasted - set(WASTE_OPTIONS))}; use {sorted(WASTE_OPTIONS)}"):
        part(same_set(wasted, _WASTE), "(a) some chosen items are not wasted, or something wasted is missing "
             "(is a padded example lost, or is its gradient wrong?)")
    part(per_pack == _PER_PACK, f"(b) {_num(per_pack)} examples per pack: how many *whole* 300-token examples fit "
         "4096 tokens? (an example is never cut to fill a pack)", "b_examples_per_pack")
    part(abs(speedup - _GAIN) <= 1e-9, f"(b) speed-up {_num(speedup)}: how many real tokens does a packed row of "
         "whole 300-token examples hold, against the 300 of a padded row?", "b_speedup")
    must = set(answer["c_must_do"])
    if part(must <= set(MUST_DO_OPTIONS), f"(c) unknown keys {sorted(must - set(MUST_DO_OPTIONS))}"):
        part(same_set(must, _MUST_DO), "(c) not the right set: what keeps each example's attention and loss exactly "
             "as if it were alone, with any position embedding?")
    reset_for = set(answer["c_reset_positions_for"])
    if part(reset_for <= set(POSITION_OPTIONS), f"(c) c_reset_positions_for: unknown keys "
            f"{sorted(reset_for - set(POSITION_OPTIONS))}; use {sorted(POSITION_OPTIONS)}"):
        part(same_set(reset_for, _RESET_FOR), "(c) c_reset_positions_for: with which position embedding does a "
             "document in the middle of a pack compute something else unless its positions restart? (the "
             "chapter's four TinyCausalLM runs and its rotary head)")
    part(isinstance(why, str) and len(why.split()) >= 5, "add a 'why' field: a few sentences for (a), (b) and (c)")
    _q4_mistake(share, per_pack, speedup, problems)
    with parts() as check_part:
        for _, text in problems:
            check_part(False, text)
    return "(a), (b), (c) correct. Compare your reasons with this model answer: " + MODEL_ANSWER_Q4, {"why": why}


#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = (
    "(a) A 300-token example in a 4096 row is ~93% padding: that compute, memory and throughput are spent on tokens "
    "with no loss. (b) 13 whole examples fit one pack (a 14th would need 4200 slots), so a packed row holds "
    "13 × 300 = 3900 real tokens against 300 padded: 13× the real tokens per step (4096/300 = 13.65 would need "
    "examples cut to fill the row). (c) Every example must see only itself: a block-diagonal attention mask (from "
    "cu_seqlens / the EOD boundaries) and no loss across the boundary; positions must restart per example when the "
    "model uses learned absolute positions (with rotary embeddings the mask alone gives the same result).")


# --- q5: the document pieces of a GPT sample ------------------------------------------------------
def _window(sizes: list[int], doc_idx: list[int], first: int, last: int) -> list[tuple[int, int, int]]:
    """The (document, start, stop) pieces of stream tokens [first, last)."""
    pieces, pos = [], 0
    for d in doc_idx:
        a, b = max(first - pos, 0), min(last - pos, sizes[d])
        if a < b:
            pieces.append((int(d), int(a), int(b)))
        pos += sizes[d]
        if pos >= last:
            break
    return pieces


def _sample_right(sizes, doc_idx, seq, k):
    return _window(sizes, doc_idx, k * seq, k * seq + seq + 1)


#: Small streams (sizes, doc_idx, S, k), smallest first, on which the recognised mistakes show.
_Q5_SMALL = [([8], [0], 2, 1), ([2, 3], [0, 1], 2, 0), ([2, 3], [1, 0], 2, 0), ([3, 3], [1, 0], 2, 1),
             ([5, 2, 7], [0, 1, 2], 4, 1), ([5, 2, 7], [2, 0, 1], 4, 1)]
_Q5_FORMULA = ("sample k reads stream tokens [k·S, k·S + S + 1); walk doc_idx, subtracting each document's length, "
               "and cut that range at the document boundaries into (document, start, stop), stop exclusive")


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
            near.append(f"document {d} at {pos}…{pos + sizes[d] - 1}")
        pos += sizes[d]
    return (f"sample {k} reads the {seq + 1} stream tokens {first}…{last}, where the stream (documents in doc_idx "
            f"order) holds " + ", ".join(near))


_Q5 = Rules(
    Rule("stride_s_plus_1",
         wrong=lambda sizes, doc_idx, seq, k: _window(sizes, doc_idx, k * (seq + 1), k * (seq + 1) + seq + 1)),
    Rule("s_tokens", wrong=lambda sizes, doc_idx, seq, k: _window(sizes, doc_idx, k * seq, k * seq + seq)),
    Rule("stop_inclusive",
         wrong=lambda sizes, doc_idx, seq, k: [(d, a, b - 1) for d, a, b in _sample_right(sizes, doc_idx, seq, k)]),
    Rule("ignores_doc_idx",
         wrong=lambda sizes, doc_idx, seq, k: _window(sizes, list(range(len(sizes))), k * seq, k * seq + seq + 1)),
    formula=_Q5_FORMULA,
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


#: Every named mistake of this chapter's checks, by question (see labsupport.check.rules).
RULES: dict[str, Rules] = {"q1": _Q1, "q2": _Q2, "q3": _Q3, "q4": _Q4, "q5": _Q5}


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
               f"{call} must return a list of (document, start, stop), got {short(got)}")
        got = _pieces(got)
        if got != want:
            explain(sample_documents, _Q5.values(), (sizes.tolist(), doc_idx.tolist(), seq, k), got, _sample_right,
                  lambda a, b: _pieces(a) == b, lambda rule: _Q5_SMALL, _q5_facts)
            n_tokens = sum(b - a for _, a, b in got)
            expect(False, f"{call} returned {short(got, 200)} ({n_tokens} tokens), expected {short(want, 200)}: "
                   + _stream_words(sizes.tolist(), doc_idx.tolist(), seq, k))
        cases += 1
    return f"{cases} random streams with repeated documents (epochs)"

