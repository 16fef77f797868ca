"""Chapter 4 benchmark: GPT samples with boundary information, and SFT bin packing.

Measured side by side in one run and written to ``benchmarks/results/packing.json``:

1. **GPT samples at S=2048** on the same ``.bin/.idx`` files (the workbook's ``books`` corpus,
   preprocessed by chapter 2 with ``--append-eod``): megatron-core 0.16.1's ``GPTDataset`` with
   ``reset_position_ids``, ``reset_attention_mask`` and ``eod_mask_loss`` (it builds a dense
   S×S mask per sample) against ``labsupport.datasets.sft_packing.GPTDataset`` (cu_seqlens / max_seqlen /
   position_ids instead).  Both read the same samples; tokens, labels, loss_mask and
   position_ids must be equal for every timed sample, and the dense mask rebuilt from
   cu_seqlens equal to Megatron's on a subset.  Megatron without the flags is timed for context.
2. **Packing 20,000 lengths into 4096** with NeMo's ``first_fit_decreasing`` against
   ``labsupport.datasets.sft_packing.first_fit_decreasing`` (same packs required) and the other algorithms.
   NeMo is not installed here: :func:`nemo_first_fit_decreasing` re-implements NeMo's code
   (``nemo/utils/sequence_packing_utils.py``: ``first_fit_decreasing`` = ``sorted(seqlens,
   reverse=True)`` then ``first_fit``, which rescans every open bin and recomputes ``sum(bin)``
   for each sequence) statement for statement.
3. **1,000,000 lengths** packed by each algorithm (target: under 5 s).

Lengths are drawn from a log-normal distribution with mean ≈ 320 tokens (σ = 0.6), clipped to
16…4096, seed 0.  Timings are wall clock (``time.perf_counter``), best of ``--repeats``.
Run: ``.venv/bin/python -m benchmarks.bench_packing``.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

from benchmarks._common import Mismatch, machine_info, write_results, require

import numpy as np
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset, attention_mask_from_cu_seqlens
from labsupport.datasets.preprocess import workbook_prefixes
from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer
from labsupport.datasets.bin_packing import ALGORITHMS, lower_bound, pack, packing_efficiency
import tempfile
import labsupport

RESULTS = Path(__file__).resolve().parent / "results" / "packing.json"
NEMO_SOURCE = ("NVIDIA/NeMo nemo/utils/sequence_packing_utils.py (first_fit, first_fit_decreasing), "
               "re-implemented here because NeMo is not installed")


def _machine() -> dict:
    return machine_info("numpy", "torch", "megatron-core")

def _best(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


# ------------------------------------------------------------------------------- NeMo, re-typed
def nemo_find_first_bin_that_fits(bins, s, bin_size):
    for i, abin in enumerate(bins):
        if sum(abin) + s <= bin_size:
            return i
    return -1


def nemo_first_fit(seqlens, pack_size):
    res = []
    for s in seqlens:
        first_bin = nemo_find_first_bin_that_fits(res, s, pack_size)
        if first_bin == -1:  # open a new bin
            res.append([s])
        else:
            res[first_bin].append(s)
    return res


def nemo_first_fit_decreasing(seqlens, pack_size):
    """NeMo's first_fit_decreasing: bins of *lengths* (NeMo maps them back to examples later)."""
    return nemo_first_fit(sorted(seqlens, reverse=True), pack_size)


def sft_like_lengths(n: int, seed: int = 0, mean: float = 320.0, sigma: float = 0.6,
                     pack_size: int = 4096) -> np.ndarray:
    """Log-normal lengths with the given mean, clipped to 16…pack_size (int64)."""
    rng = np.random.default_rng(seed)
    mu = np.log(mean) - sigma ** 2 / 2
    return np.clip(np.round(rng.lognormal(mu, sigma, n)), 16, pack_size).astype(np.int64)


# ------------------------------------------------------------------------------------ part 1
class _MegatronTokenizer:
    def __init__(self, vocab_size: int, eod: int, pad: int) -> None:
        self.vocab_size, self.eod, self.pad = vocab_size, eod, pad
        self.unique_identifiers = OrderedDict(cls="WorkbookTokenizer", vocab_size=vocab_size, eod=eod, pad=pad)


