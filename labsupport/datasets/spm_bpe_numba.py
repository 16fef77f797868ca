"""SentencePiece's BPE merge loop compiled by numba — the word cache's engine for new words
(chapter 2's preprocessing, book §6.2.4).

The word cache (:mod:`labsupport.datasets.word_cache`) sends each word it has not seen yet
through BPE once.  Through ``SentencePieceProcessor.encode`` that costs about 1.7 µs a word
(measured on the standard library's code: new words average 15 characters), and on text the
cache has not seen much of — code, identifiers — it is the largest part of a worker's time (40%
with one worker on that corpus, profiled).  This module
runs the same merge loop over a whole batch of words in one compiled call: about 1 µs a word
(both measured on one thread).

The loop is ``bpe::Model::SampleEncode`` of SentencePiece (``src/bpe_model.cc``) with
dropout off, then the byte fallback / unknown-run handling of
``SentencePieceProcessor::PopulateSentencePieceText``:

1. The word is cut into characters; each becomes a symbol.
2. Every adjacent pair whose concatenation is a piece goes on a heap, keyed by the piece's
   score (highest first, then the leftmost pair; SentencePiece 0.2.3 puts a score of -0.0 below
   +0.0, :func:`_ordered_scores`).
3. Pop the best pair; skip it if either side has changed since it was pushed (SentencePiece
   compares the sizes); else merge the right symbol into the left one and push the new pairs
   with its left and right neighbours.  Repeat until the heap is empty.
4. Each remaining symbol is ``PieceToId(symbol)``; an unknown symbol becomes its UTF-8 bytes'
   ``<0xNN>`` pieces with byte fallback, and without it a run of unknown symbols is one ``<unk>``.

How the compiled loop does it:

- A symbol is an integer *key*: the index of its NORMAL piece when its text is one, else a key
  given to single characters that begin or end some piece, else -1 (never merges).  "Is the
  concatenation a piece?" is one lookup of the pair of keys in a hash table built once from
  the model's pieces (:class:`BpeTables`: every way to cut a piece into two keyed halves).
- Sizes are counted in characters instead of UTF-8 bytes: a symbol only ever grows, so both say
  "changed" at the same moments.
- A word of up to :data:`SCAN_MAX` characters (nearly all of them) keeps its symbols in a
  compact array with the score of each adjacent pair, and each step scans for the best pair
  (highest score, leftmost) — the pair the heap would pop, because the heap's valid entries are
  exactly the current adjacent pairs.  Longer words use the heap, as SentencePiece does.

Exact where the model has no USER_DEFINED or UNUSED piece (those need the prefix matcher and
re-segmentation; :func:`bpe_tables_problem` says so and the word cache keeps SentencePiece's
own encode).  :func:`labsupport.datasets.word_cache.bpe_engine_problem` also encodes every
piece of the vocabulary and a few thousand probe words both ways before the loop is used, and
``tests/datasets/test_spm_bpe_numba.py`` compares them on random Unicode for every normalization rule.
Fuzzed against SentencePiece 0.2.3 on about 5,000 trained and hand-edited models (tied, random,
denormal and signed-zero scores; pieces removed, reordered or made CONTROL; 2.8 M words): no
difference left once -0.0 is ordered below +0.0.
Starting it costs about 0.4 s once per process (importing numba, loading the compiled loop
from its on-disk cache, the self-check), so chapter 2's preprocessing uses it only on large
inputs (:data:`labsupport.datasets.preprocess.AUTO_NUMBA_BYTES_PER_WORKER`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from labsupport.datasets.numba_support import IMPORT_ERROR as _IMPORT_ERROR
from labsupport.datasets.numba_support import compile_cached as _compile
from labsupport.datasets.numba_support import numba

__all__ = ["BpeTables", "bpe_tables_problem", "build_bpe_tables", "encode_words", "numba_problem"]

_Piece = model_pb2.ModelProto.SentencePiece
#: Unicode code points (the dense per-character tables have one entry each).
_N_CODEPOINTS = 0x110000


@dataclass(frozen=True)
class BpeTables:
    """A BPE model's pieces as arrays for the compiled loop (:func:`build_bpe_tables`).

    ``char_key``: int32[0x110000], the key of each one-character symbol (-1: never merges).
    ``char_out``: int32[0x110000], ``PieceToId`` of each character (the unknown id for most).
    ``pair_keys``/``pair_vals``: the open-addressing hash table (int64 ``left * K + right`` → int32
    key of the merged piece; empty slots hold -1), ``len`` a power of two.
    ``score``: float64[K], each key's piece score in SentencePiece's order (:func:`_ordered_scores`;
    characters that are no piece: unused).
    ``out_id``: int32[K], ``PieceToId`` of each key's text.  ``byte_id``: int32[256] (``<0xNN>``
    pieces; unused without byte fallback).
    """

    char_key: np.ndarray
    char_out: np.ndarray
    pair_keys: np.ndarray
    pair_vals: np.ndarray
    n_keys: int
    score: np.ndarray
    out_id: np.ndarray
    unk_id: int
    byte_id: np.ndarray
    byte_fallback: bool


def numba_problem() -> str | None:
    """None when numba imports here; else why not (one line)."""
    return _IMPORT_ERROR


def bpe_tables_problem(model: model_pb2.ModelProto) -> str | None:
    """None when :func:`encode_words` reproduces the model's BPE; else why not (one line)."""
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    if model.trainer_spec.model_type != model_pb2.TrainerSpec.BPE:
        return "not a BPE model"
    kinds = {p.type for p in model.pieces}
    if _Piece.USER_DEFINED in kinds:
        return "the model has USER_DEFINED pieces (matched before BPE; left to SentencePiece)"
    if _Piece.UNUSED in kinds:
        return "the model has UNUSED pieces (re-segmented after BPE; left to SentencePiece)"
    if sum(p.type == _Piece.UNKNOWN for p in model.pieces) != 1:
        return "the model does not have exactly one <unk> piece"
    normal = {p.piece for p in model.pieces if p.type == _Piece.NORMAL}
    shadow = next((p.piece for p in model.pieces if p.type != _Piece.NORMAL
                   and (len(p.piece) == 1 or p.piece in normal)), None)
    if shadow is not None:  # SentencePiece gives such a symbol the reserved id and no surface
        return f"the reserved piece {shadow!r} is also text BPE can produce (left to SentencePiece)"
    bad = next((p for p in model.pieces if p.type == _Piece.NORMAL and not np.isfinite(p.score)), None)
    if bad is not None:
        return f"the piece {bad.piece!r} has the score {bad.score} (the compiled loop needs finite scores)"
    return None


