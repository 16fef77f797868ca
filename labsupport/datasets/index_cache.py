"""The GPTDataset index cache: Megatron's file names, hash and build-once rule — chapter 6.

Building a GPTDataset's document, sample and shuffle indices walks the whole corpus; Megatron
does it once and saves them under ``path_to_cache`` (Megatron-LM ``--data-cache-path``, NeMo
``index_mapping_dir``) as four files that share one name stem::

    {md5}-GPTDataset-{split}-description.txt      the JSON the md5 is taken of
    {md5}-GPTDataset-{split}-document_index.npy
    {md5}-GPTDataset-{split}-sample_index.npy
    {md5}-GPTDataset-{split}-shuffle_index.npy

The md5 covers the class, the prefix, ``num_samples``, the split's name, ``random_seed``,
``sequence_length``, the split string and matrix, and the tokenizer's identifiers (megatron-core
0.16.1 ``MegatronDataset.__init__`` and ``_key_config_attributes``; the reset/eod flags are not in
it).  ``num_samples`` is ``max_steps × global_batch_size`` spread over the blend, so changing
either builds new indices — and, once a dataset needs another number of epochs, another sample
order.  With ``path_to_cache`` None Megatron uses ``<prefix>/cache/GPTDataset_indices`` (a
folder named after the prefix, beside its ``.bin``).  Global rank 0 builds and saves, all ranks
meet at a barrier, then the others load the files: the folder must be writable by rank 0 and the
same folder on every node.  ``tests/crosscheck/test_splits.py`` checks names, description
and arrays against megatron-core 0.16.1's own cache.

Differences from Megatron, which only refuse or add (its files stay byte for byte its own, and each
side loads the other's cache: ``tests/crosscheck/test_splits.py``):

* the files are written to a temporary name and renamed (Megatron writes them in place, so a crash
  can leave a cache that later runs take as complete);
* a fifth file, ``{md5}-GPTDataset-{split}.labsupport.json`` (the *record*, written last), ties the
  entry to the corpus it indexes and to its own bytes: the sizes and sha256 of the ``.bin``/``.idx``
  the indices were built from, and each array's dtype, shape and sha256.  Megatron's hash does not
  cover the corpus, so after a prefix is preprocessed again (documents appended) Megatron — and
  this cache before the record — would keep training on the old indices;
* :meth:`IndexCache.fetch` checks an entry before using it: the record names this corpus, every
  array loads without unpickling (``allow_pickle=False``) with the dtype, shape and value range the
  description implies and the sha256 recorded.  An entry that fails (stale, damaged, 0 bytes, not a
  ``.npy``) is rebuilt, saying so in one line on stderr; an entry without a record (written by
  megatron-core, or by an older workbook) is adopted once its arrays equal the indices built now.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from labsupport.fileio import atomic_open, atomic_write

__all__ = ["ARRAYS", "RECORD_FORMAT", "unique_description", "default_cache_dir", "corpus_identity", "Expected",
           "IndexCache"]

#: ``format`` of the record file.
RECORD_FORMAT = "labsupport-index-cache/1"

#: The three arrays, in the order GPTDataset builds them.
ARRAYS: tuple[str, ...] = ("document_index", "sample_index", "shuffle_index")


def unique_description(dataset_path: str, num_samples: int | None, index_split: str, random_seed: int,
                       sequence_length: int, split: str, split_matrix: list, tokenizer: Any) -> str:
    """The JSON text whose md5 names the cache files: megatron-core's ``unique_description``.

    ``tokenizer`` is a dict of identifiers, an object with ``unique_identifiers``, or None.
    ``split_matrix`` as :func:`labsupport.datasets.splits.split_matrix` returns it.
    """
    ids: "OrderedDict[str, Any]" = OrderedDict()
    ids["class"] = "GPTDataset"
    ids["dataset_path"] = dataset_path
    ids["num_samples"] = num_samples
    ids["index_split"] = index_split
    ids["random_seed"] = random_seed
    ids["sequence_length"] = sequence_length
    ids["split"] = split
    ids["split_matrix"] = split_matrix
    ids["tokenizer"] = tokenizer
    return json.dumps(ids, indent=4, default=lambda obj: obj.unique_identifiers)


def default_cache_dir(prefix: str) -> str:
    """Where Megatron caches when ``path_to_cache`` is None: ``<prefix>/cache/GPTDataset_indices``."""
    return os.path.join(prefix, "cache", "GPTDataset_indices")


def corpus_identity(dataset: Any) -> dict:
    """What a cache entry's indices were built from: an ``IndexedDataset``'s :meth:`identity`
    (sizes and sha256 of its ``.bin``/``.idx``), or for another token source the sha256 of its
    ``sequence_lengths`` (all the indices depend on)."""
    identity = getattr(dataset, "identity", None)
    if callable(identity):
        return dict(identity())
    lengths = np.ascontiguousarray(np.asarray(dataset.sequence_lengths), dtype="<i8")
    return {"sequence_lengths_sha256": hashlib.sha256(lengths.tobytes()).hexdigest()}


@dataclass(frozen=True)
class Expected:
    """One array as the description implies it: dtype, shape, and the range of its values."""

    dtype: np.dtype
    shape: tuple[int, ...]
    low: int
    high: int          # inclusive

    def problem(self, array: np.ndarray) -> str | None:
        """Why ``array`` is not this (None when it is)."""
        if array.dtype != np.dtype(self.dtype):
            return f"dtype {array.dtype}, expected {np.dtype(self.dtype)}"
        if tuple(array.shape) != tuple(self.shape):
            return f"shape {tuple(array.shape)}, expected {tuple(self.shape)}"
        if array.size and (int(array.min()) < self.low or int(array.max()) > self.high):
            return (f"values {int(array.min())}..{int(array.max())}, outside {self.low}..{self.high} "
                    "(what the corpus and the description allow)")
        return None


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class IndexCache:
    """One GPTDataset's cache entry: ``directory`` and the ``description`` JSON."""

    directory: str
    description: str
    index_split: str = "train"

    @property
    def md5(self) -> str:
        return hashlib.md5(self.description.encode("utf-8")).hexdigest()

    def path(self, affix: str) -> str:
        """``{directory}/{md5}-GPTDataset-{split}-{affix}``; affix e.g. ``"shuffle_index.npy"``."""
        return os.path.join(self.directory, f"{self.md5}-GPTDataset-{self.index_split}-{affix}")

    def files(self) -> list[str]:
        """The four paths Megatron writes, description first (the record is :attr:`record_path`)."""
        return [self.path("description.txt")] + [self.path(f"{a}.npy") for a in ARRAYS]

    @property
    def record_path(self) -> str:
        """``{directory}/{md5}-GPTDataset-{split}.labsupport.json``: corpus identity and array digests."""
        return os.path.join(self.directory, f"{self.md5}-GPTDataset-{self.index_split}.labsupport.json")

    def hit(self) -> bool:
        """True when all four files exist (Megatron's test for a cache hit; :meth:`fetch` also
        checks what they hold)."""
        return all(os.path.isfile(p) for p in self.files())

    def load(self) -> tuple[np.ndarray, ...]:
        """The three arrays, memory-mapped read-only (as Megatron loads them), never unpickled.

        Raises ValueError naming the file when one is empty, not a ``.npy`` or holds objects.
        Unchecked: :meth:`fetch` is the checked way in.
        """
        out = []
        for a in ARRAYS:
            path = self.path(f"{a}.npy")
            try:
                array = np.load(path, allow_pickle=False, mmap_mode="r")
            except (ValueError, EOFError, TypeError, OverflowError) as exc:
                size = os.path.getsize(path)
                what = "an empty file" if size == 0 else f"not a readable .npy array ({exc})"
                raise ValueError(f"{path}: {what}") from None
            out.append(array)
        return tuple(out)

    def read_record(self) -> dict | None:
        """The record, or None when there is none.  ValueError when it is not one."""
        if not os.path.isfile(self.record_path):
            return None
        try:
            with open(self.record_path, encoding="utf-8") as fh:
                record = json.load(fh)
        except ValueError as exc:
            raise ValueError(f"{self.record_path}: not a readable record ({exc})") from None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("md5") != self.md5 \
                or not isinstance(record.get("arrays"), dict):
            raise ValueError(f"{self.record_path}: not a {RECORD_FORMAT} record of this entry")
        return record

    def problem(self, corpus: Mapping[str, Any] | None, expected: Mapping[str, Expected] | None,
                record: dict | None) -> tuple[tuple[np.ndarray, ...] | None, str | None]:
        """(the arrays, None) when the entry holds what ``record`` (and ``expected``) say and the
        record names ``corpus``; else (None or the loaded arrays, why not)."""
        if record is not None and corpus is not None and record.get("corpus") != dict(corpus):
            return None, (f"{self.record_path}: built from another {self._prefix()}.bin/.idx than the one "
                          "there now (the prefix was preprocessed again)")
        try:
            arrays = self.load()
        except ValueError as exc:
            return None, str(exc)
        for name, array in zip(ARRAYS, arrays):
            path = self.path(f"{name}.npy")
            want = (expected or {}).get(name)
            wrong = want.problem(array) if want is not None else None
            if wrong:
                return None, f"{path}: {wrong}"
            if record is not None:
                saved = record["arrays"].get(name)
                if not isinstance(saved, dict) or saved.get("sha256") != _sha256(array):
                    return None, f"{path}: damaged (its sha256 differs from the one recorded when it was written)"
        return arrays, None

    def trusted(self, expected: Mapping[str, Expected], sizes: Mapping[str, int] | None
                ) -> tuple[tuple[np.ndarray, ...] | None, str | None]:
        """Chapter 6's fast start (``fast_cache_load``): (the arrays, None) after O(1) checks only —
        the record exists and its corpus has ``sizes`` (the ``.idx``/``.bin`` bytes now), each
        array has the dtype and shape ``expected`` — no hashing of the corpus or the arrays and no
        read of their values; else (None, why).  What the full checks of :meth:`fetch` would catch
        besides (a corpus rewritten at the same size, a flipped bit) is then not caught."""
        try:
            record = self.read_record()
        except ValueError as exc:
            return None, str(exc)
        if record is None or sizes is None:
            return None, f"{self.record_path}: no record to trust (checked in full instead)"
        corpus = record.get("corpus") or {}
        if any(corpus.get(key) != value for key, value in sizes.items()):
            return None, f"{self.record_path}: built from a {self._prefix()} of other sizes"
        try:
            arrays = self.load()
        except (ValueError, OSError) as exc:
            return None, str(exc)
        for name, array in zip(ARRAYS, arrays):
            want = expected.get(name)
            if want is not None and (array.dtype != np.dtype(want.dtype) or tuple(array.shape) != tuple(want.shape)):
                return None, f"{self.path(name + '.npy')}: dtype {array.dtype} shape {array.shape}, not as expected"
        return arrays, None

    def fetch(self, build: Callable[[], tuple[np.ndarray, ...]], *, corpus: Mapping[str, Any] | None = None,
              expected: Mapping[str, Expected] | None = None,
              say: Callable[[str], None] = _say) -> tuple[tuple[np.ndarray, ...], bool]:
        """The three arrays and whether they came from the cache (checked), else ``build()``'s, saved.

        ``corpus``: :func:`corpus_identity` of the dataset indexed; ``expected``: array name →
        :class:`Expected`.  A stale or damaged entry is rebuilt with one line through ``say``; one
        without a record (megatron-core's, an older workbook's) is kept when its arrays equal
        ``build()``'s (the record is added), else rebuilt, saying so.
        """
        if not self.hit():
            arrays = build()
            self.save(arrays, corpus)
            return arrays, False
        try:
            record = self.read_record()
        except ValueError as exc:
            record, why = None, str(exc)
        else:
            why = None
        if why is None:
            arrays, why = self.problem(corpus, expected, record)
            if why is None and record is not None:
                return arrays, True
            if why is not None and record is None:
                why += " (an entry without a record: written by megatron-core or an older workbook)"
        fresh = build()
        if why is None and arrays is not None and all(
                a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(arrays, fresh)):
            try:
                self._write_record(arrays, corpus)         # adopted: the files are right, now they are tied
            except OSError:                                # a read-only cache: checked in full again next time
                pass
            return arrays, True
        if why is None:
            why = (f"{self.path('*.npy')}: not the indices of {self._prefix()} as it is now (an entry without a "
                   "record: written by megatron-core or an older workbook)")
        try:
            self.save(fresh, corpus)
        except OSError as exc:
            raise OSError(f"index cache {why}; it cannot be rebuilt there: {exc}") from None
        say(f"index cache {why}; rebuilt it")
        return fresh, False

    def save(self, arrays: tuple[np.ndarray, ...], corpus: Mapping[str, Any] | None = None) -> None:
        """Write the arrays, then the description, then the record (each file complete or absent;
        a run killed in between leaves an entry without a record, which :meth:`fetch` checks in
        full).  OSError when the folder cannot be written: the message names it and
        ``index_mapping_dir``."""
        try:
            if os.path.isfile(self.record_path):       # the old record must not vouch for new arrays
                os.unlink(self.record_path)
            for name, array in zip(ARRAYS, arrays):
                with atomic_open(self.path(f"{name}.npy"), "wb") as fh:
                    np.save(fh, np.asarray(array), allow_pickle=False)
            atomic_write(self.path("description.txt"), self.description)
            self._write_record(arrays, corpus)
        except OSError as exc:
            raise OSError(f"index cache {self.directory}: cannot write ({exc.strerror or exc}); set "
                          "model.data.index_mapping_dir to a writable folder that every node shares") from None

    def _prefix(self) -> str:
        try:
            return str(json.loads(self.description)["dataset_path"])
        except (ValueError, KeyError, TypeError):
            return "dataset"

    def _write_record(self, arrays: tuple[np.ndarray, ...], corpus: Mapping[str, Any] | None) -> None:
        record = {"format": RECORD_FORMAT, "md5": self.md5, "corpus": None if corpus is None else dict(corpus),
                  "arrays": {name: {"dtype": np.asarray(a).dtype.str, "shape": list(np.shape(a)), "sha256": _sha256(a)}
                             for name, a in zip(ARRAYS, arrays)}}
        atomic_write(self.record_path, json.dumps(record, indent=1) + "\n")
