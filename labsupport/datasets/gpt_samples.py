"""Megatron GPT pre-training samples with document-boundary information (chapter 4, book §6.2.6).

Pre-training does not pad: Megatron-Core's ``GPTDataset`` concatenates the (shuffled) documents
of an ``IndexedDataset`` into one token stream and cuts it into samples of ``seq_length + 1``
tokens; consecutive samples share one token, so ``tokens = text[:-1]`` and ``labels = text[1:]``.
Documents end with an EOD token (``--append-eod`` in chapter 2), and the three flags
``reset_position_ids``, ``reset_attention_mask`` and ``eod_mask_loss`` decide whether a sample
that holds several documents treats them as one text or as separate ones (boundary masking).

This module reproduces megatron-core 0.16.1 exactly — same document index, sample index and
shuffle index for the same inputs and seed, same per-sample tokens, labels, loss mask and
position ids (``tests/crosscheck/test_packing.py``) — with one difference that is the point of
the chapter: the attention mask is returned in the compact *varlen* (THD) form ``cu_seqlens`` /
``max_seqlen`` instead of Megatron's dense ``[1, S, S]`` boolean matrix, which Megatron builds
in a Python loop per EOD and which dominates its sample time.  The dense matrix is rebuilt
exactly from ``cu_seqlens`` by :func:`attention_mask_from_cu_seqlens` whenever it is needed.

Conventions (Megatron's): attention masks are ``bool`` with **True = masked** (may not attend);
loss masks are float32 with 1 = counts in the loss; position ids are int64.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import torch
from labsupport.datasets.gpt_dataset_config import NO_PAD, GPTDatasetConfig
from labsupport.datasets.index_cache import Expected, corpus_identity
from labsupport.datasets.utils import normalize_index

__all__ = [
    "build_sample_idx", "build_document_index", "build_shuffle_index", "num_epochs_for",
    "get_ltor_masks_and_position_ids", "get_ltor_boundaries", "Boundaries",
    "attention_mask_from_cu_seqlens", "position_ids_from_cu_seqlens", "segment_ids_from_cu_seqlens",
    "document_boundaries", "pad_cu_seqlens", "GPTDataset",
]

_INT32_MAX = int(np.iinfo(np.int32).max)


# ------------------------------------------------------------------------------ sample index
def build_sample_idx(sizes: np.ndarray, doc_idx: np.ndarray, seq_length: int, num_epochs: int,
                     tokens_per_epoch: int, drop_last: bool = True,
                     add_extra_token: int = 1) -> np.ndarray:
    """Megatron's sample index: row k = (position in ``doc_idx``, token offset) where sample k starts.

    Equal to ``megatron.core.datasets.helpers.build_sample_idx`` (the C++ helper), vectorised:
    sample k covers tokens ``[k·S, k·S + S + extra)`` of the stream ``concat(sizes[doc_idx])``;
    row k+1 names the document holding that sample's *last* token and the offset of token
    ``(k+1)·S`` in it (so with ``extra = 1`` consecutive samples share one token).

    Args:
        sizes: int, shape (N,) — tokens per sequence of the indexed dataset.
        doc_idx: int, shape (M,) — the (shuffled, epoch-tiled) order of sequence indices.
        seq_length: S, tokens per sample (> 1).
        num_epochs: how many times ``doc_idx`` repeats the corpus (> 0).
        tokens_per_epoch: tokens of one epoch; ``num_epochs * tokens_per_epoch`` must equal the
            tokens in ``sizes[doc_idx]`` (Megatron reads past the end otherwise; here it is refused).
        drop_last: drop the last partial sample (training) or keep it (validation; Megatron then
            computes the count with a float32 ``ceil``, reproduced here).
        add_extra_token: 1 (default) draws S+1 tokens per sample, 0 draws S.

    Returns:
        shape (num_samples + 1, 2), int32 when ``max(len(doc_idx), sizes.max())`` fits int32,
        else int64 (the same choice as Megatron).
    """
    sizes = np.asarray(sizes)
    doc_idx = np.asarray(doc_idx)
    if sizes.ndim != 1 or doc_idx.ndim != 1:
        raise ValueError(f"sizes and doc_idx must be 1-D, got shapes {sizes.shape} and {doc_idx.shape}")
    if sizes.size == 0 or doc_idx.size == 0:
        raise ValueError("sizes and doc_idx must not be empty")
    if not (np.issubdtype(sizes.dtype, np.integer) and np.issubdtype(doc_idx.dtype, np.integer)):
        raise TypeError(f"sizes and doc_idx must be integer arrays, got {sizes.dtype} and {doc_idx.dtype}")
    seq_length, num_epochs, tokens_per_epoch = int(seq_length), int(num_epochs), int(tokens_per_epoch)
    extra = int(add_extra_token)
    if extra not in (0, 1):
        raise ValueError(f"add_extra_token must be 0 or 1 (or a bool), got {add_extra_token!r}")
    if seq_length <= 1:
        raise ValueError(f"seq_length must be > 1, got {seq_length}")
    if num_epochs <= 0:
        raise ValueError(f"num_epochs must be > 0, got {num_epochs}")
    if tokens_per_epoch <= 1:
        raise ValueError(f"tokens_per_epoch must be > 1, got {tokens_per_epoch}")
    if (sizes < 0).any():
        raise ValueError(f"sizes must be >= 0; sizes[{int(np.flatnonzero(sizes < 0)[0])}] is negative")
    bad = (doc_idx < 0) | (doc_idx >= sizes.size)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise IndexError(f"doc_idx[{j}] = {int(doc_idx[j])} is not a sequence index (0..{sizes.size - 1})")

    lens = sizes[doc_idx].astype(np.int64)
    starts = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    total = int(starts[-1])
    if num_epochs * tokens_per_epoch != total:
        raise ValueError(
            f"num_epochs × tokens_per_epoch = {num_epochs} × {tokens_per_epoch} = "
            f"{num_epochs * tokens_per_epoch}, but sizes[doc_idx] holds {total} tokens; pass the "
            "tokens of one epoch and a doc_idx that covers exactly num_epochs epochs")

    available = total - extra
    if drop_last:
        num_samples = available // seq_length
    else:  # helpers.cpp: ceil(float(...) / seq_length) in single precision
        num_samples = int(np.ceil(np.float32(available) / np.float32(seq_length)))

    dtype = np.int32 if max(doc_idx.size, int(sizes.max())) <= _INT32_MAX else np.int64
    out = np.zeros((num_samples + 1, 2), dtype=dtype)
    if num_samples == 0:
        return out
    k = np.arange(1, num_samples + 1, dtype=np.int64)
    boundary = k * seq_length                    # first token of sample k (= row k)
    last = boundary + (extra - 1)                # last token of sample k-1
    inside = last < total
    # the document holding token `last`: the last j with starts[j] <= last (skips empty documents)
    j = np.searchsorted(starts[:-1], last, side="right") - 1
    offset = boundary - starts[j.clip(0)]
    if not inside.all():                         # ran out of tokens: Megatron's "break" branch
        tail = lens.size - 1
        tail_offset = int(lens[tail]) - extra
        if tail_offset < 0:
            raise ValueError("the last document of doc_idx is empty and the last sample is partial; "
                             "Megatron would write a negative offset here (and fail its own check)")
        j = np.where(inside, j, tail)
        offset = np.where(inside, offset, tail_offset)
    out[1:, 0] = j
    out[1:, 1] = offset
    return out


def sample_segments(sizes: np.ndarray, doc_idx: np.ndarray, sample_idx: np.ndarray, k: int,
                    add_extra_token: int = 1) -> list[tuple[int, int, int]]:
    """The pieces of the document stream that sample k reads: ``[(document, start, stop), …]``.

    sizes: tokens per document; doc_idx: the document order (documents repeat once per epoch);
    sample_idx: :func:`build_sample_idx`'s rows.  Row k is where sample k starts and row k+1
    where it ends (the position of its last token, shared with sample k+1), so a sample reads
    ``S + add_extra_token`` tokens; ``stop`` is exclusive.

    >>> si = build_sample_idx(np.array([5, 2, 7], np.int32), np.array([0, 1, 2], np.int32), 4, 1, 14)
    >>> sample_segments(np.array([5, 2, 7]), np.array([0, 1, 2]), si, 1)
    [(0, 4, 5), (1, 0, 2), (2, 0, 2)]
    """
    k = int(k)
    if not 0 <= k < len(sample_idx) - 1:
        raise ValueError(f"sample {k} is out of range: sample_idx has {len(sample_idx)} rows = "
                         f"{len(sample_idx) - 1} samples (the last row only marks where the last one ends)")
    (beg, beg_off), (end, end_off) = (tuple(int(v) for v in sample_idx[k]), tuple(int(v) for v in sample_idx[k + 1]))
    stop = end_off + int(add_extra_token)
    if beg == end:
        return [(int(doc_idx[beg]), beg_off, stop)]
    out = [(int(doc_idx[beg]), beg_off, int(sizes[doc_idx[beg]]))]
    out += [(int(doc_idx[i]), 0, int(sizes[doc_idx[i]])) for i in range(beg + 1, end)]
    out.append((int(doc_idx[end]), 0, stop))
    return out


def num_epochs_for(num_samples: int | None, tokens_per_epoch: int, seq_length: int,
                   add_extra_token: int = 1) -> int:
    """Smallest E with ``E · tokens_per_epoch >= num_samples · S + extra`` (1 when num_samples is None)."""
    if num_samples is None:
        return 1
    if tokens_per_epoch <= 0:
        raise ValueError(f"the dataset holds no tokens (tokens_per_epoch={tokens_per_epoch})")
    needed = int(num_samples) * int(seq_length) + int(add_extra_token)
    return max(1, -(-needed // int(tokens_per_epoch)))


def build_document_index(documents: np.ndarray, num_epochs: int, rng: np.random.RandomState,
                         separate_final_epoch: bool) -> np.ndarray:
    """``documents`` tiled ``num_epochs`` times (int32) and shuffled with ``rng`` — Megatron's order.

    With ``separate_final_epoch`` the first E-1 epochs are shuffled together and the last on its
    own, drawing from ``rng`` in that order (so the shuffle index drawn next matches too).
    """
    documents = np.asarray(documents)
    if not separate_final_epoch or num_epochs == 1:
        index = np.tile(documents, num_epochs).astype(np.int32)
        rng.shuffle(index)
        return index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return np.concatenate((first, last))


def build_shuffle_index(num_samples: int, total_size: int, rng: np.random.RandomState) -> np.ndarray:
    """``arange(num_samples)`` shuffled, then ``arange(num_samples, total_size)`` shuffled apart.

    uint32 unless ``total_size`` needs more (then int64), as in Megatron.
    """
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


# ------------------------------------------------------------------------- masks and positions
def _as_token_array(tokens: Any) -> np.ndarray:
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D (one sample of S tokens), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("tokens must not be empty")
    return arr


@dataclass(frozen=True)
class Boundaries:
    """The compact (varlen / THD) boundary form of one sample of S tokens.

    ``cu_seqlens``: int32, shape (n_segments + 1,), 0 … S — segment k is tokens
    ``[cu[k], cu[k+1])`` and attends only inside itself (causally).  ``max_seqlen``: longest
    segment (int).  ``position_ids``: int64, shape (S,).  ``loss_mask``: float32, shape (S,).
    """

    cu_seqlens: torch.Tensor
    max_seqlen: int
    position_ids: torch.Tensor
    loss_mask: torch.Tensor


def _segment_starts(eod_positions: np.ndarray, seq_length: int) -> np.ndarray:
    """Token positions after each EOD that are still inside the sample (new segment starts)."""
    starts = eod_positions + 1
    return starts[starts < seq_length]


def _positions(seq_length: int, starts: np.ndarray) -> np.ndarray:
    """arange(S) minus the start of each token's segment (segments start at 0 and at ``starts``)."""
    mark = np.zeros(seq_length, dtype=np.int64)
    mark[starts] = starts
    return np.arange(seq_length, dtype=np.int64) - np.maximum.accumulate(mark)