def build_bpe_tables(model: model_pb2.ModelProto) -> BpeTables:
    """The arrays of :class:`BpeTables` from a model proto (``sentencepiece_model_pb2``).

    Mirrors SentencePiece's ``ModelInterface::InitializePieces``: NORMAL pieces are the ones BPE
    merges into; ``PieceToId`` looks at CONTROL, UNKNOWN and BYTE pieces first.  Raises
    ValueError when :func:`bpe_tables_problem` names a problem.
    """
    problem = bpe_tables_problem(model)
    if problem:
        raise ValueError(problem)
    reserved: dict[str, int] = {}
    normal: dict[str, int] = {}
    for i, p in enumerate(model.pieces):
        (normal if p.type == _Piece.NORMAL else reserved).setdefault(p.piece, i)
    unk_id = next(i for i, p in enumerate(model.pieces) if p.type == _Piece.UNKNOWN)

    def piece_to_id(text: str) -> int:
        return reserved.get(text, normal.get(text, unk_id))

    # keys: 0..P-1 the NORMAL pieces (in id order), then characters that begin or end a piece
    normal_ids = sorted(normal.values())
    key_of: dict[str, int] = {model.pieces[i].piece: k for k, i in enumerate(normal_ids)}
    scores = [model.pieces[i].score for i in normal_ids]
    for text in list(key_of):
        for c in (text[0], text[-1]) if len(text) > 1 else ():
            if c not in key_of:
                key_of[c] = len(key_of)
                scores.append(0.0)
    n_keys = len(key_of)
    pairs: dict[int, int] = {}
    for k, i in enumerate(normal_ids):
        text = model.pieces[i].piece
        for cut in range(1, len(text)):
            left, right = key_of.get(text[:cut]), key_of.get(text[cut:])
            if left is not None and right is not None:
                pairs[left * n_keys + right] = k
    size = 1 << max(4, (4 * len(pairs)).bit_length())
    pair_keys = np.full(size, -1, dtype=np.int64)
    pair_vals = np.full(size, -1, dtype=np.int32)
    if pairs:
        _fill_table(np.fromiter(pairs.keys(), np.int64, len(pairs)),
                    np.fromiter(pairs.values(), np.int32, len(pairs)), pair_keys, pair_vals)
    char_key = np.full(_N_CODEPOINTS, -1, dtype=np.int32)
    char_out = np.full(_N_CODEPOINTS, unk_id, dtype=np.int32)
    for text, k in key_of.items():
        if len(text) == 1:
            char_key[ord(text)] = k
    for p in model.pieces:
        if len(p.piece) == 1:
            char_out[ord(p.piece)] = piece_to_id(p.piece)
    out_id = np.full(n_keys, unk_id, dtype=np.int32)
    for text, k in key_of.items():
        out_id[k] = piece_to_id(text)
    byte_fallback = bool(model.trainer_spec.byte_fallback)
    byte_id = np.array([piece_to_id(f"<0x{b:02X}>") for b in range(256)], dtype=np.int32)
    return BpeTables(char_key, char_out, pair_keys, pair_vals, n_keys,
                     _ordered_scores(scores), out_id, unk_id, byte_id, byte_fallback)


