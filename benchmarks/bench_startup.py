"""Chapter 6 benchmark: a blend's start-up with many prefixes, the workbook against megatron-core.

Measured side by side in one run and written to ``benchmarks/results/startup.json``: ``--prefixes``
generated prefixes (``labsupport.datasets.startup_timing.make_prefixes``: 50 documents of random ids
each, seeded), ``--samples`` samples of ``--seq-length`` tokens per prefix, one GPTDataset per prefix
(megatron-core's the way its builder makes one rank's: ``GPTDataset.build_low_level_dataset`` then
``GPTDataset(…)``), in each mode of :data:`MODES`: the first run (build and save), a cache hit,
``fast_cache_load``, plus ``defer_npy_index_mmap``, plus ``sequences_per_dataset``.  Start-up is
every dataset constructed; first samples is sample 0 of each (megatron-core's
``_query_document_sample_shuffle_indices``, the workbook's ``text``): both sides must read the same
tokens in every mode (else :class:`~benchmarks._common.Mismatch`).  Wall clock, median of
``--repeats`` (the first run: once), files in the page cache.
Run: ``.venv/bin/python -m benchmarks.bench_startup``.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from benchmarks._common import machine_info, require, write_results
from labsupport.datasets.fast_start import build_gpt_datasets
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.sequences_per_dataset import sequences_per_dataset
from labsupport.datasets.startup_timing import make_prefixes, time_startup

RESULTS = Path(__file__).resolve().parent / "results" / "startup.json"
#: the modes both sides have: (workbook mode name, megatron-core's config options, cold)
MODES = (("cache, first run: build + save", {}, True),
         ("cache hit, checked (default)", {}, False),
         ("+ fast_cache_load", {"fast_cache_load": True}, False),
         ("+ defer_npy_index_mmap", {"fast_cache_load": True, "defer_npy_index_mmap": True}, False),
         ("+ sequences_per_dataset", {"fast_cache_load": True, "defer_npy_index_mmap": True, "sequences": True}, False))


class _Tokenizer:
    def __init__(self) -> None:
        self.vocab_size, self.eod, self.pad = 32000, 0, 1
        self.unique_identifiers = OrderedDict(cls="bench_startup", vocab=32000)


def _megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import gpt_dataset  # noqa: PLC0415 - megatron-core start-up: only here
        from megatron.core.datasets.utils import Split  # noqa: PLC0415 - megatron-core start-up: only here
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return gpt_dataset, Split


def _megatron_once(prefixes, samples, seq, cache, options, counts):
    gpt_dataset, split = _megatron()
    options = dict(options)
    sequences = counts if options.pop("sequences", False) else None
    cfg = gpt_dataset.GPTDatasetConfig(
        random_seed=1234, sequence_length=seq, blend=None, blend_per_split=[(list(prefixes), None), None, None],
        split=None, path_to_cache=cache, reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True,
        tokenizer=_Tokenizer(), mmap_bin_files=True, sequences_per_dataset=sequences, **options)
    t0 = time.perf_counter()
    datasets = []
    for p in prefixes:
        low = gpt_dataset.GPTDataset.build_low_level_dataset(p, cfg)
        datasets.append(gpt_dataset.GPTDataset(low, p, np.arange(len(low), dtype=np.int32), samples, split.train, cfg))
    t1 = time.perf_counter()
    first = [ds._query_document_sample_shuffle_indices(0)[0] for ds in datasets]
    return t1 - t0, time.perf_counter() - t1, first


def bench_megatron(prefixes, samples, seq, repeats, work) -> dict:
    counts = {p: tuple(c) for p, c in sequences_per_dataset(prefixes).items()}
    cache = os.path.join(work, "megatron-cache")
    out = {}
    for name, options, cold in MODES:
        runs = [_megatron_once(prefixes, samples, seq, cache, options, counts) for _ in range(1 if cold else repeats)]
        out[name] = {"startup_s": statistics.median(r[0] for r in runs),
                     "first_samples_s": statistics.median(r[1] for r in runs), "first": runs[0][2]}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefixes", type=int, default=200)
    ap.add_argument("--samples", type=int, default=20_000, help="samples per prefix")
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-startup-")
    try:
        prefixes = make_prefixes(work, count=args.prefixes)
        mine = {r["mode"]: r for r in time_startup(prefixes, args.samples, args.seq_length, args.repeats)}
        theirs = bench_megatron(prefixes, args.samples, args.seq_length, args.repeats, work)
        config = GPTDatasetConfig(seq_length=args.seq_length, seed=1234, eod_token=0, reset_position_ids=True,
                                  reset_attention_mask=True, eod_mask_loss=True)
        reference = [ds.text(0)[0] for ds in build_gpt_datasets(prefixes, [args.samples] * len(prefixes), config)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, _, _ in MODES:
        first = theirs[name].pop("first")
        require(all(np.array_equal(a, b) for a, b in zip(first, reference)),
                f"{name}: megatron-core's first samples differ from the workbook's")
        rows.append({"mode": name, "workbook": mine[name], "megatron_core": theirs[name],
                     "startup_ratio_workbook_over_megatron": mine[name]["startup_s"] / theirs[name]["startup_s"]})
    result = {"benchmark": "start-up of one GPTDataset per prefix: labsupport.datasets.fast_start vs megatron-core",
              "inputs": f"{args.prefixes} generated prefixes (make_prefixes: 50 documents each, uint16, seed 0), "
                        f"{args.samples} samples of {args.seq_length} tokens per prefix",
              "parameters": {k: v for k, v in vars(args).items() if k != "out"},
              "timing": "wall clock, time.perf_counter, median of repeats (the first run: once); page cache warm",
              "machine": machine_info("numpy", "megatron-core"),
              "workbook_only": {k: v for k, v in mine.items() if k not in {m[0] for m in MODES}},
              "modes": rows}
    try:
        result["machine"]["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on every platform
        pass
    write_results(args.out, result)
    for r in rows:
        print(f"{r['mode']:<32} workbook {1e3 * r['workbook']['startup_s']:7.0f} ms  megatron-core "
              f"{1e3 * r['megatron_core']['startup_s']:7.0f} ms  ratio {r['startup_ratio_workbook_over_megatron']:.2f}")
    return result


if __name__ == "__main__":
    main()
    raise SystemExit(0)