def bench_gpt_samples(seq_length: int, n_samples: int, repeats: int, check_dense: int, cache: Path) -> dict:
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset as mc_indexed  # noqa: PLC0415 - megatron-core is an optional dependency
        from megatron.core.datasets.gpt_dataset import GPTDataset as McGPTDataset  # noqa: PLC0415 - megatron-core is an optional dependency
        from megatron.core.datasets.gpt_dataset import GPTDatasetConfig as McGPTDatasetConfig  # noqa: PLC0415 - megatron-core is an optional dependency
        from megatron.core.datasets.utils import Split  # noqa: PLC0415 - megatron-core is an optional dependency
    logging.getLogger("megatron").setLevel(logging.ERROR)

    tok = Tokenizer(workbook_tokenizer())
    prefix = workbook_prefixes(["books"])["books"]
    seed = 1234

    def megatron(flags: bool):
        cfg = McGPTDatasetConfig(random_seed=seed, sequence_length=seq_length, blend=([prefix], None), split="1,0,0",
                                 path_to_cache=str(cache), reset_position_ids=flags, reset_attention_mask=flags,
                                 eod_mask_loss=flags, tokenizer=_MegatronTokenizer(tok.vocab_size, tok.eod, tok.pad))
        ds = mc_indexed.IndexedDataset(prefix)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return McGPTDataset(ds, prefix, np.arange(len(ds), dtype=np.int32), n_samples, Split.train, cfg)

    mc_flags, mc_plain = megatron(True), megatron(False)
    ours_ds = IndexedDataset(prefix)
    ours = GPTDataset(ours_ds, None, n_samples, GPTDatasetConfig(seq_length=seq_length, seed=seed,
                                                                 reset_position_ids=True, reset_attention_mask=True,
                                                                 eod_mask_loss=True, eod_token=tok.eod,
                                                                 pad_token=tok.pad))
    ours_dense = GPTDataset(ours_ds, None, n_samples, GPTDatasetConfig(seq_length=seq_length, seed=seed,
                                                                       reset_position_ids=True,
                                                                       reset_attention_mask=True, eod_mask_loss=True,
                                                                       eod_token=tok.eod, pad_token=tok.pad,
                                                                       create_attention_mask=True))
    n = min(n_samples, len(ours))
    require(len(ours) == len(mc_flags), f"{len(ours)} samples here, {len(mc_flags)} in megatron-core")

    def run(ds):
        return lambda: [ds[k] for k in range(n)]

    rows = {}
    for name, ds in (("megatron_reset_flags_dense_mask", mc_flags), ("megatron_no_flags", mc_plain),
                     ("labsupport_compact", ours), ("labsupport_plus_dense_mask", ours_dense)):
        seconds, samples = _best(run(ds), repeats)
        rows[name] = {"seconds": seconds, "samples": n, "samples_per_s": n / seconds}
        if name == "megatron_reset_flags_dense_mask":
            reference = samples
        if name == "labsupport_compact":
            mine = samples
    # equality, outside the timing
    for k in range(n):
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            if not torch.equal(reference[k][key], mine[k][key]):
                raise Mismatch(f"sample {k}: {key} differs from megatron-core")
    for k in range(min(check_dense, n)):
        rebuilt = attention_mask_from_cu_seqlens(mine[k]["cu_seqlens"], seq_length)
        if not torch.equal(rebuilt, reference[k]["attention_mask"]):
            raise Mismatch(f"sample {k}: dense mask rebuilt from cu_seqlens differs")
    eods = [int((s["tokens"] == tok.eod).sum()) for s in mine]
    segs = [int(s["cu_seqlens"].numel() - 1) for s in mine]
    base = rows["megatron_reset_flags_dense_mask"]["samples_per_s"]
    return {
        "corpus": "books (workbook_prefixes, --append-eod)", "seq_length": seq_length, "seed": seed,
        "samples_timed": n, "dataset_length": len(ours), "tokens_in_corpus": int(ours_ds.sequence_lengths.sum()),
        "mean_eod_per_sample": float(np.mean(eods)), "mean_segments_per_sample": float(np.mean(segs)),
        "equal_fields": ["tokens", "labels", "loss_mask", "position_ids"], "equal_for_samples": n,
        "dense_mask_equal_for_samples": min(check_dense, n),
        "methods": rows,
        "speedup_vs_megatron_reset_flags": {k: v["samples_per_s"] / base for k, v in rows.items()},
        "target": "labsupport_compact >= 10x megatron_reset_flags_dense_mask",
    }