def _ordered_scores(scores: Sequence[float]) -> np.ndarray:
    """Piece scores (float32 in the proto) as float64 that compare the way SentencePiece 0.2.3
    orders them: by value, except that -0.0 comes strictly below +0.0 (measured: a pair scored
    +0.0 is merged before one scored -0.0, and a trained BPE model gives its first merge -0.0; no
    float32 lies between -0.0 and the smallest negative one, so -1e-300 keeps every other order)."""
    out = np.asarray(scores, dtype=np.float32).astype(np.float64)
    out[(out == 0) & np.signbit(out)] = -1e-300
    return out


def _slot(key, mask):  # pragma: no cover - compiled
    """The first slot probed for ``key`` (Fibonacci hashing; ``mask`` = table size - 1)."""
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(32)) & mask


def _fill(keys, vals, table_keys, table_vals):  # pragma: no cover - compiled
    mask = table_keys.size - 1
    for j in range(keys.size):
        s = _slot(keys[j], mask)
        while table_keys[s] != -1:
            s = (s + 1) & mask
        table_keys[s] = keys[j]
        table_vals[s] = vals[j]


def _merged(left, right, n_keys, table_keys, table_vals):  # pragma: no cover - compiled
    """The key of the piece ``left + right`` (both keys), or -1 when it is no piece."""
    if left < 0 or right < 0:
        return -1
    key = np.int64(left) * n_keys + right
    mask = table_keys.size - 1
    s = _slot(key, mask)
    while True:
        k = table_keys[s]
        if k == key:
            return table_vals[s]
        if k == -1:
            return -1
        s = (s + 1) & mask


def _before(score_a, left_a, score_b, left_b):  # pragma: no cover - compiled
    """True when pair a leaves the heap before pair b: a higher score, then the leftmost
    (SentencePiece's ``SymbolPairComparator``)."""
    return score_a > score_b or (score_a == score_b and left_a < left_b)


def _move(heap_score, heap_left, heap_right, heap_size, heap_key, dst, src):  # pragma: no cover - compiled
    """Copy heap entry ``src`` to slot ``dst``."""
    heap_score[dst], heap_left[dst], heap_right[dst] = heap_score[src], heap_left[src], heap_right[src]
    heap_size[dst], heap_key[dst] = heap_size[src], heap_key[src]


def _push(heap_score, heap_left, heap_right, heap_size, heap_key, n, score, left, right, size, key):  # pragma: no cover
    """Push a pair onto a heap of ``n`` (the best pair at index 0); returns the new size."""
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(score, left, heap_score[parent], heap_left[parent]):
            break
        _move(heap_score, heap_left, heap_right, heap_size, heap_key, i, parent)
        i = parent
    heap_score[i], heap_left[i], heap_right[i], heap_size[i], heap_key[i] = score, left, right, size, key
    return n + 1


def _pop(heap_score, heap_left, heap_right, heap_size, heap_key, n):  # pragma: no cover - compiled
    """Remove the best pair (index 0) from a heap of ``n``; returns the new size."""
    n -= 1
    last = n  # the last entry sinks from the top to its place
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _before(heap_score[child + 1], heap_left[child + 1], heap_score[child], heap_left[child]):
            child += 1
        if not _before(heap_score[child], heap_left[child], heap_score[last], heap_left[last]):
            break
        _move(heap_score, heap_left, heap_right, heap_size, heap_key, i, child)
        i = child
    if n > 0:
        _move(heap_score, heap_left, heap_right, heap_size, heap_key, i, last)
    return n


