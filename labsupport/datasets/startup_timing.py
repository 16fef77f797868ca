"""Measure a blend's start-up with and without the fast-start options — chapter 6 and
``benchmarks/bench_startup.py``.

:func:`make_prefixes` writes many small ``.bin``/``.idx`` pairs of random tokens (generated, seeded:
nothing downloaded); :func:`time_startup` builds one GPTDataset per prefix in each :data:`MODES`
row, ``repeats`` times, and reports the median seconds of *start-up* (every dataset constructed:
headers, ``.idx`` maps, indices built or loaded) and of *first samples* (sample 0 of every dataset:
where a deferred ``.npy`` mmap pays).  Every mode must yield the same samples as the first (else
ValueError): a faster mode that reads other data would not count.  The seconds are this machine's,
with its files in the page cache; a parallel file system makes each open slower, which is what the
options save.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from labsupport.datasets.fast_start import build_gpt_datasets
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.indexed import IndexedDatasetBuilder
from labsupport.datasets.sequences_per_dataset import sequences_per_dataset, token_dtype_code

__all__ = ["Mode", "MODES", "make_prefixes", "time_startup"]

_TOKENIZER = {"class": "startup_timing.random_tokens", "vocab_size": 32000}


@dataclass(frozen=True)
class Mode:
    """One way to start: a name, whether it uses the index cache, and build_gpt_datasets' options."""

    name: str
    cache: bool = True
    fast_cache_load: bool = False
    defer: bool = False
    sequences: bool = False
    threads: int = 1
    cold: bool = False        #: an empty cache folder each repeat (the first run builds and saves)


MODES: tuple[Mode, ...] = (
    Mode("no cache: build in memory", cache=False),
    Mode("cache, first run: build + save", cold=True),
    Mode("cache hit, checked (default)"),
    Mode("+ fast_cache_load", fast_cache_load=True),
    Mode("+ defer_npy_index_mmap", fast_cache_load=True, defer=True),
    Mode("+ sequences_per_dataset", fast_cache_load=True, defer=True, sequences=True),
    Mode("+ 2 builder threads", fast_cache_load=True, defer=True, sequences=True, threads=2),
)


def make_prefixes(folder: str, count: int = 200, docs: int = 50, mean_tokens: int = 200,
                  vocab_size: int = 32000, seed: int = 0) -> list[str]:
    """``count`` prefixes ``folder/p000`` … of ``docs`` documents each (lengths 1 … 2·mean_tokens,
    uniform; random ids, EOD 0 last), uint16; returns the prefixes."""
    rng = np.random.default_rng(seed)
    prefixes = []
    for k in range(count):
        prefix = os.path.join(folder, f"p{k:03d}")
        builder = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16, vocab_size=vocab_size)
        for n in rng.integers(1, 2 * mean_tokens, size=docs):
            doc = rng.integers(1, vocab_size, size=int(n) + 1, dtype=np.int64)
            doc[-1] = 0
            builder.add_document(doc, [doc.size])
        builder.finalize(f"{prefix}.idx")
        prefixes.append(prefix)
    return prefixes


def _config(mode: Mode, seq_length: int) -> GPTDatasetConfig:
    return GPTDatasetConfig(seq_length=seq_length, seed=1234, eod_token=0, reset_position_ids=True,
                            reset_attention_mask=True, eod_mask_loss=True, fast_cache_load=mode.fast_cache_load,
                            defer_npy_index_mmap=mode.defer)


def _once(mode: Mode, prefixes: Sequence[str], num_samples: Sequence[int], seq_length: int, cache: str | None,
          counts: dict) -> tuple[float, float, list]:
    t0 = time.perf_counter()
    datasets = build_gpt_datasets(prefixes, num_samples, _config(mode, seq_length),
                                  cache_folder=cache if mode.cache else None, tokenizer=_TOKENIZER,
                                  threads=mode.threads, sequences=counts if mode.sequences else None,
                                  dtype_code=token_dtype_code(_TOKENIZER["vocab_size"]))
    t1 = time.perf_counter()
    first = [ds.text(0)[0] for ds in datasets]
    t2 = time.perf_counter()
    for ds in datasets:
        ds.dataset.close()
    return t1 - t0, t2 - t1, first


def time_startup(prefixes: Sequence[str], samples_per_prefix: int = 100, seq_length: int = 256,
                 repeats: int = 3, modes: Sequence[Mode] = MODES,
                 progress: Callable[[Any], Any] = lambda it: it) -> list[dict]:
    """Per mode: ``{"mode", "startup_s", "first_samples_s"}`` (medians of ``repeats``).

    A cold mode runs once, first, and its cache is the one every warm mode loads; ``progress``
    wraps the modes (e.g. ``tqdm``).  ValueError when a mode's first samples differ from the first mode's."""
    num_samples = [int(samples_per_prefix)] * len(prefixes)
    counts = sequences_per_dataset(prefixes)
    work = tempfile.mkdtemp(prefix="startup-")
    warm = os.path.join(work, "cache")      # the first run (cold) writes it; the warm modes load it
    try:
        if not any(mode.cold for mode in modes):
            build_gpt_datasets(prefixes, num_samples, _config(Mode("seed"), seq_length), cache_folder=warm,
                               tokenizer=_TOKENIZER)
        order = sorted(range(len(modes)), key=lambda i: not modes[i].cold)
        rows: dict[int, dict] = {}
        reference = None
        for i in progress(order):
            mode, startup, first_s = modes[i], [], []
            for _ in range(1 if mode.cold else int(repeats)):     # a first run happens once
                cache = warm if mode.cold and not os.path.isdir(warm) else \
                    (tempfile.mkdtemp(dir=work) if mode.cold else warm)
                s, f, first = _once(mode, prefixes, num_samples, seq_length, cache, counts)
                startup.append(s)
                first_s.append(f)
                reference = first if reference is None else reference
                if any(not np.array_equal(a, b) for a, b in zip(first, reference)):
                    raise ValueError(f"{mode.name}: the first samples differ from the first mode's")
            rows[i] = {"mode": mode.name, "startup_s": statistics.median(startup),
                       "first_samples_s": statistics.median(first_s)}
        return [rows[i] for i in range(len(modes))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
