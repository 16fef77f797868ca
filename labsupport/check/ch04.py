"""Checks for chapter 4 (sequence packing and boundary masks): padding share, first-fit
decreasing, position ids and block mask from EOD positions, book exercise 3, and the document
pieces a GPT sample reads (a transfer exercise: the chapter prints the sample index, not this)."""
from __future__ import annotations

import numpy as np

from labsupport.datasets.bin_packing import best_fit_decreasing as _bfd
from labsupport.datasets.bin_packing import first_fit as _first_fit
from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.bin_packing import padding_share as _padding_share
from labsupport.datasets.gpt_samples import build_sample_idx, get_ltor_masks_and_position_ids, sample_segments
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, same_set, Sealed, short

CHAPTER = "ch04"

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


def _q1_mistake(got: float, lengths: list[int], seq_length: int) -> str:
    """A known wrong share, named: the real-token share, a percentage, or rows as long as the longest example."""
    want = _padding_share(lengths, seq_length)
    candidates = ((1 - want, " — that is the share of REAL tokens; padding is the rest"),
                  (100 * want, " — that is a percentage; return a fraction between 0 and 1"),
                  (1 - sum(lengths) / (len(lengths) * max(lengths)),
                   " — every row has seq_length slots, not the length of the longest example"))
    for value, text in candidates:
        if abs(value - want) > 1e-9 and abs(got - value) <= 1e-9:
            return text
    return ""


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the formula
    "every example takes a whole row of seq_length slots: which share of all the slots holds no real token? "
    "(chapter 4, 'Why pack: padding waste')",
    "count slots: n rows of seq_length slots each, of which the examples' own tokens fill sum(lengths); every "
    "other slot is padding. The share is padded slots over all slots — a fraction between 0 and 1.",
    "padding share = padded slots / all slots = 1 − sum(lengths) / (n × seq_length)."))
def q1(padding_share) -> str:
    rng = np.random.default_rng(check_seed())
    for _ in range(40):
        seq_length = int(rng.choice([128, 512, 2048, 4096]))
        lengths = rng.integers(1, seq_length + 1, int(rng.integers(1, 300))).tolist()
        got = _number(padding_share(list(lengths), seq_length), f"padding_share(…{len(lengths)} lengths…, {seq_length})")
        want = _padding_share(lengths, seq_length)
        if not abs(got - want) <= 1e-9:   # NaN fails too
            expect(False, f"padding_share({short(lengths, 60)}, {seq_length}) returned {got:.6f}, expected {want:.6f}"
                   + _q1_mistake(got, lengths, seq_length))
    got = _number(padding_share([300] * 1000, 4096), "padding_share([300]*1000, 4096)")
    expect(abs(got - (1 - 300 / 4096)) <= 1e-9, f"padding_share([300]*1000, 4096) returned {got:.4f}")
    return "41 random cases"


def _as_bins(value, n: int, call: str) -> list[list[int]]:
    expect(isinstance(value, (list, tuple)) or hasattr(value, "__iter__"),
           f"{call} must return a list of packs (lists of indices), got {type(value).__name__}")
    bins = [[int(i) for i in b] for b in value]
    flat = sorted(i for b in bins for i in b)
    expect(flat == list(range(n)), f"{call}: every index 0…{n - 1} must appear exactly once; got "
           f"{len(flat)} indices{' with repeats' if len(set(flat)) != len(flat) else ''}")
    expect(all(len(b) for b in bins), f"{call}: a pack is empty")
    return bins


def _pack_lengths(bins, lengths: list[int]) -> list[list[int]]:
    """A packing (lists of indices into ``lengths``) as the lengths it holds, pack by pack."""
    return [[lengths[i] for i in b] for b in bins.tolist()]


def _q2_mistake(got: list[list[int]], want: list[list[int]], lengths: list[int], pack_size: int) -> str:
    """A known wrong packing, named: first fit without sorting, increasing order, or best fit."""
    increasing = sorted(lengths)
    candidates = ((_pack_lengths(_first_fit(lengths, pack_size), lengths),
                   " — that is first fit in input order: take the examples longest first"),
                  (_pack_lengths(_first_fit(increasing, pack_size), increasing),
                   " — that is shortest first: first-fit DECREASING takes the longest first"),
                  (_pack_lengths(_bfd(lengths, pack_size), lengths),
                   " — that is best fit (the fullest pack with room); first fit takes the first pack that has room"))
    for packs, text in candidates:
        if packs != want and got == packs:
            return text
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 4's 'SFT packing in NeMo's layout': the two words of the name first-fit decreasing say in "
    "which order the examples come and which pack each one goes to",
    "decreasing: take the examples longest first (a stable order: equal lengths keep their index order); first "
    "fit: each goes into the earliest-opened pack that still has room — not the fullest or the emptiest one — "
    "and a new pack opens only when none has room",
    "sort the indices by decreasing length (ties: lower index first); put each into the "
    "first pack (in opening order) whose total + length <= pack_size, else open a new pack."))
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
        want = _pack_lengths(_ffd(lengths, pack_size), lengths)
        got = [[lengths[i] for i in b] for b in bins]
        if got != want:
            named = _q2_mistake(got, want, lengths, pack_size)
            expect(len(got) == len(want), f"{call}: {len(got)} packs, first-fit decreasing gives {len(want)}{named}")
            expect(False, f"{call}: pack lengths {short(got, 80)}, expected {short(want, 80)}{named}")
        cases += 1
    return f"{cases} random cases, same packs as NeMo's first_fit_decreasing"


