"""Megatron-compatible binary token datasets: write and memory-map ``.bin``/``.idx`` pairs.

Chapter 2 (binary indexing, book §6.2.3–6.2.4) builds and explains these files; chapters 3
(blending), 4 (packing) and 6 (end to end) read them.  The byte layout is Megatron-Core's
``MMIDIDX`` format (``megatron/core/datasets/indexed_dataset.py``), little-endian, no padding::

    .idx  offset  size  field
          0       9     magic b"MMIDIDX\\x00\\x00"
          9       8     <Q version (1)
          17      1     <B dtype code (see DType)
          18      8     <Q N = number of sequences
          26      8     <Q D = number of document indices (documents + 1, leading 0)
          34      4N    int32 sequence lengths (tokens)
          34+4N   8N    int64 sequence pointers (byte offsets into .bin)
          34+12N  8D    int64 document indices (document k = sequences [d[k], d[k+1]))
    .bin  the token ids of all sequences, back to back, in the dtype of the header

Files written by :class:`IndexedDatasetBuilder` are byte-identical to megatron-core's builder
for the same documents (``tests/crosscheck/test_indexed.py``), with three differences that only
ever refuse or add: ids that do not fit the dtype are refused (Megatron silently wraps them),
output appears under its final names only after :meth:`IndexedDatasetBuilder.finalize`, and a
sidecar ``<prefix>.json`` records where the tokens came from (megatron-core never reads it).
"""
from __future__ import annotations

import hashlib
import json
import mmap
import operator
import os
import struct
import uuid
from enum import IntEnum
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence, Union

import numpy as np
from labsupport.datasets.utils import DataError, normalize_index
from labsupport.fileio import PathLike

__all__ = [
    "MAGIC", "VERSION", "HEADER_SIZE", "DType", "optimal_dtype",
    "get_idx_path", "get_bin_path", "get_sidecar_path", "read_header", "IndexHeader",
    "IndexedDataset", "IndexedDatasetBuilder",
    "IndexedDatasetError", "BadMagicError", "UnsupportedVersionError", "UnknownDTypeError",
    "TruncatedIndexError", "BinSizeMismatchError", "CorruptIndexError",
]

#: The first 9 bytes of every ``.idx`` file.
MAGIC: bytes = b"MMIDIDX\x00\x00"
#: The only format version Megatron-Core writes and reads.
VERSION: int = 1
#: Bytes before the sequence lengths: magic 9 + version 8 + dtype code 1 + N 8 + D 8.
HEADER_SIZE: int = 34
#: Megatron's threshold: vocabularies smaller than this fit uint16 (with room for specials).
UINT16_VOCAB_LIMIT: int = 65500