def _merge_by_heap(key, size, prev, nxt, n, table_keys, table_vals, n_keys, scores,
                   h_score, h_left, h_right, h_size, h_key):  # pragma: no cover - compiled
    """Steps 2–3 of the module docstring with SentencePiece's heap (for long words)."""
    # 2. every adjacent pair that forms a piece
    h = 0
    for i in range(1, n):
        m = _merged(key[i - 1], key[i], n_keys, table_keys, table_vals)
        if m >= 0:
            h = _push(h_score, h_left, h_right, h_size, h_key, h, scores[m], i - 1, i, 2, m)
    # 3. merge the best pair until none is left
    while h > 0:
        left, right, total, m = h_left[0], h_right[0], h_size[0], h_key[0]
        h = _pop(h_score, h_left, h_right, h_size, h_key, h)
        if size[left] == 0 or size[right] == 0 or size[left] + size[right] != total:
            continue  # stale: a side merged since this pair was pushed
        key[left] = m
        size[left] = total
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        size[right] = 0
        p = prev[left]
        if p >= 0:
            m2 = _merged(key[p], m, n_keys, table_keys, table_vals)
            if m2 >= 0:
                h = _push(h_score, h_left, h_right, h_size, h_key, h, scores[m2], p, left, size[p] + total, m2)
        q = nxt[left]
        if q >= 0:
            m2 = _merged(m, key[q], n_keys, table_keys, table_vals)
            if m2 >= 0:
                h = _push(h_score, h_left, h_right, h_size, h_key, h, scores[m2], left, q, total + size[q], m2)


#: Words up to this many characters merge by scanning for the best pair (no heap).
SCAN_MAX = 48


def _merge_by_scan(c_key, c_start, n, p_score, p_key, table_keys, table_vals, n_keys, scores):  # pragma: no cover
    """Steps 2–3 of the module docstring for a short word, on compact arrays: ``c_key[j]`` and
    ``c_start[j]`` (first character) of the j-th symbol; ``p_key[j]``/``p_score[j]`` the piece
    that symbols j and j+1 would form (-1 / -inf: none).  Merge the best pair — highest score,
    leftmost — until none is left; returns the number of symbols.  The same choice as the
    heap's: its valid entries are exactly the current adjacent pairs."""
    m = n
    for j in range(m - 1):
        k = _merged(c_key[j], c_key[j + 1], n_keys, table_keys, table_vals)
        p_key[j] = k
        p_score[j] = scores[k] if k >= 0 else -np.inf
    while m > 1:
        best = 0
        best_score = p_score[0]
        for j in range(1, m - 1):
            if p_score[j] > best_score:
                best_score = p_score[j]
                best = j
        if best_score == -np.inf:
            break
        c_key[best] = p_key[best]
        for j in range(best + 1, m - 1):   # symbol best+1 and pair best go
            c_key[j] = c_key[j + 1]
            c_start[j] = c_start[j + 1]
            p_key[j - 1] = p_key[j]
            p_score[j - 1] = p_score[j]
        m -= 1
        for j in (best - 1, best):
            if 0 <= j < m - 1:
                k = _merged(c_key[j], c_key[j + 1], n_keys, table_keys, table_vals)
                p_key[j] = k
                p_score[j] = scores[k] if k >= 0 else -np.inf
    return m