def _as_array(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    return arr


def _documents(tokens: np.ndarray, eod: int, eod_starts: bool) -> np.ndarray:
    """Document number of every token: EOD ends its document, or (``eod_starts``, a mistake) starts the next."""
    is_eod = (tokens == eod).astype(int)
    return np.cumsum(is_eod) if eod_starts else np.concatenate([[0], np.cumsum(is_eod[:-1])]).astype(int)


def _q3_positions_mistake(pos: np.ndarray, tokens: np.ndarray, eod: int) -> str:
    """Named when the positions restart AT each EOD instead of after it."""
    doc = _documents(tokens, eod, eod_starts=True)
    starts = np.array([np.flatnonzero(doc == doc[i])[0] for i in range(doc.size)], dtype=int)
    wrong = np.arange(doc.size) - starts
    if np.array_equal(pos, wrong):
        return " — yours restart AT the EOD; the EOD is the last token of its document, restart right after it"
    return ""


def _q3_mask_mistake(mask: np.ndarray, tokens: np.ndarray, eod: int) -> str:
    """Named when the mask is the plain causal one, or puts each EOD into the next document."""
    s = tokens.size
    future = np.triu(np.ones((s, s), dtype=bool), 1)
    if np.array_equal(mask, future):
        return " — that is the plain causal mask: also mask the keys of earlier documents"
    doc = _documents(tokens, eod, eod_starts=True)
    if np.array_equal(mask, future | (doc[:, None] != doc[None, :])):
        return " — that puts each EOD into the next document; the EOD is the last token of its own document"
    return ""


@check(CHAPTER, "q3", hint=(
    "reread chapter 4's 'The masks, drawn': for a packed sample, where does a new document begin relative to "
    "its EOD token, and which keys may a query see?",
    "the EOD token is the LAST token of its document: the next document (and its positions, from 0) starts right "
    "after it. A query may see a key only if the key is not in its future and belongs to the same document; "
    "Megatron's mask marks the keys it may NOT see with True.",
    "positions restart at 0 right after each EOD; the mask is True (= masked) above the "
    "diagonal and, for every EOD at i, for rows > i and columns <= i (Megatron's reset flags)."))
def q3(positions_and_mask) -> str:
    rng = np.random.default_rng(check_seed())
    mask_pending = False
    for _ in range(50):
        s = int(rng.integers(1, 40))
        eod = int(rng.integers(0, 5))
        tokens = rng.integers(0, 5, s)
        call = f"positions_and_mask({short(tokens.tolist(), 60)}, eod_token={eod})"
        out = positions_and_mask(tokens.copy(), eod)
        expect(isinstance(out, tuple) and len(out) == 2, f"{call} must return (position_ids, attention_mask)")
        pos = _as_array(out[0])
        want_mask, _, want_pos = get_ltor_masks_and_position_ids(tokens, eod, True, True, False)
        want_mask, want_pos = want_mask.numpy()[0], want_pos.numpy()
        expect(pos.shape == (s,), f"{call}: position_ids has shape {pos.shape}, expected ({s},)")
        if not np.array_equal(pos, want_pos):
            expect(False, f"{call}: position_ids {pos.tolist()}, expected {want_pos.tolist()}"
                   + _q3_positions_mistake(pos, tokens, eod))
        if out[1] is None:                     # step 1 of 2: position ids first, the mask still to write
            mask_pending = True
            continue
        mask = _as_array(out[1])
        expect(mask.shape in ((s, s), (1, s, s)), f"{call}: attention_mask has shape {mask.shape}, expected ({s}, {s})")
        mask = mask.reshape(s, s)
        expect(mask.dtype == bool, f"{call}: attention_mask must be boolean (True = masked), got {mask.dtype}")
        if np.array_equal(mask, ~want_mask):
            expect(False, f"{call}: your mask is inverted — Megatron's convention is True = masked (may not attend)")
        bad = np.argwhere(mask != want_mask)
        if bad.size:
            expect(False, f"{call}: attention_mask differs at (query, key) = {tuple(bad[0])}"
                   + _q3_mask_mistake(mask, tokens, eod))
    expect(not mask_pending, "step 1 done: position_ids are right on all 50 random sequences. Now return the "
           "attention mask instead of None as the second value")
    return "50 random token sequences"


@check(CHAPTER, "q4", hint=(
    "reread chapter 4's 'Exercise 3, measured' for (a) and (b), and 'The contamination proof' with its rotary "
    "head for (c) (§6.2.6)",
    "(a) ~300 of 4096 slots hold real tokens; what is spent on the rest, and is anything lost or corrupted? "
    "(b) only whole examples go into a pack; real tokens per step grow by at most the ratio of the row to an "
    "example. (c) each example must be computed exactly as if alone; positions matter only where the model "
    "reads absolute positions.",
    "(a) ~300 of 4096 slots are real; (b) how many whole 300-token examples fit 4096 "
    "slots? tokens per step grow by about 4096/300; (c) what keeps an example's attention and loss inside it "
    "with any model — and when do the positions matter (the chapter's rotary head)? (§6.2.6)"))
def q4(exercise_3) -> tuple[str, dict[str, str]]:
    answer = exercise_3()
    expect(isinstance(answer, dict), f"exercise_3() must return a dict, got {type(answer).__name__}")
    for key in ("a_padding_share", "a_wasted", "b_examples_per_pack", "b_speedup", "c_must_do",
                "c_reset_positions_for", "why"):
        expect(key in answer, f"missing key {key!r}")
    why = answer.get("why", "")
    with parts() as part:  # name every failing part at once
        share = _number(answer["a_padding_share"], "a_padding_share")
        part(abs(share - (1 - 300 / 4096)) <= 0.01, f"(a) padding share {share:.3f}: for 300 real tokens in a row of "
             "4096, what fraction of the row is padding?"
             + (" (that is the REAL share, 300/4096)" if abs(share - 300 / 4096) <= 1e-3 else "")
             + (" (a fraction, not a percentage)" if abs(share - 100 * (1 - 300 / 4096)) <= 0.1 else ""))
        wasted = set(answer["a_wasted"])
        if part(wasted <= set(WASTE_OPTIONS), f"(a) unknown keys {sorted(wasted - set(WASTE_OPTIONS))}; use {sorted(WASTE_OPTIONS)}"):
            part(same_set(wasted, _WASTE), "(a) some chosen items are not wasted, or something wasted is missing "
                 "(is a padded example lost, or is its gradient wrong?)")
        per_pack = _number(answer["b_examples_per_pack"], "b_examples_per_pack")
        part(per_pack == 13, f"(b) {per_pack:g} examples per pack: how many *whole* 300-token examples fit 4096 "
             "tokens? (an example is never cut to fill a pack)")
        speedup = _number(answer["b_speedup"], "b_speedup")
        part(13.0 <= speedup <= 14.0, f"(b) speed-up {speedup:g}: real tokens per step, packed vs padded, is at most "
             "4096 / 300")
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
    return "(a), (b), (c) correct. Compare your reasons with this model answer: " + MODEL_ANSWER_Q4, {"why": why}


#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = (
    "(a) A 300-token example in a 4096 row is ~93% padding: that compute, memory and throughput are spent on tokens "
    "with no loss. (b) 13 whole examples fit one pack, so each step trains on ~13× the real tokens. (c) Every example "
    "must see only itself: a block-diagonal attention mask (from cu_seqlens / the EOD boundaries) and no loss across "
    "the boundary; positions must restart per example when the model uses learned absolute positions (with rotary "
    "embeddings the mask alone gives the same result).")


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