def get_ltor_boundaries(tokens: Any, eod_token: int, reset_position_ids: bool,
                        reset_attention_mask: bool, eod_mask_loss: bool) -> Boundaries:
    """The compact form of :func:`get_ltor_masks_and_position_ids` for one sample (shape (S,)).

    ``cu_seqlens`` splits after every EOD token when ``reset_attention_mask`` (else it is
    ``[0, S]``: one causal segment); position ids restart after every EOD when
    ``reset_position_ids``; the loss mask is 0 on EOD tokens when ``eod_mask_loss``.
    ``attention_mask_from_cu_seqlens(b.cu_seqlens)`` equals Megatron's dense mask exactly.
    """
    arr = _as_token_array(tokens)
    s = arr.size
    is_eod = arr == eod_token
    loss_mask = np.ones(s, dtype=np.float32)
    if eod_mask_loss:
        loss_mask[is_eod] = 0.0
    starts = _segment_starts(np.flatnonzero(is_eod), s) if (reset_position_ids or reset_attention_mask) \
        else np.zeros(0, dtype=np.int64)
    position_ids = _positions(s, starts) if reset_position_ids else np.arange(s, dtype=np.int64)
    seg_starts = starts if reset_attention_mask else np.zeros(0, dtype=np.int64)
    cu = np.concatenate(([0], seg_starts, [s])).astype(np.int32)
    return Boundaries(torch.from_numpy(cu), int(np.diff(cu).max()),
                      torch.from_numpy(position_ids), torch.from_numpy(loss_mask))


