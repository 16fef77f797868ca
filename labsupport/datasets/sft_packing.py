"""Sequence packing with boundary masks — chapter 4 (시퀀스 패킹·경계 마스킹, book §6.2.6).

SFT packing: the NeMo-on-Kubernetes guide's ``{"input", "output"}`` jsonl → :func:`read_sft_jsonl` →
:func:`tokenize_sft` (loss mask on the answer only) → :func:`pack_sft` (which examples share a
pack is decided by :mod:`labsupport.datasets.bin_packing`) → :class:`PackedSFT` in NeMo's shape,
saved without pickle.  Pre-training samples and their boundary masks are in
:mod:`labsupport.datasets.gpt_samples`.

NeMo's packed SFT file (``prepare_packed_ft_dataset.py`` → ``fill_packing_strategy``) is an object
``.npy`` holding one dict per pack: ``input_ids`` (the pack's sequences back to back),
``loss_mask`` (per input token, 1 on answer tokens) and ``seq_start_id`` (where each sequence
starts).  Loading it needs ``allow_pickle=True``, i.e. running pickle on a data file.
:meth:`PackedSFT.save` writes the same content as flat arrays plus offsets in an ``.npz`` that
loads with ``allow_pickle=False``; :meth:`PackedSFT.to_nemo` returns NeMo's list of dicts, and
:meth:`PackedSFT.save_nemo_npy` writes NeMo's object ``.npy`` for those who need that file.

NeMo's convention for sizes is kept: a sequence of L tokens trains on L-1 (input, label)
pairs, so packs are filled by the *training* length L-1 and a pack of ``pack_size`` holds
sequences with ``sum(L_i - 1) <= pack_size`` (``create_hist`` subtracts one for the same reason).
"""
from __future__ import annotations

import zipfile
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np
import torch

from labsupport.datasets.utils import normalize_index
from labsupport.paths import shown_path
from labsupport.fileio import PathLike, atomic_open
from labsupport.datasets.bin_packing import lower_bound, pack
from labsupport.datasets.gpt_samples import position_ids_from_cu_seqlens

__all__ = ["SFTRecord", "SFTFormatError", "read_sft_jsonl", "FlatSequences", "TokenizedSFT", "tokenize_sft",
           "TOO_LONG_POLICIES", "PackedSFT", "pack_sft", "pad_seq_to_mult", "padded_cu_seqlens",
           "cuda_graph_cu_seqlens"]

TOO_LONG_POLICIES: tuple[str, ...] = ("error", "truncate", "split")
_FORMAT = "labsupport.packed_sft/1"


# ----------------------------------------------------------------------------------- reading
class SFTFormatError(ValueError):
    """A line of an SFT jsonl file is not a usable ``{"input", "output"}`` example."""


class SFTRecord(NamedTuple):
    """One example: its 1-based line number in the file, the prompt and the answer."""

    line: int
    input: str
    output: str


def _validate(obj: Any, where: str) -> tuple[str, str]:
    if not isinstance(obj, Mapping):
        raise SFTFormatError(f"{where}: expected a JSON object with 'input' and 'output', "
                             f"got {type(obj).__name__}")
    out = []
    for key in ("input", "output"):
        if key not in obj:
            raise SFTFormatError(f"{where}: field {key!r} is missing (keys: {sorted(obj)}); every "
                                 "example needs 'input' (the prompt) and 'output' (the answer)")
        value = obj[key]
        if not isinstance(value, str):
            raise SFTFormatError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise SFTFormatError(f"{where}: field {key!r} is empty; an empty example would train on "
                                 "nothing (or on an unanswered prompt) — fill it in or remove the line")
        out.append(value)
    return out[0], out[1]