# ------------------------------------------------------------------------------------ part 2
def bench_packing(n: int, pack_size: int, repeats: int, nemo_repeats: int) -> dict:

    lengths = sft_like_lengths(n, pack_size=pack_size)
    as_list = lengths.tolist()
    nemo_s, nemo_bins = _best(lambda: nemo_first_fit_decreasing(as_list, pack_size), nemo_repeats)
    nemo_eff = sum(map(sum, nemo_bins)) / (len(nemo_bins) * pack_size)
    rows = {"nemo_first_fit_decreasing": {"seconds": nemo_s, "packs": len(nemo_bins), "efficiency": nemo_eff}}
    for alg in ALGORITHMS:
        s, bins = _best(lambda: pack(lengths, pack_size, alg), repeats)
        rows[alg] = {"seconds": s, "packs": len(bins), "efficiency": packing_efficiency(lengths, bins, pack_size)}
        if alg == "first_fit_decreasing":
            same = [[as_list[i] for i in b] for b in bins.tolist()] == nemo_bins
            if not same:
                raise Mismatch("labsupport first_fit_decreasing packs differ from NeMo's")
    return {
        "lengths": {"n": n, "distribution": "lognormal mean 320 sigma 0.6 clipped 16..pack_size, seed 0",
                    "mean": float(lengths.mean()), "max": int(lengths.max())},
        "pack_size": pack_size, "lower_bound": lower_bound(lengths, pack_size),
        "nemo_reference": NEMO_SOURCE, "same_packs_as_nemo": True,
        "methods": rows,
        "speedup_vs_nemo": {k: rows["nemo_first_fit_decreasing"]["seconds"] / v["seconds"] for k, v in rows.items()},
        "target": "first_fit_decreasing >= 100x NeMo at equal or better efficiency",
    }


def bench_million(n: int, pack_size: int, repeats: int) -> dict:

    lengths = sft_like_lengths(n, seed=1, pack_size=pack_size)
    rows = {}
    for alg in ALGORITHMS:
        s, bins = _best(lambda: pack(lengths, pack_size, alg), repeats)
        rows[alg] = {"seconds": s, "packs": len(bins), "efficiency": packing_efficiency(lengths, bins, pack_size)}
    return {"n": n, "pack_size": pack_size, "lower_bound": lower_bound(lengths, pack_size),
            "mean_length": float(lengths.mean()), "methods": rows, "target": "under 5 s"}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--gpt-samples", type=int, default=100, help="GPT samples timed per method")
    ap.add_argument("--check-dense", type=int, default=50, help="samples whose dense mask is compared")
    ap.add_argument("--pack-n", type=int, default=20_000)
    ap.add_argument("--nemo-repeats", type=int, default=2)
    ap.add_argument("--million", type=int, default=1_000_000)
    ap.add_argument("--pack-size", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)



    with tempfile.TemporaryDirectory() as cache:
        gpt = bench_gpt_samples(args.seq_length, args.gpt_samples, args.repeats, args.check_dense, Path(cache))
    result = {
        "benchmark": "packing: GPT samples with boundary info vs megatron-core; SFT bin packing vs NeMo",
        "parameters": {k: v for k, v in vars(args).items() if k != "out"},
        "timing": "wall clock, time.perf_counter, best of repeats",
        "machine": _machine(),
        "gpt_samples": gpt,
        "packing_20k": bench_packing(args.pack_n, args.pack_size, args.repeats, args.nemo_repeats),
        "packing_1m": bench_million(args.million, args.pack_size, args.repeats),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.out, result)

    g = result["gpt_samples"]
    print(f"GPT samples S={g['seq_length']}: " + ", ".join(
        f"{k} {v['samples_per_s']:.0f}/s (×{g['speedup_vs_megatron_reset_flags'][k]:.1f})"
        for k, v in g["methods"].items()))
    p = result["packing_20k"]
    print(f"pack {p['lengths']['n']} lengths: " + ", ".join(
        f"{k} {v['seconds'] * 1e3:.1f} ms eff {v['efficiency']:.4f} (×{p['speedup_vs_nemo'][k]:.0f})"
        for k, v in p["methods"].items()))
    m = result["packing_1m"]
    print(f"pack {m['n']} lengths: " + ", ".join(f"{k} {v['seconds']:.2f} s" for k, v in m["methods"].items()))
    print(f"wrote {labsupport.display_path(args.out)}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
