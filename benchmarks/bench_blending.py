"""Chapter 3 benchmark: building the blending indices, labsupport (numpy) vs megatron-core (C++).

``labsupport.datasets.blending.build_blending_indices`` against megatron-core's compiled
``helpers.build_blending_indices``, called the way Megatron's ``BlendedDataset._build_indices``
calls it (two ``numpy.zeros`` outputs, then the helper), for 10 M samples over 3 datasets (the
book's 0.6 / 0.25 / 0.15) and over 50 datasets (random weights, seed 0, normalised).  Each run's
output is compared element by element with Megatron's; the timings are interleaved, and the best
of ``--repeats`` runs is kept for each side.  Target: identical output, at most 2× Megatron's time.

Why numpy and not numba: numba is not a dependency of the workbook.  The numpy version runs the
sequential rule in a few thousand chunks side by side (one numpy operation advances every chunk
by one step), starts each chunk from a guessed state and proves every chunk exact afterwards (see
``labsupport/datasets/blending.py``).

Run: ``.venv/bin/python -m benchmarks.bench_blending``; writes ``benchmarks/results/blending.json``.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from benchmarks._common import machine_info, write_results, require

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "blending.json"


def _machine() -> dict:
    return machine_info("numpy", "torch", "megatron-core")

def _helpers():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
        from megatron.core.datasets import helpers
    return helpers


def megatron_indices(helpers, weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """What ``BlendedDataset._build_indices`` does for a given size."""
    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(dataset_index, dataset_sample_index, weights, len(weights), size, False)
    return dataset_index, dataset_sample_index


def cases() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    w50 = rng.random(50)
    return [("3 datasets (book weights 0.6/0.25/0.15)", np.array([0.6, 0.25, 0.15])),
            ("50 datasets (random weights, seed 0)", w50 / w50.sum())]


def run(size: int, repeats: int) -> dict:
    from labsupport.datasets import blending

    helpers = _helpers()
    out = {}
    for name, w in cases():
        weights = blending.normalize_weights(w)
        warr = np.asarray(weights, dtype=np.float64)
        ref = megatron_indices(helpers, warr, size)                     # warm-up + reference
        stats: dict = {}
        ours = blending._chunked(warr, size, stats=stats)
        identical = bool(np.array_equal(ours[0], ref[0]) and np.array_equal(ours[1], ref[1]))
        del ours
        t_meg, t_lab = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = megatron_indices(helpers, warr, size)
            t_meg.append(time.perf_counter() - t0)
            del r
            t0 = time.perf_counter()
            r = blending.build_blending_indices(weights, size)
            t_lab.append(time.perf_counter() - t0)
            identical = identical and bool(np.array_equal(r[0], ref[0]) and np.array_equal(r[1], ref[1]))
            del r
        out[name] = {
            "datasets": int(warr.size), "min_weight": float(warr.min()), "size": size,
            "identical_output": identical,
            "megatron_seconds": t_meg, "labsupport_seconds": t_lab,
            "megatron_best_s": min(t_meg), "labsupport_best_s": min(t_lab),
            "ratio_labsupport_over_megatron": min(t_lab) / min(t_meg),
            "megatron_samples_per_s": size / min(t_meg), "labsupport_samples_per_s": size / min(t_lab),
            "labsupport_chunking": stats,
        }
        print(f"{name}: identical={identical}  megatron {min(t_meg):.3f} s  labsupport {min(t_lab):.3f} s  "
              f"ratio {min(t_lab) / min(t_meg):.2f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_blending", description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=10_000_000, help="blended samples (default 10M)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved runs per side; the best is kept")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    results = {
        "benchmark": "blending",
        "what": "build_blending_indices: labsupport (numpy, chunks side by side + verification) vs "
                "megatron-core helpers.build_blending_indices (compiled C++), outputs allocated by each side",
        "method": "numpy",
        "target": "identical output and at most 2x megatron-core's time",
        "parameters": {"size": args.size, "repeats": args.repeats, "timing": "best of interleaved runs"},
        "machine": _machine(),
        "cases": run(args.size, args.repeats),
    }
    results["all_identical"] = all(c["identical_output"] for c in results["cases"].values())
    different = [name for name, c in results["cases"].items() if not c["identical_output"]]
    require(not different, f"build_blending_indices differs from megatron-core's on {', '.join(different)}")
    results["max_ratio"] = max(c["ratio_labsupport_over_megatron"] for c in results["cases"].values())
    write_results(args.out, results)
    print(f"wrote {args.out.relative_to(Path.cwd()) if args.out.is_relative_to(Path.cwd()) else args.out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
