"""Start-up with hundreds of prefixes: megatron-core's fast-start options, as one builder — chapter 6.

Before the first step a Megatron job opens every prefix of its blend and builds, or loads from the
index cache, three ``.npy`` indices per prefix; with hundreds of prefixes this takes minutes
(megatron-core ``megatron/core/datasets/readme.md``, "Fast DataLoader initialization",
core_v0.16.1).  :data:`FLAGS` names each option with what it does and the field that carries it
(``tests/crosscheck/test_fast_start.py`` checks the fields and defaults against megatron-core);
:func:`build_gpt_datasets` builds a blend's GPTDatasets with them, as
``BlendedMegatronDatasetBuilder._build_megatron_dataset_splits`` does one rank's share (without
ranks: chapter 6 times one process).

What the workbook adds, never relaxes: the fast paths still check in O(1) — the dtype and shape of
each cached array, the corpus's file sizes against the cache's record, the ``.idx`` size against
the counts of a sequences-per-dataset JSON — and an entry that fails is rebuilt the checked way.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, NamedTuple, Sequence

from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset
from labsupport.datasets.index_cache import IndexCache, unique_description
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.sequences_per_dataset import header_for
from labsupport.datasets.splits import split_matrix

__all__ = ["Flag", "FLAGS", "cache_entry", "build_gpt_datasets"]


class Flag(NamedTuple):
    """One fast-start option: Megatron-LM's flag, the config field it fills, its default, what it does."""

    flag: str
    field: str          #: ``Class.field`` in megatron-core (megatron/core/datasets)
    default: object
    does: str
    here: str           #: the workbook's spelling


#: The options of megatron-core's readme (core_v0.16.1), with the index cache they all rest on.
#: Flags: ``megatron/training/arguments.py`` 2468–2475, 2508; into the config: ``pretrain_gpt.py`` 226–251.
FLAGS: tuple[Flag, ...] = (
    Flag("--data-cache-path", "BlendedMegatronDatasetConfig.path_to_cache", None,
         "saves the .npy indices once, loads them after", "IndexCache(folder, …)"),
    Flag("--dataloader-fast-cache-load", "BlendedMegatronDatasetConfig.fast_cache_load", False,
         "trusts the cache: no file checks, no rank-0 barrier", "fast_cache_load=True"),
    Flag("--dataloader-defer-npy-index-mmap", "BlendedMegatronDatasetConfig.defer_npy_index_mmap", False,
         "maps each .npy at its first sample", "defer_npy_index_mmap=True"),
    Flag("--num-dataset-builder-threads", "BlendedMegatronDatasetConfig.num_dataset_builder_threads", 1,
         "threads that build or load the datasets", "threads=N"),
    Flag("--per-dataset-sequences-path", "GPTDatasetConfig.sequences_per_dataset", None,
         "all prefixes' counts from one JSON", "sequences={…}"),
)


def cache_entry(folder: str, prefix: str, num_samples: int | None, config: GPTDatasetConfig,
                tokenizer: Mapping[str, object]) -> IndexCache:
    """The index-cache entry of ``prefix`` (all its documents train: split ``"1,0,0"``) in ``folder``."""
    desc = unique_description(prefix, num_samples, "train", int(config.seed), int(config.seq_length), "1,0,0",
                              split_matrix("1,0,0"), dict(tokenizer))
    return IndexCache(folder, desc, "train")


def _one(prefix: str, num_samples: int | None, config: GPTDatasetConfig, cache: IndexCache | None,
         sequences: Mapping[str, tuple[int, int]] | None, dtype_code: int | None) -> GPTDataset:
    header = None if sequences is None else header_for(sequences[prefix], dtype_code)
    fast = config.fast_cache_load or config.defer_npy_index_mmap
    ds = IndexedDataset(prefix, verify=not fast, header=header)   # the O(N) pointer check is a full read
    return GPTDataset(ds, None, num_samples, config, cache=cache)


def build_gpt_datasets(prefixes: Sequence[str], num_samples: Sequence[int | None], config: GPTDatasetConfig, *,
                       cache_folder: str | None = None, tokenizer: Mapping[str, object] | None = None,
                       threads: int = 1, sequences: Mapping[str, tuple[int, int]] | None = None,
                       dtype_code: int | None = None) -> list[GPTDataset]:
    """One GPTDataset per prefix (``num_samples[k]`` samples each), in the prefixes' order.

    ``cache_folder`` + ``tokenizer`` (its identifiers): the index cache (None: indices in memory);
    ``config.fast_cache_load`` / ``config.defer_npy_index_mmap`` need it.  ``threads``: builders run
    at once (megatron-core's ``num_dataset_builder_threads``; numpy's index arithmetic releases the
    GIL only in part).  ``sequences`` (a sequences-per-dataset JSON, read) + ``dtype_code``
    (:func:`~labsupport.datasets.sequences_per_dataset.token_dtype_code` of the vocabulary): the
    readers take their counts from it instead of each ``.idx`` header.
    """
    if len(num_samples) != len(prefixes):
        raise ValueError(f"{len(prefixes)} prefixes but {len(num_samples)} sample counts")
    if int(threads) < 1:
        raise ValueError(f"threads must be ≥ 1 (megatron-core asserts num_dataset_builder_threads > 0), got {threads}")
    if sequences is not None and (dtype_code is None or any(p not in sequences for p in prefixes)):
        missing = next((p for p in prefixes if p not in sequences), None)
        raise ValueError(f"sequences needs dtype_code and every prefix (missing: {missing!r})")
    if cache_folder is not None and tokenizer is None:
        raise ValueError("cache_folder needs the tokenizer's identifiers (they are in the cache's hash)")

    def build(k: int) -> GPTDataset:
        entry = None if cache_folder is None else cache_entry(cache_folder, prefixes[k], num_samples[k], config,
                                                              tokenizer or {})
        return _one(prefixes[k], num_samples[k], config, entry, sequences, dtype_code)

    if int(threads) == 1:
        return [build(k) for k in range(len(prefixes))]
    with ThreadPoolExecutor(max_workers=int(threads)) as pool:
        return list(pool.map(build, range(len(prefixes))))