def segment_ids_from_cu_seqlens(cu_seqlens: Any, seq_length: int | None = None) -> torch.Tensor:
    """int64, shape (S,): the segment number of every token (0 for ``[cu[0], cu[1])``, …)."""
    cu = _check_cu_seqlens(cu_seqlens, seq_length)
    return torch.from_numpy(np.repeat(np.arange(cu.size - 1, dtype=np.int64), np.diff(cu)))


def position_ids_from_cu_seqlens(cu_seqlens: Any, seq_length: int | None = None) -> torch.Tensor:
    """int64, shape (S,): positions restarting at 0 at every segment start (THD / varlen layout)."""
    cu = _check_cu_seqlens(cu_seqlens, seq_length)
    return torch.from_numpy(_positions(int(cu[-1]), cu[1:-1].astype(np.int64)))


def attention_mask_from_cu_seqlens(cu_seqlens: Any, seq_length: int | None = None) -> torch.Tensor:
    """Megatron's dense mask rebuilt from ``cu_seqlens``: bool, shape (1, S, S), True = masked.

    Query i may attend key j iff ``j <= i`` and both lie in the same segment (block-diagonal
    causal).  Costs S² bytes: the reason the fast path keeps ``cu_seqlens`` instead.
    """
    seg = segment_ids_from_cu_seqlens(cu_seqlens, seq_length)
    s = seg.numel()
    causal = torch.ones(s, s, dtype=torch.bool).tril_()
    allowed = causal & (seg[:, None] == seg[None, :])
    return (~allowed).unsqueeze(0)


