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

Difference from Megatron: the files are written to a temporary name and renamed (Megatron writes
them in place, so a crash can leave a cache that later runs take as complete).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from labsupport.fileio import atomic_open, atomic_write

__all__ = ["ARRAYS", "unique_description", "default_cache_dir", "IndexCache"]

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
        """The four paths, description first."""
        return [self.path("description.txt")] + [self.path(f"{a}.npy") for a in ARRAYS]

    def hit(self) -> bool:
        """True when all four files exist (Megatron's test for a cache hit)."""
        return all(os.path.isfile(p) for p in self.files())

    def load(self) -> tuple[np.ndarray, ...]:
        """The three arrays, memory-mapped read-only (as Megatron loads them)."""
        return tuple(np.load(self.path(f"{a}.npy"), allow_pickle=True, mmap_mode="r") for a in ARRAYS)

    def save(self, arrays: tuple[np.ndarray, ...]) -> None:
        """Write the arrays, then the description (each file complete or absent).  OSError when
        the folder cannot be written: the message names it and ``index_mapping_dir``."""
        try:
            for name, array in zip(ARRAYS, arrays):
                with atomic_open(self.path(f"{name}.npy"), "wb") as fh:
                    np.save(fh, array, allow_pickle=True)
            atomic_write(self.path("description.txt"), self.description)
        except OSError as exc:
            raise OSError(f"index cache {self.directory}: cannot write ({exc.strerror or exc}); set "
                          "model.data.index_mapping_dir to a writable folder that every node shares") from None