@check(CHAPTER, "q5", hint=(
    "reread chapter 4's 'Pre-training samples: Megatron's GPTDataset': which stream tokens does sample k read, "
    "and why does it read one more than seq_length?",
    "the documents, in doc_idx order, form one long token stream; sample k is a window of S + 1 stream tokens "
    "starting at k·S (consecutive samples share one token: the last input's label). Cut that window at the "
    "document boundaries it crosses, in stream order.",
    "sample k reads stream tokens k·S … k·S + S (S + 1 tokens: it shares its last token with "
    "sample k+1); walk doc_idx, subtracting each document's length, to find where that range starts and ends; "
    "each document it touches gives (document, start, stop) with stop exclusive."))
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
        expect(isinstance(got, (list, tuple)), f"{call} must return a list of (document, start, stop), got {short(got)}")
        got = [tuple(int(v) for v in piece) for piece in got]
        n_tokens = sum(b - a for _, a, b in got)
        expect(n_tokens == seq + 1 or got == want, f"{call} returned {got}: {n_tokens} tokens, but a sample reads "
               f"S + 1 = {seq + 1} (its last token is also the first of the next sample)")
        if got != want:
            s1 = seq + 1
            named = (" — samples overlap by one token: sample k starts at k·S, not k·(S + 1)"
                     if got == _window(sizes.tolist(), doc_idx.tolist(), k * s1, k * s1 + s1) else "")
            expect(False, f"{call} returned {got}, expected {want}{named}")
        cases += 1
    return f"{cases} random streams with repeated documents (epochs)"