def _check_cu_seqlens(cu_seqlens: Any, seq_length: int | None) -> np.ndarray:
    if isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = cu_seqlens.detach().cpu().numpy()
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    if cu.ndim != 1 or cu.size < 2:
        raise ValueError(f"cu_seqlens must be 1-D with at least 2 entries, got shape {cu.shape}")
    if cu[0] != 0 or (np.diff(cu) < 0).any():
        raise ValueError(f"cu_seqlens must start at 0 and not decrease, got {cu.tolist()[:12]}")
    if seq_length is not None and cu[-1] != seq_length:
        raise ValueError(f"cu_seqlens ends at {int(cu[-1])}, expected seq_length {seq_length}")
    return cu


def document_boundaries(piece_lengths: Sequence[int], seq_length: int, add_extra_token: int = 1
                        ) -> tuple[torch.Tensor, int, torch.Tensor]:
    """megatron-core 0.19's inter-document masking for one sample: boundaries from the *index*.

    ``piece_lengths``: the tokens the sample reads from each document it touches, in order
    (:func:`sample_segments`; S + ``add_extra_token`` tokens in all, fewer for a padded last
    sample).  The extra token belongs to the labels only, so it leaves the last piece (which
    disappears if nothing is left); padding is folded into the last document.  Returns
    ``(cu_seqlens, max_seqlen, position_ids)``: int32 (n+1,) from 0 to S, int, int64 (S,)
    restarting at every document — as ``GPTDataset.__getitem__`` computes them with
    ``GPTDatasetConfig(inter_document_masking=True)``, whatever ``reset_position_ids`` says.
    No EOD token is looked at: a corpus without ``--append-eod`` gets its boundaries too.
    """
    lengths = [int(n) for n in piece_lengths]
    if add_extra_token and lengths:
        lengths[-1] -= 1
        if lengths[-1] == 0:
            lengths.pop()
    shortfall = int(seq_length) - sum(lengths)
    if shortfall < 0:
        raise ValueError(f"the pieces hold {sum(lengths)} tokens, more than seq_length {seq_length}")
    if shortfall:
        if lengths:
            lengths[-1] += shortfall
        else:
            lengths.append(shortfall)
    cu = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    return torch.from_numpy(cu), int(np.diff(cu).max()), position_ids_from_cu_seqlens(cu, seq_length)


