"""Bin-packing algorithms for sequence packing (chapter 4, book §6.2.6).

NeMo's ``PACKING_ALGOS`` are ``first_fit_decreasing`` and ``first_fit_shuffle``
(NVIDIA/NeMo ``nemo/utils/sequence_packing_utils.py`` at 8cfedd7, 2025-09-20).

Sequence packing puts several short examples into one fixed-length training sequence; which
examples share a *pack* is a bin-packing problem: items = example lengths (tokens), bins = packs
of ``pack_size`` tokens, goal = as few packs as possible.  The lower bound is
``ceil(sum(lengths) / pack_size)``.

Algorithms (all return a :class:`Bins`, the item indices of every pack):

``first_fit``             items in the given order, each into the first pack with room (NeMo's
                          loop; its ``first_fit_shuffle`` runs it after ``np.random.shuffle``).
``first_fit_decreasing``  the same after sorting by decreasing length (NeMo's default); produces
                          exactly NeMo's packs (``tests/datasets/test_packing.py``), in O(groups × packs)
                          numpy work instead of NeMo's O(items × packs × pack contents) Python.
``best_fit_decreasing``   decreasing order, each item into the pack it fills most tightly (TRL's
                          ``strategy="bfd"``).
``spfhp``                 Graphcore's shortest-pack-first histogram packing (arXiv 2107.02027):
                          works on the length histogram, so its cost hardly grows with the
                          number of items.

Lengths are integers in ``1 … pack_size``; longer items are refused with their index (the SFT
layer in :mod:`labsupport.datasets.sft_packing` decides to truncate or split them first).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from labsupport.datasets.utils import normalize_index

__all__ = ["ALGORITHMS", "Bins", "pack", "packing_efficiency", "lower_bound", "padding_share",
           "first_fit", "first_fit_decreasing", "best_fit_decreasing", "spfhp"]

ALGORITHMS: tuple[str, ...] = ("first_fit", "first_fit_decreasing", "best_fit_decreasing", "spfhp")


@dataclass(frozen=True, eq=False)
class Bins(Sequence):
    """Packs as a sequence of index arrays, stored flat: pack b is ``items[offsets[b]:offsets[b+1]]``.

    ``items``: int64, shape (n,) — every item index exactly once, pack by pack, in the order the
    algorithm placed them.  ``offsets``: int64, shape (B+1,).  ``bins[b]`` is an int64 array,
    ``bins.tolist()`` a list of lists, ``len(bins)`` the number of packs.
    """

    items: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, b: Any) -> np.ndarray:  # type: ignore[override]
        if isinstance(b, slice):
            raise TypeError("slice a Bins with .tolist()[a:b]")
        b = normalize_index(b, len(self), "pack", "this packing")
        return self.items[self.offsets[b]:self.offsets[b + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for b in range(len(self)):
            yield self.items[self.offsets[b]:self.offsets[b + 1]]

    def tolist(self) -> list[list[int]]:
        """The packs as Python lists of item indices."""
        items = self.items.tolist()
        off = self.offsets.tolist()
        return [items[off[b]:off[b + 1]] for b in range(len(self))]

    def sizes(self) -> np.ndarray:
        """int64, shape (B,): items per pack."""
        return np.diff(self.offsets)

    def loads(self, lengths: Any) -> np.ndarray:
        """int64, shape (B,): tokens in each pack (sum of its items' lengths)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return np.add.reduceat(lengths[self.items], self.offsets[:-1]) if len(self) else np.zeros(0, np.int64)

    def bin_of(self) -> np.ndarray:
        """int64, shape (n,): the pack of every item (indexed by item)."""
        out = np.empty(self.items.size, dtype=np.int64)
        out[self.items] = np.repeat(np.arange(len(self), dtype=np.int64), self.sizes())
        return out

    @classmethod
    def from_lists(cls, bins: Sequence[Sequence[int]]) -> "Bins":
        """Bins from a list of lists of item indices (e.g. a learner's answer)."""
        sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
        offsets = np.zeros(len(bins) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        items = (np.concatenate([np.asarray(b, dtype=np.int64) for b in bins])
                 if len(bins) else np.zeros(0, np.int64))
        return cls(items, offsets)

    @classmethod
    def from_assignment(cls, bin_of_position: np.ndarray, item_at_position: np.ndarray) -> "Bins":
        """Bins from "the item placed at step t went to pack bin_of_position[t]" (kept in step order)."""
        order = np.argsort(bin_of_position, kind="stable")
        counts = np.bincount(bin_of_position, minlength=int(bin_of_position.max()) + 1 if bin_of_position.size else 0)
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(np.ascontiguousarray(item_at_position[order], dtype=np.int64), offsets)

    def __repr__(self) -> str:
        return f"Bins({len(self)} packs, {self.items.size} items)"


# ---------------------------------------------------------------------------------- checks
def _check_lengths(lengths: Any, pack_size: int) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one length per example), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"lengths must be integers (token counts), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    pack_size = int(pack_size)
    if pack_size < 1:
        raise ValueError(f"pack_size must be >= 1, got {pack_size}")
    if arr.size:
        small = np.flatnonzero(arr < 1)
        if small.size:
            i = int(small[0])
            raise ValueError(f"lengths[{i}] = {int(arr[i])}: every example needs at least 1 token; "
                             f"{small.size} such example(s) — remove them before packing")
        big = np.flatnonzero(arr > pack_size)
        if big.size:
            i = int(big[0])
            raise ValueError(
                f"lengths[{i}] = {int(arr[i])} exceeds pack_size {pack_size} ({big.size} example(s) "
                "too long); truncate or split them first, e.g. pack_sft(..., too_long='truncate'|'split')")
    return arr


def lower_bound(lengths: Any, pack_size: int) -> int:
    """The fewest packs any algorithm can reach: ``ceil(sum(lengths) / pack_size)``."""
    arr = np.asarray(lengths, dtype=np.int64)
    return int(-(-int(arr.sum()) // int(pack_size)))


def packing_efficiency(lengths: Any, bins: Sequence[Sequence[int]], pack_size: int) -> float:
    """Share of the packs' token slots holding real tokens: ``sum(lengths) / (len(bins) · pack_size)``.

    Uses only the items that appear in ``bins``; 1.0 means no padding at all.
    """
    arr = np.asarray(lengths, dtype=np.int64)
    if not isinstance(bins, Bins):
        bins = Bins.from_lists(bins)
    if len(bins) == 0:
        return 0.0
    return float(arr[bins.items].sum()) / (len(bins) * int(pack_size))


def padding_share(lengths: Any, seq_length: int) -> float:
    """Share of token slots that are padding when every example is padded to ``seq_length``.

    ``1 - sum(lengths) / (n · seq_length)``; lengths above ``seq_length`` are refused.
    """
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size == 0:
        raise ValueError("lengths is empty")
    if (arr > seq_length).any() or (arr < 0).any():
        i = int(np.flatnonzero((arr > seq_length) | (arr < 0))[0])
        raise ValueError(f"lengths[{i}] = {int(arr[i])} is outside 0..{seq_length}")
    return 1.0 - float(arr.sum()) / (arr.size * int(seq_length))


# ----------------------------------------------------------------------------- algorithms
def first_fit(lengths: Any, pack_size: int) -> Bins:
    """Each item, in the given order, into the first (oldest) pack that still has room.

    A max-segment-tree over pack capacities finds that pack in O(log n); packs not yet opened
    count as empty, so the first-fit pack is always found and new packs open in order.
    """
    arr = _check_lengths(lengths, pack_size)
    n = arr.size
    if n == 0:
        return Bins(np.zeros(0, np.int64), np.zeros(1, np.int64))
    size = 1 << max(0, (n - 1).bit_length())
    tree = [int(pack_size)] * (2 * size)
    bin_of = [0] * n
    for i, s in enumerate(arr.tolist()):
        node = 1
        while node < size:
            node <<= 1
            if tree[node] < s:
                node += 1
        bin_of[i] = node - size
        tree[node] -= s
        node >>= 1
        while node:
            a, b = tree[2 * node], tree[2 * node + 1]
            m = a if a > b else b
            if tree[node] == m:
                break
            tree[node] = m
            node >>= 1
    return Bins.from_assignment(np.asarray(bin_of, dtype=np.int64), np.arange(n, dtype=np.int64))


def _decreasing_groups(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items sorted by decreasing length (ties by index) and the [start, end) of each equal run."""
    order = np.argsort(-arr, kind="stable")
    sorted_len = arr[order]
    cuts = np.flatnonzero(sorted_len[1:] != sorted_len[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [arr.size]))
    return order, starts, ends


def _fill_new_bins(count: int, s: int, pack_size: int, first_bin: int, rem: np.ndarray,
                   out: np.ndarray) -> int:
    """Put ``count`` items of length ``s`` into fresh packs, greedily; returns packs opened."""
    per = pack_size // s
    if count <= per:                       # the common case: one new pack takes them all
        out[:] = first_bin
        rem[first_bin] = pack_size - count * s
        return 1
    nb = -(-count // per)
    out[:] = first_bin + np.arange(count, dtype=np.int64) // per
    rem[first_bin:first_bin + nb] = pack_size - per * s
    rem[first_bin + nb - 1] = pack_size - (count - per * (nb - 1)) * s
    return nb


def _decreasing_fit(arr: np.ndarray, pack_size: int, best: bool) -> Bins:
    n = arr.size
    if n == 0:
        return Bins(np.zeros(0, np.int64), np.zeros(1, np.int64))
    order, starts, ends = _decreasing_groups(arr)
    rem = np.empty(n, dtype=np.int64)     # remaining room of each opened pack
    n_bins = 0
    bin_at = np.empty(n, dtype=np.int64)  # pack of the item placed at step t
    min_len = int(arr.min())
    alive = np.zeros(0, dtype=np.int64)   # opened packs, minus some that cannot take any item
    lengths = arr[order[starts]].tolist()
    for g, (g0, g1) in enumerate(zip(starts.tolist(), ends.tolist())):
        s = lengths[g]
        k = g1 - g0
        placed = 0
        if alive.size:
            cand = alive[rem[alive] >= s]
            if cand.size:
                if best:  # tightest first: by remaining room, then pack number
                    cand = cand[np.argsort(rem[cand], kind="stable")]
                cap = rem[cand] // s           # items of length s each pack can still take
                if cap[0] >= k:                # the first candidate takes the whole group
                    cand, cap = cand[:1], cap[:1]
                    cap[0] = k
                else:
                    cum = np.cumsum(cap)
                    if cum[-1] >= k:
                        m = int(np.searchsorted(cum, k))
                        cand, cap = cand[:m + 1], cap[:m + 1]
                        cap[-1] = k - int(cum[m - 1])
                placed = int(cap.sum())
                bin_at[g0:g0 + placed] = np.repeat(cand, cap)
                rem[cand] -= cap * s
        if placed < k:
            opened = _fill_new_bins(k - placed, s, pack_size, n_bins, rem, bin_at[g0 + placed:g1])
            alive = np.concatenate((alive, np.arange(n_bins, n_bins + opened, dtype=np.int64)))
            n_bins += opened
        if g % 32 == 31:  # drop packs too full for even the shortest item
            alive = alive[rem[alive] >= min_len]
    return Bins.from_assignment(bin_at, order)


def first_fit_decreasing(lengths: Any, pack_size: int) -> Bins:
    """First fit after sorting by decreasing length (stable: equal lengths keep index order).

    Items of equal length are placed as a group: walking the packs in opening order, each pack
    with room r takes ``r // length`` of them — exactly what placing them one by one does.
    """
    return _decreasing_fit(_check_lengths(lengths, pack_size), int(pack_size), best=False)


def best_fit_decreasing(lengths: Any, pack_size: int) -> Bins:
    """Decreasing order; each item into the pack with the least room that still fits it.

    Ties between packs with equal room go to the older pack.  Grouped like
    :func:`first_fit_decreasing`: after an item goes into the tightest pack, that pack is still
    the tightest for the next item of the same length while it has room.
    """
    return _decreasing_fit(_check_lengths(lengths, pack_size), int(pack_size), best=True)


def spfhp(lengths: Any, pack_size: int, max_sequences_per_pack: int | None = None) -> Bins:
    """Shortest-pack-first histogram packing (Graphcore, arXiv 2107.02027).

    Walk the length histogram from the longest length down; the items of one length go, as many
    as fit, into the *emptiest* open strategy (a strategy = a multiset of lengths shared by
    ``count`` identical packs), splitting the strategy's count when fewer items remain; items
    that fit nowhere open one new strategy together.  Packs reaching
    ``max_sequences_per_pack`` (default: unlimited) or exactly full are closed.  Same strategies
    as Graphcore's ``pack_using_spfhp``; then the concrete item indices of each length are dealt
    out to the packs in index order.
    """
    arr = _check_lengths(lengths, pack_size)
    P = int(pack_size)
    limit = math.inf if max_sequences_per_pack is None else int(max_sequences_per_pack)
    if limit < 1:
        raise ValueError(f"max_sequences_per_pack must be >= 1, got {max_sequences_per_pack}")
    if arr.size == 0:
        return Bins(np.zeros(0, np.int64), np.zeros(1, np.int64))
    hist = np.bincount(arr, minlength=P + 1)
    open_: dict[int, list[list]] = {}   # remaining room → [[count, pack], ...] (pop from the end)
    keys: list[int] = []                # sorted rooms present in open_
    done: list[tuple[int, list[int]]] = []

    def add(pack: list[int], count: int, room: int) -> None:
        if len(pack) >= limit or room == 0:
            done.append((count, pack))
            return
        if room not in open_:
            open_[room] = []
            bisect.insort(keys, room)
        open_[room].append([count, pack])

    for length in range(P, 0, -1):
        todo = int(hist[length])
        while todo > 0:
            if keys and keys[-1] >= length:        # the emptiest strategy that fits
                room = keys[-1]
                entry = open_[room][-1]
                count, pack = entry
                used = min(count, todo)
                if count > todo:
                    entry[0] = count - todo
                else:
                    open_[room].pop()
                    if not open_[room]:
                        del open_[room]
                        keys.pop()
                todo -= used
                add(pack + [length], used, room - length)
            else:
                add([length], todo, P - length)
                todo = 0
    for room in keys:
        done.extend((c, p) for c, p in open_[room])

    # deal out concrete items: for each length, its indices in order
    by_len_order = np.argsort(arr, kind="stable")
    first_of_len = np.zeros(P + 2, dtype=np.int64)
    np.cumsum(np.bincount(arr, minlength=P + 1), out=first_of_len[1:])
    cursor = first_of_len[:-1].copy()
    total_packs = sum(c for c, _ in done)
    sizes = np.empty(total_packs, dtype=np.int64)
    items = np.empty(arr.size, dtype=np.int64)
    b = pos = 0
    for count, pack in done:
        width = len(pack)
        block = np.empty((count, width), dtype=np.int64)
        for col, length in enumerate(pack):
            c0 = cursor[length]
            block[:, col] = by_len_order[c0:c0 + count]
            cursor[length] = c0 + count
        items[pos:pos + count * width] = block.ravel()
        sizes[b:b + count] = width
        pos += count * width
        b += count
    offsets = np.zeros(total_packs + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return Bins(items, offsets)


_DISPATCH = {"first_fit": first_fit, "first_fit_decreasing": first_fit_decreasing,
             "best_fit_decreasing": best_fit_decreasing, "spfhp": spfhp}


def pack(lengths: Any, pack_size: int, algorithm: str = "first_fit_decreasing") -> Bins:
    """Pack items of the given lengths (tokens, 1…pack_size) into packs of ``pack_size`` tokens.

    ``algorithm`` is one of :data:`ALGORITHMS`.  Returns :class:`Bins` (item indices per pack).
    """
    try:
        fn = _DISPATCH[algorithm]
    except KeyError:
        raise ValueError(f"unknown packing algorithm {algorithm!r}; choose one of {ALGORITHMS}") from None
    return fn(lengths, pack_size)