def _encode(cps, word_ends, char_key, char_out, table_keys, table_vals, n_keys, scores, out_id,
            unk_id, byte_id, byte_fallback, out, out_ends):  # pragma: no cover - compiled
    """BPE of each word ``cps[word_ends[w-1]:word_ends[w]]`` (code points) into ``out``; the
    ids of word ``w`` end at ``out_ends[w]``.  Returns the number of ids written."""
    longest = 0
    start = 0
    for w in range(word_ends.size):
        longest = max(longest, word_ends[w] - start)
        start = word_ends[w]
    key = np.empty(longest + 1, np.int32)
    size = np.empty(longest + 1, np.int32)
    prev = np.empty(longest + 1, np.int32)
    nxt = np.empty(longest + 1, np.int32)
    c_key = np.empty(longest + 1, np.int32)
    c_start = np.empty(longest + 1, np.int64)
    p_key = np.empty(longest + 1, np.int32)
    p_score = np.empty(longest + 1, np.float64)
    cap = 3 * longest + 1
    h_score = np.empty(cap, np.float64)
    h_left = np.empty(cap, np.int32)
    h_right = np.empty(cap, np.int32)
    h_size = np.empty(cap, np.int32)
    h_key = np.empty(cap, np.int32)
    pos = 0
    start = 0
    for w in range(word_ends.size):
        end = word_ends[w]
        n = end - start
        # 1. one symbol per character; 2–3. merge
        if n <= SCAN_MAX:
            for i in range(n):
                c_key[i] = char_key[cps[start + i]]
                c_start[i] = start + i
            m = _merge_by_scan(c_key, c_start, n, p_score, p_key, table_keys, table_vals, n_keys, scores)
        else:
            for i in range(n):
                key[i] = char_key[cps[start + i]]
                size[i] = 1
                prev[i] = i - 1
                nxt[i] = i + 1
            nxt[n - 1] = -1
            _merge_by_heap(key, size, prev, nxt, n, table_keys, table_vals, n_keys, scores,
                           h_score, h_left, h_right, h_size, h_key)
            m = 0
            i = 0
            while i != -1:
                c_key[m] = key[i]
                c_start[m] = start + i
                m += 1
                i = nxt[i]
        c_start[m] = end
        # 4. ids: PieceToId, unknown symbols as bytes (byte fallback) or one <unk> per run
        prev_unk = False
        for j in range(m):
            a = c_start[j]
            b = c_start[j + 1]
            sid = char_out[cps[a]] if b - a == 1 else out_id[c_key[j]]
            is_unk = sid == unk_id
            if is_unk and byte_fallback:
                for i in range(a, b):
                    c = cps[i]
                    if c < 0x80:
                        out[pos] = byte_id[c]
                        pos += 1
                    elif c < 0x800:
                        out[pos] = byte_id[0xC0 | (c >> 6)]
                        out[pos + 1] = byte_id[0x80 | (c & 0x3F)]
                        pos += 2
                    elif c < 0x10000:
                        out[pos] = byte_id[0xE0 | (c >> 12)]
                        out[pos + 1] = byte_id[0x80 | ((c >> 6) & 0x3F)]
                        out[pos + 2] = byte_id[0x80 | (c & 0x3F)]
                        pos += 3
                    else:
                        out[pos] = byte_id[0xF0 | (c >> 18)]
                        out[pos + 1] = byte_id[0x80 | ((c >> 12) & 0x3F)]
                        out[pos + 2] = byte_id[0x80 | ((c >> 6) & 0x3F)]
                        out[pos + 3] = byte_id[0x80 | (c & 0x3F)]
                        pos += 4
            elif not (is_unk and prev_unk):
                out[pos] = sid
                pos += 1
            prev_unk = is_unk
        out_ends[w] = pos
        start = end
    return pos


if numba is not None:
    _slot = _compile(_slot)
    _merged = _compile(_merged)
    _before = _compile(_before)
    _move = _compile(_move)
    _push = _compile(_push)
    _pop = _compile(_pop)
    _merge_by_heap = _compile(_merge_by_heap)
    _merge_by_scan = _compile(_merge_by_scan)
    _fill_table = _compile(_fill)
    _encode_kernel = _compile(_encode)
else:  # pragma: no cover
    _fill_table = _encode_kernel = None


def encode_words(tables: BpeTables, words: Sequence[str],
                 escape_spaces: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """BPE of each word: ``(ids int32, ends int64)``, the ids of ``words[w]`` are
    ``ids[ends[w-1]:ends[w]]`` — exactly ``SentencePieceProcessor.encode(words[w])`` for a copy
    of the model with an identity normalizer (:func:`~labsupport.datasets.word_cache.normalization_free_proto`).
    The words are normalized text, spaces already "▁"; ``escape_spaces`` turns " " into "▁"
    first (what that copy's normalizer does).

        >>> ids, ends = encode_words(tables, ["▁the", "▁cat"])    # doctest: +SKIP
        >>> ids.tolist(), ends.tolist()                            # doctest: +SKIP
        ([312, 4211], [1, 2])

    Raises UnicodeEncodeError for a lone surrogate (SentencePiece refuses those too).
    """
    n = len(words)
    text = "".join(words)
    if escape_spaces:
        text = text.replace(" ", "\u2581")
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    word_ends = np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=n))
    out = np.empty(4 * cps.size, dtype=np.int32)
    out_ends = np.empty(n, dtype=np.int64)
    t = tables
    used = _encode_kernel(cps, word_ends, t.char_key, t.char_out, t.pair_keys, t.pair_vals, t.n_keys,
                          t.score, t.out_id, t.unk_id, t.byte_id, t.byte_fallback, out, out_ends)
    return out[:used], out_ends
