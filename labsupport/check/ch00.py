"""Checks for chapter 0 (orientation): parallel layout (q1), memory arithmetic (q2), and q3, a transfer:
the data-parallel group of a GPU in Megatron's rank order. (The book's exercise 5 is checked in chapter 6.)"""
from __future__ import annotations

import warnings

import numpy as np
from omegaconf import OmegaConf

from labsupport.config import ConfigError, parallel_layout
from labsupport.workbook.orientation import megatron_coords, training_memory_gb
from labsupport.check._core import chapter_summary, check, check_seed, expect, short

CHAPTER = "ch00"


summary = chapter_summary(CHAPTER)


def _layout_cfg(devices: int, nodes: int, tp: int, pp: int):
    return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                             "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}})


@check(CHAPTER, "q1", hint="world size = devices × num_nodes; DP = world / (TP × PP); raise ValueError only "
       "when TP × PP does not divide the world size. TP > devices is legal (Megatron-Core accepts it) but "
       "slow: return DP and call warnings.warn(...) once; a layout inside one node must not warn.")
def q1(data_parallel_size) -> str:
    """Checked: DP for 30 valid random layouts (an int), ValueError for 30 that do not divide,
    exactly one warning for the valid layouts whose TP spans nodes and none for the others."""
    rng = np.random.default_rng(check_seed())
    good = bad = spanning = 0
    while good < 30 or bad < 30 or spanning < 5:
        devices = int(rng.choice([1, 2, 4, 8]))
        nodes = int(rng.integers(1, 33))
        tp = int(rng.choice([1, 2, 3, 4, 8, 16]))
        pp = int(rng.choice([1, 2, 3, 4, 5]))
        try:
            layout = parallel_layout(_layout_cfg(devices, nodes, tp, pp))
        except ConfigError:
            layout = None
        if layout is None and bad >= 30:
            continue
        if layout is not None and good >= 30 and (spanning >= 5 or not layout.tp_spans_nodes):
            continue
        call = f"data_parallel_size(devices={devices}, num_nodes={nodes}, tp={tp}, pp={pp})"
        if layout is None:
            try:
                got = data_parallel_size(devices, nodes, tp, pp)
            except ValueError:
                bad += 1
                continue
            expect(False, f"{call} returned {short(got)}; {devices * nodes} GPUs do not divide by "
                          f"tp × pp = {tp * pp}, expected ValueError")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = data_parallel_size(devices, nodes, tp, pp)
            except ValueError as exc:
                expect(False, f"{call} raised ValueError({short(str(exc))}); that layout is legal "
                              f"(tp × pp = {tp * pp} divides {devices * nodes} GPUs)"
                              + (" — TP across nodes is slow, not impossible: warn instead" if tp > devices else ""))
        expect(isinstance(got, (int, np.integer)) and not isinstance(got, bool),
               f"{call} returned {short(got)} ({type(got).__name__}); expected an int")
        expect(got == layout.data_parallel, f"{call} returned {got}, expected {layout.data_parallel}")
        if layout.tp_spans_nodes:
            expect(len(caught) == 1, f"{call}: tp={tp} spans {layout.tp_nodes} nodes of {devices} GPUs; "
                                     f"expected one warnings.warn(...), got {len(caught)}")
            spanning += 1
        elif caught:
            expect(False, f"{call}: TP stays inside one node, but it warned: {short(str(caught[0].message))}")
        good += 1
    return "30 valid random layouts (5 or more with TP across nodes) and 30 that do not divide"


@check(CHAPTER, "q2", hint="full fine-tuning with mixed-precision Adam keeps 16 bytes per parameter "
       "(bf16 weights 2 + grads 2 + fp32 master 4 + Adam m 4 + v 4); bf16 weights alone are 2. "
       "Answer in decimal GB (1e9 bytes).")
def q2(memory_gb) -> str:
    rng = np.random.default_rng(check_seed())
    for _ in range(30):
        n = float(rng.choice([1, 3, 7, 8, 13, 34, 70, 405])) * 1e9 * float(rng.uniform(0.5, 1.5))
        for method in ("bf16_weights", "full_adam"):
            got = memory_gb(n, method)
            want = training_memory_gb(n, method)
            expect(isinstance(got, (int, float, np.floating)) and abs(got - want) <= 1e-6 * want,
                   f"memory_gb({n:.4g}, {method!r}) returned {short(got)}, expected {want:.4g}")
    return "60 random model sizes"


@check(CHAPTER, "q3", hint="Megatron's order tp-cp-ep-dp-pp: rank = tp_rank + TP·(dp_rank + DP·pp_rank). The "
       "DP group of a rank keeps its tp_rank and pp_rank and runs dp_rank over 0..DP-1.")
def q3(data_parallel_group) -> str:
    """Checked: for 40 random layouts and ranks, the sorted list of global ranks that all-reduce gradients with
    ``rank`` (same tp_rank and pp_rank, every dp_rank), including ``rank`` itself."""
    rng = np.random.default_rng(check_seed())
    for _ in range(40):
        tp, pp, dp = (int(rng.choice(v)) for v in ([1, 2, 4, 8], [1, 2, 3, 4], [1, 2, 3, 4, 8]))
        rank = int(rng.integers(0, tp * pp * dp))
        t, p, _ = megatron_coords(rank, tp, pp, dp)
        want = sorted(t + tp * (d + dp * p) for d in range(dp))
        call = f"data_parallel_group(rank={rank}, tp={tp}, pp={pp}, dp={dp})"
        got = data_parallel_group(rank, tp, pp, dp)
        expect(isinstance(got, (list, tuple)) and all(isinstance(x, (int, np.integer)) for x in got),
               f"{call} returned {short(got)}; expected a list of ints")
        expect(sorted(got) == want, f"{call} returned {sorted(got)}, expected {want} (GPU {rank} is "
               f"tp_rank {t}, pp_rank {p})")
    return "40 random layouts and ranks"