def pad_cu_seqlens(cu_seqlens: Any, length: int) -> torch.Tensor:
    """``cu_seqlens`` right-padded to ``length`` entries with its last value (megatron-core 0.19 pads to
    S + 1 so that ``default_collate`` can stack samples; ``flatten_batch_for_packed_sequences`` strips it)."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int32)
    if cu.numel() > length:
        raise ValueError(f"cu_seqlens has {cu.numel()} entries, more than {length}")
    out = torch.full((int(length),), int(cu[-1]), dtype=torch.int32)
    out[: cu.numel()] = cu
    return out


def get_ltor_masks_and_position_ids(tokens: Any, eod_token: int, reset_position_ids: bool,
                                    reset_attention_mask: bool, eod_mask_loss: bool
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's left-to-right masks for one sample of S tokens, vectorised.

    Returns ``(attention_mask, loss_mask, position_ids)``: bool (1, S, S) with True = masked
    (causal, and with ``reset_attention_mask`` no query after an EOD sees a key up to that
    EOD), float32 (S,) (0 on EOD tokens with ``eod_mask_loss``), int64 (S,) (restarting after
    every EOD with ``reset_position_ids``) — equal to megatron-core's
    ``_get_ltor_masks_and_position_ids(..., create_attention_mask=True)``.
    For the compact form use :func:`get_ltor_boundaries`.
    """
    b = get_ltor_boundaries(tokens, eod_token, reset_position_ids, reset_attention_mask, eod_mask_loss)
    return attention_mask_from_cu_seqlens(b.cu_seqlens), b.loss_mask, b.position_ids


# ----------------------------------------------------------------------------------- dataset
class _TokenSource(Protocol):
    sequence_lengths: np.ndarray

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray: ...