class DType(IntEnum):
    """The dtype codes of the ``.idx`` header (same names and numbers as Megatron's ``DType``)."""

    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @property
    def numpy(self) -> np.dtype:
        """The little-endian numpy dtype of this code."""
        return np.dtype(self.name).newbyteorder("<")

    @classmethod
    def code_from_dtype(cls, dtype: Any) -> int:
        """Header code of a numpy dtype (``np.uint16`` → 8); ValueError for other dtypes."""
        try:
            name = np.dtype(dtype).name
            return int(cls[name])
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"dtype {dtype!r} has no MMIDIDX code; use one of {[m.name for m in cls]}"
            ) from exc

    @classmethod
    def dtype_from_code(cls, code: int) -> type:
        """numpy scalar type of a header code (8 → ``np.uint16``); ValueError for unknown codes."""
        try:
            return getattr(np, cls(code).name)
        except ValueError as exc:
            raise ValueError(f"unknown MMIDIDX dtype code {code}; known codes are "
                             f"{ {m.value: m.name for m in cls} }") from exc

    @staticmethod
    def size(key: Any) -> int:
        """Bytes per element of a header code or numpy dtype."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return np.dtype(DType.dtype_from_code(int(key))).itemsize
        return np.dtype(key).itemsize


def optimal_dtype(vocab_size: int | None) -> type:
    """Token dtype for a vocabulary: ``np.uint16`` below 65,500 ids, else ``np.int32``.

    Same rule as Megatron's ``DType.optimal_dtype`` (``None`` → int32).
    """
    if vocab_size is not None and vocab_size < UINT16_VOCAB_LIMIT:
        return np.uint16
    return np.int32


def get_idx_path(path_prefix: PathLike) -> str:
    """``prefix + ".idx"``."""
    return os.fspath(path_prefix) + ".idx"


def get_bin_path(path_prefix: PathLike) -> str:
    """``prefix + ".bin"``."""
    return os.fspath(path_prefix) + ".bin"


def get_sidecar_path(path_prefix: PathLike) -> str:
    """``prefix + ".json"``: the labsupport metadata file next to a ``.bin``/``.idx`` pair."""
    return os.fspath(path_prefix) + ".json"


def _prefix_of(idx_path: PathLike) -> str:
    p = os.fspath(idx_path)
    return p[:-4] if p.endswith(".idx") else p


# ----------------------------------------------------------------------------------- errors
class IndexedDatasetError(DataError):
    """A ``.bin``/``.idx`` pair that cannot be read; ``.path`` is the offending file."""

    def __init__(self, path: PathLike, message: str) -> None:
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {message}")


class BadMagicError(IndexedDatasetError):
    """The ``.idx`` does not start with ``MMIDIDX`` (not a Megatron index, or another impl)."""


class UnsupportedVersionError(IndexedDatasetError):
    """The ``.idx`` header has a version other than 1."""


class UnknownDTypeError(IndexedDatasetError):
    """The ``.idx`` header has a dtype code outside 1..8."""


class TruncatedIndexError(IndexedDatasetError):
    """The ``.idx`` is shorter (or longer) than its header says."""


class BinSizeMismatchError(IndexedDatasetError):
    """The ``.bin`` size disagrees with the sequence pointers and lengths of the ``.idx``."""


class CorruptIndexError(IndexedDatasetError):
    """The ``.idx`` arrays contradict each other (pointers vs lengths, document indices)."""


# ----------------------------------------------------------------------------------- header
class IndexHeader(NamedTuple):
    """The 34-byte ``.idx`` header, decoded."""

    version: int
    dtype_code: int
    num_sequences: int
    num_document_indices: int

    @property
    def dtype(self) -> np.dtype:
        return DType(self.dtype_code).numpy

    @property
    def expected_idx_size(self) -> int:
        """Bytes the ``.idx`` must have: 34 + 12·N + 8·D."""
        return HEADER_SIZE + 12 * self.num_sequences + 8 * self.num_document_indices


def read_header(idx_path: PathLike) -> IndexHeader:
    """Read and validate the header of an ``.idx`` file (not its arrays).

    Raises FileNotFoundError, BadMagicError, UnsupportedVersionError, UnknownDTypeError or
    TruncatedIndexError, each naming the file.
    """
    idx_path = os.fspath(idx_path)
    if not os.path.isfile(idx_path):
        raise FileNotFoundError(f"{idx_path}: index file not found (expected <prefix>.idx next to "
                                "<prefix>.bin; build it with `.venv/bin/python -m labsupport preprocess`)")
    with open(idx_path, "rb") as fh:
        head = fh.read(HEADER_SIZE)
    if len(head) < len(MAGIC) or head[: len(MAGIC)] != MAGIC:
        raise BadMagicError(
            idx_path,
            f"bad magic {head[:9]!r}, expected {MAGIC!r}: not a Megatron MMIDIDX index "
            "(Megatron says \"Index file doesn't match expected format\"); rebuild it with "
            "`.venv/bin/python -m labsupport preprocess`",
        )
    if len(head) < HEADER_SIZE:
        raise TruncatedIndexError(
            idx_path, f"truncated header: {len(head)} bytes, the header alone is {HEADER_SIZE}")
    version, code, n, d = struct.unpack("<QBQQ", head[9:HEADER_SIZE])
    if version != VERSION:
        raise UnsupportedVersionError(
            idx_path, f"index version {version} is not supported (only version {VERSION} exists)")
    if code not in DType._value2member_map_:
        raise UnknownDTypeError(
            idx_path, f"unknown dtype code {code} at byte 17; known codes are "
            f"{ {m.value: m.name for m in DType} }")
    return IndexHeader(version, code, n, d)


# ----------------------------------------------------------------------------------- reader
class IndexedDataset:
    """Memory-mapped reader of a ``<prefix>.bin``/``<prefix>.idx`` pair.

    ``len(ds)`` is the number of sequences N; ``ds[i]`` is sequence i as a read-only numpy
    array (a zero-copy view of the mmap'd ``.bin``, shape ``(sequence_lengths[i],)``, dtype of
    the header); ``ds[a:b]`` a list of them; ``ds.get(i, offset, length)`` a slice of one in
    tokens; ``ds.document(k)`` all tokens of document k.  Opening reads only the 34-byte
    header and maps the rest: memory use does not grow with the dataset.

    ``verify=True`` (default) also checks in O(N) that the pointers follow from the lengths
    and that the document indices are well formed; the O(1) checks (magic, version, dtype,
    file sizes) always run.  ``header`` (chapter 6's fast start, megatron-core's
    ``sequences_per_dataset``): the header as a JSON of counts gives it, so the ``.idx`` is not
    opened to read it — the file sizes are still checked against it (a stale JSON is refused).
    """

    def __init__(self, path_prefix: PathLike, *, verify: bool = True, header: IndexHeader | None = None) -> None:
        self._verify = verify
        self._given_header = header
        self._open(os.fspath(path_prefix))

    # -- opening / closing
    def _open(self, prefix: str) -> None:
        self.path_prefix = prefix
        self._identity: dict | None = None
        idx_path, bin_path = get_idx_path(prefix), get_bin_path(prefix)
        if not os.path.isfile(bin_path):
            raise FileNotFoundError(f"{bin_path}: data file not found (expected next to "
                                    f"{os.path.basename(idx_path)}; was the dataset finalized?)")
        header = read_header(idx_path) if self._given_header is None else self._given_header
        self.header = header
        n, d = header.num_sequences, header.num_document_indices
        promise = "the header promises" if self._given_header is None else "the sequences-per-dataset JSON says"
        stale = "" if self._given_header is None else " (or the JSON is stale: build it again)"
        if self._given_header is not None and not os.path.isfile(idx_path):
            raise FileNotFoundError(f"{idx_path}: index file not found (the sequences-per-dataset JSON names it)")
        idx_size = os.path.getsize(idx_path)
        expected = header.expected_idx_size
        if idx_size < expected:
            raise TruncatedIndexError(
                idx_path, f"truncated: {promise} {n} sequences and {d} document "
                f"indices = {expected} bytes, the file has {idx_size}; rebuild the dataset{stale}")
        if idx_size == expected + n and n > 0:
            raise IndexedDatasetError(
                idx_path, f"{n} extra bytes after the document indices: this looks like a "
                "multimodal index (one int8 mode per sequence), which labsupport does not read")
        if idx_size != expected:
            raise TruncatedIndexError(
                idx_path, f"size {idx_size} bytes, but {promise} {n} sequences and "
                f"{d} document indices = {expected} bytes; the file is damaged{stale}")
        self._dtype = header.dtype
        self._itemsize = self._dtype.itemsize
        self._idx_mmap = np.memmap(idx_path, mode="r", dtype=np.uint8)
        buf = self._idx_mmap
        self._lengths = np.frombuffer(buf, dtype="<i4", count=n, offset=HEADER_SIZE)
        self._pointers = np.frombuffer(buf, dtype="<i8", count=n, offset=HEADER_SIZE + 4 * n)
        self._doc_idx = np.frombuffer(buf, dtype="<i8", count=d, offset=HEADER_SIZE + 12 * n)
        self._n = n
        if d < 1 or self._doc_idx[0] != 0 or self._doc_idx[-1] != n:
            first = int(self._doc_idx[0]) if d else None
            last = int(self._doc_idx[-1]) if d else None
            raise CorruptIndexError(
                idx_path, f"document indices must start at 0 and end at N={n}, got first={first} "
                f"last={last} (D={d})")
        if self._verify:
            self._verify_arrays(idx_path)
        expected_bin = (int(self._pointers[-1]) + int(self._lengths[-1]) * self._itemsize) if n else 0
        bin_size = os.path.getsize(bin_path)
        if bin_size != expected_bin:
            raise BinSizeMismatchError(
                bin_path, f"{bin_size} bytes, but {os.path.basename(idx_path)} points to "
                f"{expected_bin} bytes ({n} sequences of {self._dtype.name}); the .bin is "
                "truncated or belongs to another .idx — rebuild the pair")
        if bin_size:
            with open(bin_path, "rb") as fh:
                self._bin_mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._bin = memoryview(self._bin_mmap)
        else:  # mmap cannot map an empty file (megatron-core fails here)
            self._bin_mmap = None
            self._bin = memoryview(b"")

    def _verify_arrays(self, idx_path: str) -> None:
        lengths, pointers, doc = self._lengths, self._pointers, self._doc_idx
        if self._n:
            if (lengths < 0).any():
                i = int(np.flatnonzero(lengths < 0)[0])
                raise CorruptIndexError(idx_path, f"sequence {i} has negative length {lengths[i]}")
            step = lengths[:-1].astype(np.int64) * self._itemsize
            bad = np.flatnonzero(pointers[1:] != pointers[:-1] + step)
            if pointers[0] != 0 or bad.size:
                i = 0 if pointers[0] != 0 else int(bad[0]) + 1
                raise CorruptIndexError(
                    idx_path, f"sequence pointer {i} is {int(pointers[i])}, but the lengths before "
                    "it say otherwise (pointer[i+1] must be pointer[i] + length[i]·itemsize)")
        if (np.diff(doc) < 0).any():
            k = int(np.flatnonzero(np.diff(doc) < 0)[0])
            raise CorruptIndexError(idx_path, f"document indices decrease at document {k}")

    def close(self) -> None:
        """Release the memory maps.  Arrays returned earlier stay valid: a map that still has
        views is closed by the garbage collector after the last one (megatron-core unmaps at
        once, and reading such a view then crashes the process)."""
        self._bin = memoryview(b"")
        self._lengths = self._pointers = self._doc_idx = None  # type: ignore[assignment]
        if getattr(self, "_bin_mmap", None) is not None:
            try:
                self._bin_mmap.close()
            except BufferError:  # views still exported: the GC closes it later
                pass
            self._bin_mmap = None
        self._idx_mmap = None

    def __enter__(self) -> "IndexedDataset":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict:  # DataLoader workers re-map the files
        return {"path_prefix": self.path_prefix, "verify": self._verify, "header": self._given_header}

    def __setstate__(self, state: dict) -> None:
        self._verify = state["verify"]
        self._given_header = state.get("header")
        self._open(state["path_prefix"])

    @staticmethod
    def exists(path_prefix: PathLike) -> bool:
        """True when both ``<prefix>.idx`` and ``<prefix>.bin`` exist."""
        return os.path.isfile(get_idx_path(path_prefix)) and os.path.isfile(get_bin_path(path_prefix))

    # -- the arrays of the index
    @property
    def dtype(self) -> np.dtype:
        """Token dtype of the ``.bin`` (from header byte 17)."""
        return self._dtype

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32, shape (N,): tokens per sequence (a view of the mmap'd ``.idx``)."""
        return self._lengths

    @property
    def sequence_pointers(self) -> np.ndarray:
        """int64, shape (N,): byte offset of each sequence in the ``.bin``."""
        return self._pointers

    @property
    def document_indices(self) -> np.ndarray:
        """int64, shape (D,): document k is sequences ``[d[k], d[k+1])``; d[0]=0, d[-1]=N."""
        return self._doc_idx

    @property
    def num_documents(self) -> int:
        """D − 1."""
        return len(self._doc_idx) - 1

    @property
    def num_tokens(self) -> int:
        """Total tokens in the ``.bin`` (= its size / itemsize)."""
        return len(self._bin) // self._itemsize

    @property
    def metadata(self) -> dict | None:
        """The sidecar ``<prefix>.json`` written by labsupport, or None when absent."""
        path = get_sidecar_path(self.path_prefix)
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                meta = json.load(fh)
        except (OSError, ValueError) as exc:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise IndexedDatasetError(path, f"unreadable sidecar ({exc}); re-run the preprocessing "
                                            "(or delete it: megatron-core never reads it)") from None
        if not isinstance(meta, dict):
            raise IndexedDatasetError(path, f"damaged sidecar (a JSON {type(meta).__name__}, not an object); "
                                            "re-run the preprocessing (or delete it: megatron-core never reads it)")
        return meta

    def sizes(self) -> dict:
        """The sizes in bytes of the mapped ``.idx`` and ``.bin`` (what :meth:`identity` holds
        besides the digests; O(1))."""
        return {"idx_bytes": int(self._idx_mmap.size), "bin_bytes": len(self._bin)}

    def identity(self) -> dict:
        """What this reader maps, as the index cache and the data plan record it: the sizes and
        sha256 of the ``.idx`` and the ``.bin`` (hashed once, from the mapped bytes, so a file
        replaced on disk after opening does not change it)."""
        if self._identity is None:
            self._identity = {"idx_bytes": int(self._idx_mmap.size), "bin_bytes": len(self._bin),
                              "idx_sha256": hashlib.sha256(self._idx_mmap).hexdigest(),
                              "bin_sha256": hashlib.sha256(self._bin).hexdigest()}
        return dict(self._identity)

    # -- access
    def __len__(self) -> int:
        return self._n

    def _index(self, idx: Any) -> int:
        return normalize_index(idx, self._n, "sequence", os.path.basename(self.path_prefix))

    def __getitem__(self, idx: Any) -> Union[np.ndarray, list]:
        """``ds[i]`` → sequence i (read-only view); ``ds[a:b]`` → list of sequences a..b-1."""
        if isinstance(idx, slice):
            start, stop, step = idx.indices(self._n)
            if step != 1:
                raise ValueError("slices of an IndexedDataset must be contiguous (step 1)")
            if stop <= start:
                return []
            lengths = self._lengths[start:stop]
            flat = np.frombuffer(self._bin, dtype=self._dtype, count=int(lengths.sum()),
                                 offset=int(self._pointers[start]))
            return np.split(flat, np.cumsum(lengths[:-1]))
        i = idx if type(idx) is int and 0 <= idx < self._n else self._index(idx)
        return np.frombuffer(self._bin, dtype=self._dtype, count=self._lengths.item(i),
                             offset=self._pointers.item(i))

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset .. offset+length-1`` of sequence ``idx`` (a read-only view).

        ``length=None`` means to the end. Unlike Megatron, out-of-range offsets or lengths raise
        IndexError instead of reading into the next sequence.
        """
        # plain ints in range skip the general checks (this is the hot path of GPTDataset reads)
        i = idx if type(idx) is int and 0 <= idx < self._n else self._index(idx)
        n = self._lengths.item(i)
        if type(offset) is not int:
            offset = operator.index(offset)
        if length is None:
            length = n - offset
        elif type(length) is not int:
            length = operator.index(length)
        if offset < 0 or length < 0 or offset + length > n:
            self._bad_window(i, n, offset, length)
        return np.frombuffer(self._bin, dtype=self._dtype, count=length,
                             offset=self._pointers.item(i) + offset * self._itemsize)

    @staticmethod
    def _bad_window(i: int, n: int, offset: int, length: int) -> None:
        if not 0 <= offset <= n:
            raise IndexError(f"offset {offset} out of range for sequence {i} of length {n}")
        raise IndexError(f"length {length} at offset {offset} runs past the end of sequence "
                         f"{i} (length {n})")

    def document(self, k: int) -> np.ndarray:
        """All tokens of document k (its sequences are contiguous in the ``.bin``): a view."""
        kk = normalize_index(k, self.num_documents, "document", os.path.basename(self.path_prefix))
        first, last = self._doc_idx.item(kk), self._doc_idx.item(kk + 1)
        if first == last:
            return np.frombuffer(b"", dtype=self._dtype)
        start = self._pointers.item(first)
        count = int(self._lengths[first:last].sum())
        return np.frombuffer(self._bin, dtype=self._dtype, count=count, offset=start)

    def document_byte_offset(self, k: int) -> int:
        """Byte offset in the ``.bin`` where document k starts: ``pointers[d[k]]``.

        For a document without sequences at the very end this is the size of the ``.bin``.
        Equals ``sum(sequence_lengths[:d[k]]) * itemsize``.
        """
        kk = normalize_index(k, self.num_documents, "document", os.path.basename(self.path_prefix))
        first = self._doc_idx.item(kk)
        return self._pointers.item(first) if first < self._n else len(self._bin)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self._n):
            yield self[i]

    def __repr__(self) -> str:
        return (f"IndexedDataset({os.path.basename(self.path_prefix)!r}: {self._n} sequences, "
                f"{self.num_documents} documents, {self.num_tokens} tokens, {self._dtype.name})")


# ----------------------------------------------------------------------------------- builder
class _IntColumn:
    """An append-only int64 column fed by single ints and by numpy arrays."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._pending: list[int] = []
        self.count = 0
        self.last = 0

    def append(self, value: int) -> None:
        self._pending.append(value)
        self.count += 1
        self.last = value

    def extend(self, values: np.ndarray) -> None:
        if values.size:
            self._flush()
            self._chunks.append(np.asarray(values, dtype=np.int64))
            self.count += values.size
            self.last = int(values[-1])

    def _flush(self) -> None:
        if self._pending:
            self._chunks.append(np.array(self._pending, dtype=np.int64))
            self._pending = []

    def array(self) -> np.ndarray:
        self._flush()
        if not self._chunks:
            return np.zeros(0, dtype=np.int64)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]


