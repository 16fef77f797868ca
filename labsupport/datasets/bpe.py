"""Byte-level BPE from scratch — the teaching version of chapter 1 (tokenization, book §6.2.1).

Byte-pair encoding starts from the 256 byte values of UTF-8 text and repeatedly replaces the
most frequent adjacent pair of tokens by a new token.  Every merge adds one entry to the
vocabulary and shortens the sequence; decoding concatenates the bytes of each token, so the
round trip ``decode(encode(text)) == text`` is exact for any text.

This module is deliberately small and slow (pure Python, O(length × merges)); the real
tokenizer of the workbook is SentencePiece, see :mod:`labsupport.datasets.tokenizer`.

Tie rule used everywhere here (and by the chapter-1 exercise check): among pairs with the same
count, the pair that occurs *first* in the sequence wins — what ``max(counts, key=counts.get)``
gives for a dict filled left to right.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

Pair = tuple[int, int]

#: Ids 0..255 are the raw bytes; merge number k (0-based) creates id 256 + k.
N_BYTES = 256


def pair_counts(ids: Sequence[int]) -> Counter:
    """Counts of adjacent pairs ``(ids[i], ids[i+1])``, in order of first occurrence.

    Overlapping pairs are all counted: ``[7, 7, 7]`` gives ``{(7, 7): 2}``.
    """
    return Counter(zip(ids, ids[1:]))


def most_frequent_pair(ids: Sequence[int]) -> Pair | None:
    """The most frequent adjacent pair (ties → the one seen first); None when len(ids) < 2."""
    counts = pair_counts(ids)
    if not counts:
        return None
    return max(counts, key=counts.get)


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` by ``new_id``, scanning left to right.

    Occurrences do not overlap: ``merge([7, 7, 7], (7, 7), 9)`` → ``[9, 7]``.
    """
    a, b = pair
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_step(ids: Sequence[int], new_id: int) -> tuple[list[int], Pair | None]:
    """One BPE training step: find the most frequent pair and merge it into ``new_id``.

    Returns ``(new_ids, pair)``; with fewer than two tokens nothing can merge and the
    result is ``(list(ids), None)``.  The input is not modified.
    """
    pair = most_frequent_pair(ids)
    if pair is None:
        return list(ids), None
    return merge(ids, pair, new_id), pair


@dataclass
class ByteBPE:
    """A byte-level BPE tokenizer: 256 byte tokens plus the learned merges.

    ``merges[k] = (a, b)`` means token ``256 + k`` is the concatenation of tokens a and b.
    ``history[k]`` is the training sequence length (tokens) after k merges, so
    ``history[0]`` is the number of UTF-8 bytes of the training text.
    """

    merges: list[Pair] = field(default_factory=list)
    history: list[int] = field(default_factory=list)

    # -- training -------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, num_merges: int, min_count: int = 2) -> "ByteBPE":
        """Learn up to ``num_merges`` merges from ``text``.

        Training stops early when no pair occurs at least ``min_count`` times (merging a
        pair seen once saves a single token and only memorises the text).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if num_merges < 0:
            raise ValueError(f"num_merges must be >= 0, got {num_merges}")
        bpe = cls()
        ids = list(text.encode("utf-8"))
        bpe.history.append(len(ids))
        for k in range(num_merges):
            counts = pair_counts(ids)
            if not counts:
                break
            pair = max(counts, key=counts.get)
            if counts[pair] < min_count:
                break
            ids = merge(ids, pair, N_BYTES + k)
            bpe.merges.append(pair)
            bpe.history.append(len(ids))
        return bpe

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """256 byte tokens + one token per merge."""
        return N_BYTES + len(self.merges)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (raises ValueError for an unknown id)."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary 0..{self.vocab_size - 1}")
        table = self._table()
        return table[token_id]

    def _table(self) -> list[bytes]:
        table = [bytes([i]) for i in range(N_BYTES)]
        for a, b in self.merges:
            table.append(table[a] + table[b])
        return table

    # -- encode / decode ------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: UTF-8 bytes, then the merges applied in training order.

        At each round the pair with the lowest merge number present in the sequence is
        merged, which reproduces exactly what training did to the same text.
        """
        ids = list(text.encode("utf-8"))
        rank = {pair: k for k, pair in enumerate(self.merges)}
        while len(ids) >= 2:
            best = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, len(rank)))
            k = rank.get(best)
            if k is None:
                break
            ids = merge(ids, best, N_BYTES + k)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 (a cut sequence) become U+FFFD."""
        table = self._table()
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(table)]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary 0..{len(table) - 1}")
        data = b"".join(table[i] for i in ids)
        return data.decode("utf-8", errors="replace")

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Human-readable token strings (bytes shown with ``errors='backslashreplace'``)."""
        table = self._table()
        return [table[int(i)].decode("utf-8", errors="backslashreplace") for i in ids]