class GPTDataset:
    """Megatron-Core's GPTDataset over an indexed dataset, with compact boundary information.

    ``GPTDataset(ds, indices, num_samples, config)`` — megatron-core's ``GPTDataset(indexed_dataset,
    dataset_path, indexed_indices, num_samples, index_split, config)`` without the path and split
    names, ``config`` a :class:`~labsupport.datasets.gpt_dataset_config.GPTDatasetConfig` — draws
    the same document, sample and shuffle indices as ``megatron.core.datasets.gpt_dataset.GPTDataset``
    (one ``numpy.random.RandomState(config.seed)``, consumed in Megatron's order), so ``len(ds)``
    and ``ds[k]`` equal megatron-core's.

    ``ds[k]`` is a dict of torch tensors: ``tokens``, ``labels`` (int64, (S,)), ``loss_mask``
    (float32, (S,)), ``position_ids`` (int64, (S,)), ``cu_seqlens`` (int32, (n+1,)) and
    ``max_seqlen`` (int) — plus Megatron's dense ``attention_mask`` (bool, (1, S, S)) only when
    ``create_attention_mask=True``.

    Args:
        indexed_dataset: anything with ``sequence_lengths`` (int32, (N,)) and
            ``get(i, offset, length)`` — ``labsupport.datasets.indexed.IndexedDataset`` or megatron-core's.
        indices: the sequence indices this split exposes (None: all, ``arange(N)``).
        num_samples: samples wanted (the index may hold more: Megatron rounds up to whole epochs);
            None means one epoch.
        config: sample length, seed, EOD/pad ids, boundary flags (``GPTDatasetConfig``; with
            ``inter_document_masking``, ``cu_seqlens`` and position ids come from the documents'
            lengths in the index, :func:`document_boundaries`).
        cache: an :class:`~labsupport.datasets.index_cache.IndexCache` (chapter 6): load the
            three indices from its files when all exist and pass its checks — built from this
            corpus, each array of the dtype, shape, range and sha256 expected (``cache_hit`` is
            then True) — else build and save them there, under Megatron's names (a stale or
            damaged entry is rebuilt, saying so in one line on stderr).  None (default): build in memory.
            Per dataset, as its entry names the samples and split (Megatron derives it from the
            config's ``path_to_cache``).
    """

    SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80

    def __init__(self, indexed_dataset: _TokenSource, indices: np.ndarray | None, num_samples: int | None,
                 config: GPTDatasetConfig, *, cache: Any = None) -> None:
        if not isinstance(config, GPTDatasetConfig):
            raise TypeError(f"config must be a GPTDatasetConfig, got {type(config).__name__}")
        self.dataset = indexed_dataset
        self.config = config
        self.cache = cache
        self.cache_hit = False
        if num_samples is not None and int(num_samples) < 0:
            raise ValueError(f"num_samples must be >= 0 or None, got {num_samples}")
        self.num_samples = None if num_samples is None else int(num_samples)
        # the config's values as the index builders and __getitem__ use them
        self.seq_length, self.seed, self.eod_token = int(config.seq_length), int(config.seed), int(config.eod_token)
        self.reset_position_ids = bool(config.reset_position_ids)
        self.reset_attention_mask = bool(config.reset_attention_mask)
        self.eod_mask_loss = bool(config.eod_mask_loss)
        self.pad_token = NO_PAD if int(config.pad_token) == self.eod_token else int(config.pad_token)
        self.drop_last_partial_sequence = bool(config.drop_last_partial_sequence)
        self.extra = int(bool(config.add_extra_token))
        self.create_attention_mask = bool(config.create_attention_mask)
        self.inter_document_masking = bool(config.inter_document_masking)
        lengths = np.asarray(indexed_dataset.sequence_lengths)
        self.indices = (np.arange(lengths.size, dtype=np.int32) if indices is None
                        else np.asarray(indices, dtype=np.int32))
        if self.indices.size == 0:
            raise ValueError("the dataset exposes no sequences (indices is empty)")
        if (config.fast_cache_load or config.defer_npy_index_mmap) and cache is None:
            raise ValueError("fast_cache_load and defer_npy_index_mmap load indices an earlier run cached: give "
                             "cache=IndexCache(…) (megatron-core asserts --data-cache-path)")
        self._lengths = lengths
        self._plan(lengths)
        self._index_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if not config.defer_npy_index_mmap:      # deferred: the first sample opens the .npy files
            self._index_arrays = self._build_indices(lengths)

    # -- the three indices, in Megatron's RNG order
    @property
    def document_index(self) -> np.ndarray:
        """Document ids in epoch order (int32, (epochs·docs,))."""
        return self._loaded()[0]

    @property
    def sample_index(self) -> np.ndarray:
        """(document_index position, token offset) of each sample's start ((samples + 1, 2))."""
        return self._loaded()[1]

    @property
    def shuffle_index(self) -> np.ndarray:
        """The sample order (uint32 or int64, (samples,))."""
        return self._loaded()[2]

    def _loaded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._index_arrays is None:
            self._index_arrays = self._build_indices(self._lengths)
        return self._index_arrays

    def _plan(self, lengths: np.ndarray) -> None:
        """Epochs, tokens per epoch and the separate-final-epoch rule (megatron-core's arithmetic)."""
        s, extra = self.seq_length, self.extra
        tokens_per_epoch = int(lengths[self.indices].astype(np.int64).sum())
        if tokens_per_epoch <= 1:
            raise ValueError(f"the dataset holds {tokens_per_epoch} tokens; a sample needs more than one")
        num_epochs = num_epochs_for(self.num_samples, tokens_per_epoch, s, extra)
        separate = False
        sans_final = 0
        if num_epochs > 1:
            sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // s
            from_final = self.num_samples - sans_final
            per_epoch = (tokens_per_epoch - extra) // s
            separate = from_final < int(self.SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
        self.num_epochs = num_epochs
        self.tokens_per_epoch = tokens_per_epoch
        self.separate_final_epoch = separate
        self._sans_final = sans_final
        self._expected = self._expected_indices(lengths)

    def _build_indices(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, extra = self.seq_length, self.extra
        num_epochs, tokens_per_epoch = self.num_epochs, self.tokens_per_epoch
        separate, sans_final = self.separate_final_epoch, self._sans_final

        def build() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            rng = np.random.RandomState(self.seed)
            document_index = build_document_index(self.indices, num_epochs, rng, separate)
            sample_index = build_sample_idx(lengths.astype(np.int32, copy=False), document_index, s,
                                            num_epochs, tokens_per_epoch,
                                            self.drop_last_partial_sequence, extra)
            total = sample_index.shape[0] - 1
            shuffle_index = build_shuffle_index(sans_final if separate else total, total, rng)
            return document_index, sample_index, shuffle_index

        if self.cache is None:
            return build()
        if self.config.fast_cache_load or self.config.defer_npy_index_mmap:
            sizes = getattr(self.dataset, "sizes", None)
            arrays, _ = self.cache.trusted(self._expected, sizes() if callable(sizes) else None)
            if arrays is not None:
                self.cache_hit = True
                return arrays          # else the checked way below: it builds, or rebuilds and says why
        arrays, self.cache_hit = self.cache.fetch(build, corpus=corpus_identity(self.dataset),
                                                  expected=self._expected)
        return arrays

    def _expected_indices(self, lengths: np.ndarray) -> dict:
        """The dtype, shape and value range of each index as this dataset's description implies
        them (what a cached index must match before it is used)."""
        docs = self.num_epochs * int(self.indices.size)
        available = self.num_epochs * self.tokens_per_epoch - self.extra
        total = (available // self.seq_length if self.drop_last_partial_sequence
                 else int(np.ceil(np.float32(available) / np.float32(self.seq_length))))
        longest = int(lengths.max()) if lengths.size else 0
        sample_dtype = np.int32 if max(docs, longest) <= _INT32_MAX else np.int64
        shuffle_dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
        first, last = int(self.indices.min()), int(self.indices.max())
        return {"document_index": Expected(np.dtype(np.int32), (docs,), first, last),
                "sample_index": Expected(np.dtype(sample_dtype), (total + 1, 2), 0, max(docs - 1, longest)),
                "shuffle_index": Expected(np.dtype(shuffle_dtype), (total,), 0, max(total - 1, 0))}

    def __len__(self) -> int:
        if self._index_arrays is None:       # deferred: the arithmetic, as megatron-core's __len__ then
            return int(self._expected["shuffle_index"].shape[0])
        return self.sample_index.shape[0] - 1

    def text(self, idx: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``S + extra`` token ids of sample ``idx`` (int64, padded) and its sequence ids."""
        k = normalize_index(idx, len(self), "sample", "this GPTDataset")
        row = int(self.shuffle_index[k])
        beg, beg_off = (int(v) for v in self.sample_index[row])
        end, end_off = (int(v) for v in self.sample_index[row + 1])
        doc = self.document_index
        get = self.dataset.get
        if beg == end:
            parts = [get(int(doc[beg]), beg_off, end_off - beg_off + self.extra)]
        else:
            parts = [get(int(doc[beg]), beg_off)]
            parts.extend(get(int(doc[i])) for i in range(beg + 1, end))
            parts.append(get(int(doc[end]), 0, end_off + self.extra))
        want = self.seq_length + self.extra
        have = sum(p.size for p in parts)
        if have < want:  # the last partial sample of a validation split
            parts.append(np.full(want - have, self.pad_token, dtype=np.int64))
        return np.concatenate(parts, dtype=np.int64), doc[beg:end + 1].astype(np.int64)

    def piece_lengths(self, idx: int) -> list[int]:
        """Tokens sample ``idx`` reads from each document it touches (from the index; no token is read)."""
        row = int(self.shuffle_index[normalize_index(idx, len(self), "sample", "this GPTDataset")])
        return [stop - start for _, start, stop in sample_segments(
            np.asarray(self.dataset.sequence_lengths), self.document_index, self.sample_index, row, self.extra)]

    def token_reads(self, num_samples: int | None = None) -> np.ndarray:
        """How many times samples ``0 … num_samples−1`` (what a blend draws) read each document.

        Returns float64, shape (number of sequences of the indexed dataset,): for document d the
        tokens of d those samples contain, divided by d's length (0 for a document not exposed
        or empty).  Several epochs repeat every document's *text*, in other sample windows:
        Megatron shuffles all epochs' copies of the document list in one permutation (only a last
        epoch under 80 % full apart), so the windows that cut the stream differ from pass to pass
        (chapter 3's "epochs" column).  Consecutive samples share one
        boundary token, which is read twice.

        """
        n = len(self) if num_samples is None else int(num_samples)
        if not 0 <= n <= len(self):
            raise ValueError(f"num_samples must be in 0…{len(self)} (the samples of this dataset), got {num_samples}")
        lengths = np.asarray(self.dataset.sequence_lengths, dtype=np.int64)
        read = np.zeros(lengths.size, dtype=np.int64)
        doc = self.document_index
        for row in self.shuffle_index[:n]:
            beg, beg_off = (int(v) for v in self.sample_index[row])
            end, end_off = (int(v) for v in self.sample_index[row + 1])
            stop = end_off + self.extra
            if beg == end:
                read[doc[beg]] += stop - beg_off
                continue
            read[doc[beg]] += lengths[doc[beg]] - beg_off
            for i in range(beg + 1, end):
                read[doc[i]] += lengths[doc[i]]
            read[doc[end]] += min(stop, lengths[doc[end]])
        return np.divide(read, lengths, out=np.zeros(lengths.size), where=lengths > 0)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        text, _ = self.text(idx)
        if self.extra:
            tokens, labels = text[:-1].copy(), text[1:].copy()
        else:
            tokens, labels = text, np.roll(text, -1)
            labels[-1] = self.pad_token
        b = get_ltor_boundaries(tokens, self.eod_token, self.reset_position_ids,
                                self.reset_attention_mask, self.eod_mask_loss)
        loss_mask = b.loss_mask
        # Megatron always applies these three lines, with pad = -1 when there is no pad token
        # (that -1 is what fills a partial validation sample and the rolled label of extra=0).
        loss_mask[torch.from_numpy(labels == self.pad_token)] = 0.0
        tokens[tokens == self.pad_token] = 0
        labels[labels == self.pad_token] = 0
        sample: dict[str, Any] = {
            "tokens": torch.from_numpy(tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": loss_mask,
            "position_ids": b.position_ids,
            "cu_seqlens": b.cu_seqlens,
            "max_seqlen": b.max_seqlen,
        }
        if self.inter_document_masking:   # megatron-core ≥ 0.19: boundaries from the index, no dense mask
            cu, longest, positions = document_boundaries(self.piece_lengths(idx), self.seq_length, self.extra)
            sample.update(cu_seqlens=cu, max_seqlen=longest, position_ids=positions)
            return sample
        if self.create_attention_mask:
            sample["attention_mask"] = attention_mask_from_cu_seqlens(b.cu_seqlens)
        return sample

    def __repr__(self) -> str:
        flags = ",".join(f for f, on in (("reset_position_ids", self.reset_position_ids),
                                          ("reset_attention_mask", self.reset_attention_mask),
                                          ("eod_mask_loss", self.eod_mask_loss)) if on) or "no resets"
        return (f"GPTDataset({len(self)} samples of {self.seq_length} tokens, {self.num_epochs} "
                f"epoch(s), seed {self.seed}, {flags})")