def read_sft_jsonl(path: PathLike) -> list[SFTRecord]:
    """Read the SFT format of the NeMo-on-Kubernetes guide: one ``{"input": prompt, "output": answer}`` object per line.

    Refuses, naming file, line and field: invalid JSON, a non-object, a missing or non-string
    field, an empty (or whitespace-only) ``input``/``output``, and blank lines.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT file {shown_path(path)} not found")
    records: list[SFTRecord] = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            where = f"{shown_path(path)}, line {n}"
            if not line.strip():
                raise SFTFormatError(f"{where}: blank line; JSON Lines needs one object per line "
                                     "— delete the blank line")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SFTFormatError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            records.append(SFTRecord(n, *_validate(obj, where)))
    if not records:
        raise SFTFormatError(f"{shown_path(path)}: no examples")
    return records


# -------------------------------------------------------------------------------- tokenizing
class FlatSequences:
    """Tokenized sequences stored flat: sequence i is ``tokens[offsets[i]:offsets[i+1]]``.  The part
    :class:`TokenizedSFT` and :class:`labsupport.datasets.chat_sft.TokenizedChat` share (what
    :func:`pack_sft` reads beside ``tokens``, ``line`` and ``loss_mask()``)."""

    offsets: np.ndarray

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        """int64, shape (n,): tokens per sequence (L)."""
        return np.diff(self.offsets)

    @property
    def train_lengths(self) -> np.ndarray:
        """int64, shape (n,): (input, label) pairs per sequence, L − 1 — what a pack must hold."""
        return self.lengths - 1


@dataclass(frozen=True, eq=False)
class TokenizedSFT(FlatSequences):
    """Tokenized SFT examples, flat: example i is ``tokens[offsets[i]:offsets[i+1]]``.

    Each example is ``[bos] + prompt + answer + [eos]``; ``answer_start[i]`` is the index (inside
    the example) of its first answer token.  ``line[i]`` is the example's line in the source.
    Arrays: ``tokens`` int32 (T,), ``offsets`` int64 (n+1,), ``answer_start`` int64 (n,),
    ``line`` int64 (n,).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    answer_start: np.ndarray
    line: np.ndarray
    source: str = ""

    def example(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int32, (L,)) and the input-aligned loss mask (uint8, (L,)) of example i.

        The mask is 1 from the first answer token on (NeMo's ``idx >= answer_start_idx``).
        """
        i = normalize_index(i, len(self), "example", "this SFT set")
        ids = self.tokens[self.offsets[i]:self.offsets[i + 1]]
        mask = (np.arange(ids.size) >= self.answer_start[i]).astype(np.uint8)
        return ids, mask

    def loss_mask(self) -> np.ndarray:
        """uint8, shape (T,): the input-aligned loss mask of all examples, flat."""
        starts = np.repeat(self.offsets[:-1], self.lengths)
        pos = np.arange(self.tokens.size, dtype=np.int64) - starts
        return (pos >= np.repeat(self.answer_start, self.lengths)).astype(np.uint8)


def _special(tokenizer: Any, name: str) -> int:
    value = getattr(tokenizer, name, None)
    if value is None:
        value = getattr(tokenizer, f"{name}_id", None)
    if callable(value):
        value = value()
    if value is None or int(value) < 0:
        raise ValueError(f"the tokenizer defines no {name} id; pass {name}_id=... explicitly")
    return int(value)


def tokenize_sft(source: PathLike | Iterable[Mapping[str, str]] | Iterable[SFTRecord], tokenizer: Any, *,
                 separator: str = "\n", add_bos: bool = False, eos_id: int | None = None,
                 bos_id: int | None = None) -> TokenizedSFT:
    """Tokenize SFT examples: ``[bos] + encode(input + separator) + encode(output) + [eos]``.

    ``source`` is a jsonl path (read with :func:`read_sft_jsonl`), a list of
    :class:`SFTRecord`, or dicts with ``input``/``output`` (numbered 1, 2, … as lines).
    ``tokenizer`` needs ``encode(str) -> list[int]`` (``encode_batch`` is used when present) and
    an ``eos`` id (``labsupport.datasets.tokenizer.Tokenizer`` or a SentencePieceProcessor), unless
    ``eos_id`` is given.  The answer and the final EOS carry the loss; the prompt does not.
    Refuses (with the line) an answer that tokenizes to nothing.
    """
    name = ""
    if isinstance(source, (str, os.PathLike)):
        name = shown_path(source)
        records = read_sft_jsonl(source)
    else:
        records = []
        for n, item in enumerate(source, start=1):
            if isinstance(item, SFTRecord):
                records.append(item)
            else:
                records.append(SFTRecord(n, *_validate(item, f"example at line {n}")))
        if not records:
            raise SFTFormatError("no examples given")
    eos = int(eos_id) if eos_id is not None else _special(tokenizer, "eos")
    prefix = [int(bos_id) if bos_id is not None else _special(tokenizer, "bos")] if add_bos else []
    texts = [r.input + separator for r in records] + [r.output for r in records]
    if hasattr(tokenizer, "encode_batch"):
        encoded = tokenizer.encode_batch(texts)
    else:
        encoded = [list(tokenizer.encode(t)) for t in texts]
    n = len(records)
    parts: list[list[int]] = []
    answer_start = np.empty(n, dtype=np.int64)
    for i, rec in enumerate(records):
        prompt, answer = encoded[i], encoded[n + i]
        if not answer:
            where = f"{name}, line {rec.line}" if name else f"example at line {rec.line}"
            raise SFTFormatError(f"{where}: field 'output' tokenizes to no tokens; nothing to train on")
        answer_start[i] = len(prefix) + len(prompt)
        parts.append(prefix + list(prompt) + list(answer) + [eos])
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter((t for p in parts for t in p), dtype=np.int32, count=int(offsets[-1]))
    return TokenizedSFT(tokens, offsets, answer_start, np.array([r.line for r in records], dtype=np.int64), name)


# ----------------------------------------------------------------------------------- packing
@dataclass(frozen=True, eq=False)
class PackedSFT:
    """Packed SFT data in NeMo's shape, stored flat (no Python objects, no pickle).

    Pack k holds ``input_ids[pack_offsets[k]:pack_offsets[k+1]]`` (int32) with the same slice of
    ``loss_mask`` (uint8, per input token, 1 on answer tokens).  Its sequences are
    ``seq_offsets[k] .. seq_offsets[k+1]-1`` in the per-sequence arrays: ``seq_start_id`` (start
    inside the pack, NeMo's field), ``seq_example`` (which example), ``seq_chunk`` (0 unless the
    example was split), ``seq_line`` (its jsonl line).  ``pack_size`` bounds the training tokens
    of a pack: ``sum(L_i - 1) <= pack_size``.  ``stats`` records what the too-long policy did.
    """

    input_ids: np.ndarray
    loss_mask: np.ndarray
    pack_offsets: np.ndarray
    seq_start_id: np.ndarray
    seq_offsets: np.ndarray
    seq_example: np.ndarray
    seq_chunk: np.ndarray
    seq_line: np.ndarray
    pack_size: int
    algorithm: str
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.pack_offsets.size - 1

    def _check(self, k: int) -> int:
        return normalize_index(k, len(self), "pack", "this packed set")

    def seq_lengths(self, k: int) -> np.ndarray:
        """int64, (n_k,): tokens of each sequence of pack k (L_i)."""
        k = self._check(k)
        starts = self.seq_start_id[self.seq_offsets[k]:self.seq_offsets[k + 1]]
        size = int(self.pack_offsets[k + 1] - self.pack_offsets[k])
        return np.diff(np.append(starts, size))

    def cu_seqlens(self, k: int) -> np.ndarray:
        """int32, (n_k + 1,): cumulative training lengths of pack k, ``[0, L_1-1, …]`` (THD layout)."""
        lengths = self.seq_lengths(k)
        cu = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths - 1, out=cu[1:])
        return cu.astype(np.int32)

    def __getitem__(self, k: int) -> dict[str, np.ndarray]:
        """NeMo's per-pack dict — ``input_ids``, ``loss_mask``, ``seq_start_id`` — plus ``cu_seqlens``."""
        k = self._check(k)
        a, b = self.pack_offsets[k], self.pack_offsets[k + 1]
        return {"input_ids": self.input_ids[a:b], "loss_mask": self.loss_mask[a:b],
                "seq_start_id": self.seq_start_id[self.seq_offsets[k]:self.seq_offsets[k + 1]],
                "cu_seqlens": self.cu_seqlens(k)}

    def train_tokens(self) -> np.ndarray:
        """int64, (packs,): training tokens (sum of L_i − 1) in each pack."""
        lengths = np.diff(self.pack_offsets)
        return lengths - np.diff(self.seq_offsets)

    def efficiency(self) -> float:
        """Real training tokens / (packs × pack_size)."""
        return float(self.train_tokens().sum()) / (len(self) * self.pack_size) if len(self) else 0.0

    def training_view(self, k: int, pad_to: int | None = None, pad_id: int = 0) -> dict[str, Any]:
        """What the model consumes for pack k (NeMo's ``GPTSFTPackedDataset.collate_fn``, one row).

        ``tokens``/``labels`` (int64, (T,)): each sequence contributes ``ids[:-1]`` / ``ids[1:]``;
        ``loss_mask`` (float32, (T,)): label-aligned, 1 where the label is an answer token;
        ``position_ids`` (int64, (T,)): restart at 0 for every sequence; ``cu_seqlens`` (int32);
        ``max_seqlen`` (int).  ``pad_to`` appends padding up to that many tokens as a segment of
        its own with no loss (NeMo instead stretches the last segment over the padding).
        """
        item = self[k]
        ids = item["input_ids"].astype(np.int64)
        mask = item["loss_mask"]
        starts = item["seq_start_id"]
        ends = np.append(starts[1:], ids.size)
        keep_in = np.ones(ids.size, dtype=bool)
        keep_in[ends - 1] = False          # the last token of a sequence is never an input
        keep_lab = np.ones(ids.size, dtype=bool)
        keep_lab[starts] = False           # the first token of a sequence is never a label
        tokens, labels = ids[keep_in], ids[keep_lab]
        loss = mask[keep_lab].astype(np.float32)
        cu = item["cu_seqlens"].astype(np.int64)
        t = tokens.size
        if pad_to is not None and pad_to > t:
            extra = int(pad_to) - t
            tokens = np.concatenate([tokens, np.full(extra, pad_id, np.int64)])
            labels = np.concatenate([labels, np.full(extra, pad_id, np.int64)])
            loss = np.concatenate([loss, np.zeros(extra, np.float32)])
            cu = np.append(cu, int(pad_to))
        elif pad_to is not None and pad_to < t:
            raise ValueError(f"pad_to={pad_to} is shorter than pack {k} ({t} training tokens)")
        return {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels),
                "loss_mask": torch.from_numpy(loss),
                "position_ids": position_ids_from_cu_seqlens(cu),
                "cu_seqlens": torch.from_numpy(cu.astype(np.int32)),
                "max_seqlen": int(np.diff(cu).max())}

    # -- NeMo's object layout
    def to_nemo(self) -> list[dict[str, list[int]]]:
        """NeMo's ``fill_packing_strategy`` output: ``[{"input_ids", "loss_mask", "seq_start_id"}, …]``
        (Python lists; ``loss_mask`` as bools, as NeMo writes them).

        ``loss_mask[t]`` is ``t >= answer_start`` — NeMo's unpacked convention
        (``GPTSFTDataset._build_loss_mask``), so ``GPTSFTPackedDataset`` (which keeps
        ``loss_mask[start+1:end]`` per sequence) trains on the answer labels only.  NeMo's own
        fallback in ``fill_packing_strategy`` (when examples carry no ``loss_mask``) marks from
        ``answer_start_idx - 1``, which also trains on predicting the last prompt token.
        """
        out = []
        for k in range(len(self)):
            item = self[k]
            out.append({"input_ids": item["input_ids"].tolist(),
                        "loss_mask": item["loss_mask"].astype(bool).tolist(),
                        "seq_start_id": item["seq_start_id"].tolist()})
        return out

    def save_nemo_npy(self, path: PathLike) -> Path:
        """Write NeMo's packed ``.npy`` (an object array of dicts: **pickled**; NeMo loads it with
        ``np.load(path, allow_pickle=True)``).  Prefer :meth:`save` for anything else."""
        path = Path(path)
        arr = np.empty(len(self), dtype=object)
        arr[:] = self.to_nemo()
        with atomic_open(path) as fh:
            np.save(fh, arr, allow_pickle=True)
        return path

    # -- pickle-free storage
    def save(self, path: PathLike) -> Path:
        """Write an ``.npz`` of plain arrays (loads with ``allow_pickle=False``); atomic."""
        path = Path(path)
        arrays = {
            "format": np.array(_FORMAT), "pack_size": np.array(self.pack_size, dtype=np.int64),
            "algorithm": np.array(self.algorithm), "stats": np.array(json.dumps(self.stats, sort_keys=True)),
            "input_ids": self.input_ids, "loss_mask": self.loss_mask, "pack_offsets": self.pack_offsets,
            "seq_start_id": self.seq_start_id, "seq_offsets": self.seq_offsets,
            "seq_example": self.seq_example, "seq_chunk": self.seq_chunk, "seq_line": self.seq_line,
        }
        with atomic_open(path) as fh:
            np.savez(fh, **arrays)
        return path

    @classmethod
    def load(cls, path: PathLike) -> "PackedSFT":
        """Read a file written by :meth:`save` (never unpickles)."""

        path = Path(path)
        fmt: str | None = None
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt = str(z["format"]) if "format" in z.files else None
                if fmt == _FORMAT:
                    data = {k: z[k] for k in z.files}   # zipfile checks each array's CRC-32 here
        except FileNotFoundError:
            raise ValueError(f"{shown_path(path)}: no such packed SFT file; write it with PackedSFT.save") from None
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            raise ValueError(f"{shown_path(path)}: damaged or not a packed SFT file ({type(exc).__name__}: {first}); "
                             "write it again with PackedSFT.save") from None
        if fmt != _FORMAT:
            raise ValueError(f"{shown_path(path)}: not a labsupport packed SFT file (format {fmt!r}, "
                             f"expected {_FORMAT!r}); NeMo's object .npy is read with np.load("
                             "path, allow_pickle=True), not with PackedSFT.load")
        try:
            packed = cls(data["input_ids"], data["loss_mask"], data["pack_offsets"], data["seq_start_id"],
                         data["seq_offsets"], data["seq_example"], data["seq_chunk"], data["seq_line"],
                         int(data["pack_size"]), str(data["algorithm"]), json.loads(str(data["stats"])))
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"{shown_path(path)}: damaged packed SFT file ({type(exc).__name__}: {exc}); "
                             "write it again with PackedSFT.save") from None
        packed.validate(shown_path(path))
        return packed

    def validate(self, where: str = "packed SFT") -> None:
        """Check the invariants (offsets consistent, every pack within ``pack_size``); ValueError if not."""
        po, so = self.pack_offsets, self.seq_offsets
        if po.size != so.size or po[0] != 0 or so[0] != 0 or po[-1] != self.input_ids.size \
                or self.loss_mask.size != self.input_ids.size or so[-1] != self.seq_start_id.size:
            raise ValueError(f"{where}: offsets do not match the array sizes; the file is damaged")
        if (np.diff(po) < 0).any() or (np.diff(so) < 1).any():
            raise ValueError(f"{where}: offsets must increase and every pack must hold a sequence")
        over = np.flatnonzero(self.train_tokens() > self.pack_size)
        if over.size:
            raise ValueError(f"{where}: pack {int(over[0])} holds {int(self.train_tokens()[over[0]])} "
                             f"training tokens > pack_size {self.pack_size}")

    def __repr__(self) -> str:
        return (f"PackedSFT({len(self)} packs of {self.pack_size}, {self.seq_start_id.size} sequences, "
                f"{self.algorithm}, efficiency {self.efficiency():.4f})")