class IndexedDatasetBuilder:
    """Writes a Megatron ``.bin``/``.idx`` pair, one document at a time.

    ``IndexedDatasetBuilder(bin_path, dtype)`` then ``add_document(token_ids)`` per document
    and ``finalize(idx_path)``.  Tokens go to a temporary file next to ``bin_path``; only
    ``finalize`` renames ``.bin``, the sidecar ``.json`` and, last, ``.idx`` to their final names,
    so no file ever appears half-written.  Use it as a context manager to delete the temporary
    file when an exception escapes.

    ``vocab_size`` (optional) makes ids ≥ vocab_size an error too; ``metadata`` (a JSON-able
    dict: tokenizer fingerprint, sources, …) is merged into the sidecar.
    """

    def __init__(self, bin_path: PathLike, dtype: Any = np.int32, *, vocab_size: int | None = None,
                 metadata: dict | None = None) -> None:
        self.bin_path = os.fspath(bin_path)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.dtype_code = DType.code_from_dtype(self.dtype)
        self.vocab_size = vocab_size
        self.metadata = dict(metadata or {})
        self._integer = self.dtype.kind in "iu"
        if self._integer:
            info = np.iinfo(self.dtype)
            self._lo, self._hi = int(info.min), int(info.max)
            if vocab_size is not None:
                self._hi = min(self._hi, int(vocab_size) - 1)
                self._lo = max(self._lo, 0)
        self._tag = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._tmp_bin = self.bin_path + self._tag
        Path(self.bin_path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self._tmp_bin, "wb", buffering=1 << 20)
        self._lengths = _IntColumn()
        self._doc_idx = _IntColumn()
        self._doc_idx.append(0)
        self._num_tokens = 0
        self._closed = False

    # -- counters
    @property
    def num_sequences(self) -> int:
        return self._lengths.count

    @property
    def num_documents(self) -> int:
        return self._doc_idx.count - 1

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    # -- adding tokens
    def _coerce(self, token_ids: Any, what: str) -> np.ndarray:
        arr = np.asarray(token_ids)
        if arr.ndim != 1:
            raise ValueError(f"{what}: token ids must be one-dimensional, got shape {arr.shape}")
        if arr.size == 0:
            return np.zeros(0, dtype=self.dtype)
        if arr.dtype == self.dtype and self.vocab_size is None:
            return np.ascontiguousarray(arr)
        if self._integer:
            if arr.dtype.kind not in "iu":
                raise TypeError(f"{what}: token ids must be integers, got dtype {arr.dtype}")
            lo, hi = int(arr.min()), int(arr.max())
            if lo < self._lo or hi > self._hi:
                pos = int(np.flatnonzero((arr < self._lo) | (arr > self._hi))[0])
                bad = int(arr[pos])
                if self.vocab_size is not None and 0 <= bad <= int(np.iinfo(self.dtype).max):
                    why = f"is outside the vocabulary (vocab_size {self.vocab_size})"
                else:
                    wrapped = np.array([bad]).astype(self.dtype)[0]
                    why = (f"does not fit {self.dtype.name} ({np.iinfo(self.dtype).min}.."
                           f"{np.iinfo(self.dtype).max}); Megatron's builder would silently store "
                           f"{wrapped} from an int64 array (from a Python list NumPy 2 raises OverflowError). "
                           "Choose the dtype with optimal_dtype(vocab_size)")
                raise ValueError(f"{what}: token id {bad} at position {pos} {why}")
            return arr.astype(self.dtype, copy=False)
        cast = arr.astype(self.dtype)
        if not np.array_equal(cast.astype(arr.dtype), arr):
            raise ValueError(f"{what}: token ids are not exactly representable as {self.dtype.name}")
        return cast

    def _write(self, arr: np.ndarray) -> None:
        if self._closed:
            raise RuntimeError(f"{self.bin_path}: builder already finalized or aborted")
        if arr.size:
            self._file.write(arr.data)
            self._num_tokens += arr.size

    def add_item(self, token_ids: Any) -> None:
        """Append one sequence to the current document (Megatron's ``add_item``)."""
        arr = self._coerce(token_ids, f"sequence {self.num_sequences}")
        self._write(arr)
        self._lengths.append(arr.size)

    def end_document(self) -> None:
        """Close the current document after ``add_item`` calls (Megatron's ``end_document``)."""
        self._doc_idx.append(self._lengths.count)

    def add_document(self, token_ids: Any, lengths: Sequence[int] | None = None) -> None:
        """Append one document: 1-D integer ids (list, numpy array or CPU tensor).

        ``lengths`` optionally splits it into several sequences (Megatron's signature, used for
        sentence splitting); the default is one sequence of ``len(token_ids)`` tokens.
        ``lengths=[]`` with no ids writes a document without sequences, as Megatron's script
        does for empty text.  Raises ValueError naming the document and the id that does not fit.
        """
        what = f"document {self.num_documents}"
        arr = self._coerce(token_ids, what)
        if lengths is None:
            lens = [arr.size]
        else:
            lens = [int(x) for x in lengths]
            if any(x < 0 for x in lens) or sum(lens) != arr.size:
                raise ValueError(f"{what}: lengths {lens[:8]} must be ≥ 0 and sum to the "
                                 f"{arr.size} ids given")
        if any(x > 2**31 - 1 for x in lens):
            raise ValueError(f"{what}: a sequence longer than 2**31-1 tokens cannot be indexed")
        self._write(arr)
        for x in lens:
            self._lengths.append(x)
        self._doc_idx.append(self._lengths.count)

    def add_documents(self, token_ids: Any, document_lengths: Any, *,
                      empty_as_no_sequence: bool = False) -> None:
        """Append many one-sequence documents at once (vectorised ``add_document`` loop).

        ``token_ids``: 1-D, the documents back to back; ``document_lengths``: 1-D, tokens per
        document (sums to ``len(token_ids)``).  Same bytes as calling ``add_document`` per doc;
        with ``empty_as_no_sequence`` an empty document gets no sequence (``add_document([],
        lengths=[])``), which is what Megatron's preprocessing script writes for empty text.
        """
        lens = np.asarray(document_lengths, dtype=np.int64)
        first = self.num_documents
        arr = self._coerce(token_ids, f"documents {first}..{first + lens.size - 1}")
        if lens.ndim != 1 or (lens.size and lens.min() < 0) or int(lens.sum()) != arr.size:
            raise ValueError(f"documents {first}..: document_lengths must be 1-D, ≥ 0 and sum to "
                             f"the {arr.size} ids given")
        if lens.size and lens.max() > 2**31 - 1:
            raise ValueError("a sequence longer than 2**31-1 tokens cannot be indexed")
        self._write(arr)
        base = self._lengths.count
        if empty_as_no_sequence:
            nonempty = lens > 0
            self._lengths.extend(lens[nonempty])
            self._doc_idx.extend(base + np.cumsum(nonempty, dtype=np.int64))
        else:
            self._lengths.extend(lens)
            self._doc_idx.extend(base + np.arange(1, lens.size + 1, dtype=np.int64))

    # -- finishing
    def _index_bytes(self) -> bytes:
        lengths = self._lengths.array()
        n, doc = lengths.size, self._doc_idx.array()
        pointers = np.zeros(n, dtype="<i8")
        if n > 1:
            np.cumsum(lengths[:-1] * self.dtype.itemsize, out=pointers[1:])
        header = MAGIC + struct.pack("<QBQQ", VERSION, self.dtype_code, n, doc.size)
        return b"".join([header, lengths.astype("<i4").tobytes(), pointers.tobytes(),
                         doc.astype("<i8").tobytes()])

    def finalize(self, idx_path: PathLike) -> dict:
        """Write the ``.idx`` and the sidecar and move all three files to their final names.

        Returns the sidecar dict (counts, dtype, sizes and the ``metadata`` given).
        """
        if self._closed:
            raise RuntimeError(f"{self.bin_path}: builder already finalized or aborted")
        idx_path = os.fspath(idx_path)
        prefix = _prefix_of(idx_path)
        side_path = get_sidecar_path(prefix)
        tmp_idx, tmp_side = idx_path + self._tag, side_path + self._tag
        try:
            self._file.close()
            self._closed = True
            payload = self._index_bytes()
            with open(tmp_idx, "wb") as fh:
                fh.write(payload)
            sidecar = {
                "format": "MMIDIDX", "version": VERSION,
                "dtype": self.dtype.name, "dtype_code": self.dtype_code,
                "num_sequences": self.num_sequences, "num_documents": self.num_documents,
                "num_tokens": self.num_tokens,
                "bin_bytes": self.num_tokens * self.dtype.itemsize, "idx_bytes": len(payload),
                "vocab_size": self.vocab_size, "written_by": "labsupport.datasets.indexed",
            }
            sidecar.update(self.metadata)
            with open(tmp_side, "w", encoding="utf-8") as fh:
                json.dump(sidecar, fh, indent=1, ensure_ascii=False, sort_keys=False)
                fh.write("\n")
            # .idx last: a new dataset is visible only once all three files are in place.
            # (Each rename is atomic; two builders writing identical bytes never expose a gap.)
            os.replace(self._tmp_bin, self.bin_path)
            os.replace(tmp_side, side_path)
            os.replace(tmp_idx, idx_path)
        except BaseException:
            for p in (self._tmp_bin, tmp_idx, tmp_side):
                if os.path.exists(p):
                    os.unlink(p)
            raise
        return sidecar

    def abort(self) -> None:
        """Discard everything written so far (the temporary file is deleted)."""
        if not self._closed:
            self._file.close()
            self._closed = True
        if os.path.exists(self._tmp_bin):
            os.unlink(self._tmp_bin)

    def __enter__(self) -> "IndexedDatasetBuilder":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None or not self._closed:
            self.abort()

    def __del__(self) -> None:
        try:
            self.abort()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