def pack_sft(data: TokenizedSFT, pack_size: int, algorithm: str = "first_fit_decreasing",
             too_long: str = "error") -> PackedSFT:
    """Pack tokenized SFT examples into packs of ``pack_size`` training tokens.

    ``data`` is a :class:`TokenizedSFT` or anything with its ``tokens``, ``offsets``, ``line``,
    ``lengths`` and ``loss_mask()`` — e.g. chat conversations,
    :class:`labsupport.datasets.chat_sft.TokenizedChat`.

    ``too_long`` — what to do with an example whose training length L−1 exceeds ``pack_size``
    (never a silent drop):

    ``"error"`` (default)  raise ValueError naming the lines and lengths;
    ``"truncate"``         keep its first ``pack_size + 1`` tokens (prompt first, so a long
                           prompt can push the answer out; NeMo 2.0's SFT dataset instead trims
                           the prompt and keeps the answer — ``truncation_field="input"``,
                           NVIDIA/NeMo ``gpt/data/core.py`` at 8cfedd7); the cut tokens are
                           counted in ``stats``;
    ``"split"``            cut it into chunks of ``pack_size + 1`` tokens that overlap by one
                           token, so every (input, label) pair survives exactly once; each chunk
                           is its own sequence (it does not see the chunks before it).

    Packs follow ``algorithm`` (see :data:`ALGORITHMS`); the sequences of a pack keep the order
    in which the algorithm placed them.
    """
    if too_long not in TOO_LONG_POLICIES:
        raise ValueError(f"too_long must be one of {TOO_LONG_POLICIES}, got {too_long!r}")
    pack_size = int(pack_size)
    if pack_size < 1:
        raise ValueError(f"pack_size must be >= 1, got {pack_size}")
    lengths = data.lengths
    flat_mask = data.loss_mask()
    if (lengths < 2).any():
        i = int(np.flatnonzero(lengths < 2)[0])
        raise ValueError(f"example at line {int(data.line[i])} has {int(lengths[i])} token(s); at least 2 "
                         "are needed for one (input, label) pair")
    limit = pack_size + 1                       # tokens of a sequence that fills a pack exactly
    long_ = np.flatnonzero(lengths > limit)
    stats = {"examples": len(data), "too_long": int(long_.size), "policy": too_long,
             "truncated": 0, "tokens_cut": 0, "truncated_without_answer": 0, "split_examples": 0,
             "chunks_from_splits": 0}
    if long_.size and too_long == "error":
        show = ", ".join(f"line {int(data.line[i])} ({int(lengths[i]) - 1} training tokens)" for i in long_[:5])
        raise ValueError(
            f"{long_.size} example(s) do not fit a pack of {pack_size} training tokens: {show}"
            f"{' …' if long_.size > 5 else ''}; choose too_long='truncate' or too_long='split'")

    # sequences = (example, start, stop) token ranges inside the example
    seq_example = [np.arange(len(data), dtype=np.int64)]
    seq_start = [np.zeros(len(data), dtype=np.int64)]
    seq_stop = [lengths.copy()]
    seq_chunk = [np.zeros(len(data), dtype=np.int32)]
    if long_.size and too_long == "truncate":
        seq_stop[0][long_] = limit
        stats["truncated"] = int(long_.size)
        stats["tokens_cut"] = int((lengths[long_] - limit).sum())
        # the kept part trains on labels 1..limit-1; without a masked-in one it carries no loss
        kept_loss = [bool(flat_mask[data.offsets[i] + 1:data.offsets[i] + limit].any()) for i in long_]
        stats["truncated_without_answer"] = kept_loss.count(False)
    elif long_.size and too_long == "split":
        keep = np.ones(len(data), dtype=bool)
        keep[long_] = False
        seq_example[0], seq_start[0], seq_stop[0], seq_chunk[0] = (
            seq_example[0][keep], seq_start[0][keep], seq_stop[0][keep], seq_chunk[0][keep])
        for i in long_.tolist():
            L = int(lengths[i])
            n_chunks = -(-(L - 1) // pack_size)
            starts = np.arange(n_chunks, dtype=np.int64) * pack_size
            seq_example.append(np.full(n_chunks, i, dtype=np.int64))
            seq_start.append(starts)
            seq_stop.append(np.minimum(starts + limit, L))
            seq_chunk.append(np.arange(n_chunks, dtype=np.int32))
            stats["chunks_from_splits"] += n_chunks
        stats["split_examples"] = int(long_.size)
    ex = np.concatenate(seq_example)
    st = np.concatenate(seq_start)
    sp = np.concatenate(seq_stop)
    ch = np.concatenate(seq_chunk)
    # stable order: by example, then chunk
    order = np.lexsort((ch, ex))
    ex, st, sp, ch = ex[order], st[order], sp[order], ch[order]

    bins = pack(sp - st - 1, pack_size, algorithm)
    seq_order = bins.items                      # sequences, pack by pack
    ex, st, sp, ch = ex[seq_order], st[seq_order], sp[seq_order], ch[seq_order]
    seq_len = sp - st
    # gather tokens: absolute ranges in data.tokens
    abs_start = data.offsets[ex] + st
    total = int(seq_len.sum())
    run_start = np.zeros(seq_len.size, dtype=np.int64)
    np.cumsum(seq_len[:-1], out=run_start[1:])
    gather = np.repeat(abs_start - run_start, seq_len) + np.arange(total, dtype=np.int64)
    input_ids = data.tokens[gather]
    loss_mask = flat_mask[gather]
    seq_offsets = bins.offsets.copy()
    pack_offsets = np.zeros(len(bins) + 1, dtype=np.int64)
    pack_offsets[1:] = np.add.reduceat(seq_len, bins.offsets[:-1]).cumsum() if len(bins) else []
    seq_start_id = run_start - np.repeat(pack_offsets[:-1], bins.sizes())
    stats.update({"sequences": int(seq_len.size), "packs": len(bins),
                  "lower_bound": lower_bound(seq_len - 1, pack_size)})
    packed = PackedSFT(input_ids, loss_mask, pack_offsets, seq_start_id, seq_offsets, ex, ch,
                       data.line[ex], pack_size, algorithm, stats)
    packed.validate()
    return packed


# ------------------------------------------------------------------ THD under context / sequence parallelism
# Megatron-Bridge v0.6.0: docs/training/packed-sequences.md (the rule), src/megatron/bridge/data/packing/gpt_sft.py
# (collate_fn: cu_seqlens_padded, pad_cu_seqlens) and packing/config.py (PackedSequenceSpecs).
def pad_seq_to_mult(context_parallel_size: int = 1, tensor_parallel_size: int = 1,
                    sequence_parallel: bool = False) -> int:
    """The multiple (tokens) each packed sequence's length is padded to: ``lcm(2·CP, CP·TP)``.

    Context parallelism splits every sequence into 2·CP chunks (load-balanced causal attention), so its length
    must divide by 2·CP when CP > 1; sequence parallelism splits the tokens over the CP·TP ranks, so with SP and
    TP > 1 it must also divide by CP·TP. Bridge's ``PackedSequenceSpecs.pad_seq_to_mult``."""
    cp, tp = int(context_parallel_size), int(tensor_parallel_size)
    if cp < 1 or tp < 1:
        raise ValueError(f"context_parallel_size={cp}, tensor_parallel_size={tp}: both must be >= 1")
    cp_multiple = 2 * cp if cp > 1 else 1
    sp_multiple = cp * tp if sequence_parallel and tp > 1 else 1
    return math.lcm(cp_multiple, sp_multiple)


def padded_cu_seqlens(seq_lengths: Iterable[int], multiple: int) -> np.ndarray:
    """Physical offsets (tokens, int32) of sequences each padded up to ``multiple``: Bridge's ``cu_seqlens_padded``.

    The logical ``cu_seqlens`` keep the real lengths (the loss and the attention see only those); the
    padded offsets say where each sequence starts in the pack once aligned."""
    lengths = np.asarray(list(seq_lengths), dtype=np.int64)
    if multiple < 1 or (lengths < 0).any():
        raise ValueError(f"multiple={multiple} must be >= 1 and lengths >= 0")
    aligned = -(-lengths // multiple) * multiple
    return np.concatenate([[0], np.cumsum(aligned)]).astype(np.int32)


def cuda_graph_cu_seqlens(cu_seqlens: Iterable[int], max_sequences_per_pack: int, pack_size: int) -> np.ndarray:
    """``cu_seqlens`` of one static shape, ``max_sequences_per_pack + 2`` entries, for CUDA graphs.

    A captured graph replays fixed shapes, so every pack gets the same number of boundaries: the missing ones
    are zero-length sequences at ``pack_size`` (Bridge's ``pad_cu_seqlens=True``, which also needs
    ``pad_to_max_length`` and the packing metadata's ``max_samples_per_bin``)."""
    cu = [int(x) for x in cu_seqlens]
    if not cu or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])) or cu[-1] > pack_size:
        raise ValueError(f"cu_seqlens {cu} must start at 0, not decrease and end <= pack_size={pack_size}")
    if cu[-1] != pack_size:
        cu.append(pack_size)             # trailing padding is one more sequence, as in Bridge's collate
    extra = max_sequences_per_pack + 2 - len(cu)
    if extra < 0:
        raise ValueError(f"{len(cu) - 1} sequences do not fit max_sequences_per_pack={max_sequences_per_pack}")
    return np.asarray(cu + [pack_size] * extra, dtype=np.int32)
