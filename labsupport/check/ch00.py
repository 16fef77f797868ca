"""Checks for chapter 0 (orientation): parallel layout (q1), memory arithmetic (q2), and q3, a transfer:
the data-parallel group of a GPU in Megatron's rank order. (The book's exercise 5 is checked in chapter 6.)"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from labsupport.config import ConfigError, parallel_layout
from labsupport.workbook.orientation import megatron_coords, training_memory_gb
from labsupport.check._core import chapter_summary, check, check_seed, expect, short

CHAPTER = "ch00"


summary = chapter_summary(CHAPTER)


def _q1_mistake(got: int, devices: int, nodes: int, tp: int, pp: int) -> str:
    """A known wrong data-parallel size, named (only when ``got`` is exactly that wrong value)."""
    world = devices * nodes
    if nodes > 1 and got == devices // (tp * pp):
        return f" — that is the replicas inside ONE node; the world is devices × num_nodes = {world} GPUs"
    if pp > 1 and got == world // tp:
        return f" — that divides by TP only; each replica also spans PP = {pp} pipeline stages"
    return ""


def _layout_cfg(devices: int, nodes: int, tp: int, pp: int):
    return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                             "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}})


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the formula
    "reread chapter 0's 'Derived values: how 32 GPUs are divided': TP and PP split ONE copy of the model over "
    "some GPUs; how many copies fit in all the GPUs, and when does that not come out whole?",
    "world size = every GPU of every node; one model replica takes TP × PP of them and DP counts the replicas. "
    "The rule this function can check is a world size that TP × PP divides (Megatron-Core has more — heads and KV "
    "groups by TP, layers by PP — but they need the model's shape). TP wider than one node is legal but slow "
    "(its traffic leaves NVLink): warn once, do not raise.",
    "world size = devices × num_nodes; DP = world / (TP × PP); raise ValueError "
    "when TP × PP does not divide the world size. TP > devices is legal (Megatron-Core accepts it) but "
    "slow: return DP and call warnings.warn(...) once; a layout inside one node must not warn."))
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
        expect(got == layout.data_parallel, f"{call} returned {got}, expected {layout.data_parallel}"
               + _q1_mistake(int(got), devices, nodes, tp, pp))
        if layout.tp_spans_nodes:
            expect(len(caught) == 1, f"{call}: tp={tp} spans {layout.tp_nodes} nodes of {devices} GPUs; "
                                     f"expected one warnings.warn(...), got {len(caught)}")
            spanning += 1
        elif caught:
            expect(False, f"{call}: TP stays inside one node, but it warned: {short(str(caught[0].message))}")
        good += 1
    return "30 valid random layouts (5 or more with TP across nodes) and 30 that do not divide"


def _q2_mistake(got: Any, n_params: float, want: float, method: str) -> str:
    """A known wrong memory figure, named: bytes, GiB, ZeRO's 16 bytes, or another whole number of bytes."""
    if not isinstance(got, (int, float, np.floating)) or isinstance(got, bool) or not np.isfinite(got):
        return ""
    if np.isclose(got, want * 1e9, rtol=1e-6):
        return " — that is bytes; divide by 1e9 for decimal GB"
    if np.isclose(got, want * 1e9 / 2 ** 30, rtol=1e-6):
        return " — that is GiB (2**30 bytes); the exercise asks for decimal GB (1e9 bytes)"
    per_param = float(got) * 1e9 / n_params
    if method in ("megatron_adam", "megatron_distopt") and np.isclose(per_param, 16.0, rtol=1e-6):
        return (" — that is ZeRO's 16 bytes (16-bit gradients); Megatron with --bf16 keeps its gradients in fp32 "
                "(4 bytes) unless --grad-reduce-in-bf16")
    want_per_param = want * 1e9 / n_params
    if not np.isclose(per_param, want_per_param, rtol=1e-6) and abs(per_param - round(per_param)) <= 1e-6 * max(per_param, 1.0) \
            and 1 <= round(per_param) <= 32:
        return f" — that is {round(per_param)} bytes per parameter; this method needs {want_per_param:g}"
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 0's 'Checking a claim of the Kubernetes guide: \"8B on 1× A100 80GB\"': memory is the "
    "number of parameters times the bytes each one needs; what is kept per parameter for each method?",
    "inference-style weights need only the bf16 weights; Megatron's Adam with --bf16 also keeps fp32 gradients, "
    "an fp32 master copy of the weights and Adam's two fp32 moments. The distributed optimizer splits the last "
    "three (the optimizer state) over the dp replicas. Count bytes per parameter, multiply by n_params and "
    "express the result in decimal GB.",
    "bf16 weights alone are 2 bytes per parameter; Megatron's Adam with --bf16 is 18 (bf16 weights 2 + fp32 "
    "grads 4 + fp32 master 4 + Adam m 4 + v 4); its distributed optimizer 6 + 12/dp. "
    "GB = n_params × bytes per parameter / 1e9 (decimal GB, 1e9 bytes)."))
def q2(memory_gb) -> str:
    """Checked: ``memory_gb(n_params, method, dp)`` for 30 random model sizes, the three methods, and a
    random data-parallel size dp (it changes only ``"megatron_distopt"``)."""
    rng = np.random.default_rng(check_seed())
    for _ in range(30):
        n = float(rng.choice([1, 3, 7, 8, 13, 34, 70, 405])) * 1e9 * float(rng.uniform(0.5, 1.5))
        dp = int(rng.choice([1, 2, 4, 8, 16, 64]))
        for method in ("bf16_weights", "megatron_adam", "megatron_distopt"):
            got = memory_gb(n, method, dp)
            want = training_memory_gb(n, method, dp)
            expect(isinstance(got, (int, float, np.floating)) and abs(got - want) <= 1e-6 * want,
                   f"memory_gb({n:.4g}, {method!r}, dp={dp}) returned {short(got)}, expected {want:.4g}"
                   + _q2_mistake(got, n, want, method))
    return "30 random model sizes × 3 methods, random data-parallel sizes"


def _q3_mistake(got: list[int], rank: int, tp: int, pp: int, dp: int) -> str:
    """A known wrong group, named: the TP group, the pipeline group, or the DP group in the order DP-fastest."""
    t, p, d = megatron_coords(rank, tp, pp, dp)
    if got == sorted(x + tp * (d + dp * p) for x in range(tp)):
        return " — that is the tensor-parallel group (the GPUs that split one layer), not the replicas"
    if got == sorted(t + tp * (d + dp * q) for q in range(pp)):
        return " — that is the pipeline group (the stages of one replica), not the replicas"
    if got == sorted(x + dp * (rank // dp % tp) + dp * tp * (rank // (dp * tp)) for x in range(dp)):
        return " — that is the DP group if DP varied fastest; in Megatron's order TP varies fastest"
    return ""


@check(CHAPTER, "q3", hint=(
    "reread chapter 0's 'Derived values' cell that printed every GPU's coordinates: the GPUs that average "
    "gradients hold the same slice of the model — which coordinates do they share, which one differs?",
    "split the rank into (tp_rank, dp_rank, pp_rank) in Megatron's order tp-cp-ep-dp-pp (TP varies fastest, "
    "then DP, then PP); the DP group keeps tp_rank and pp_rank and takes every dp_rank; turn each back into a rank.",
    "rank = tp_rank + TP·(dp_rank + DP·pp_rank), so tp_rank = rank mod TP and pp_rank = rank // (TP·DP). The "
    "DP group of a rank keeps its tp_rank and pp_rank and runs dp_rank over 0..DP-1."))
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
               f"tp_rank {t}, pp_rank {p})" + _q3_mistake(sorted(int(x) for x in got), rank, tp, pp, dp))
    return "40 random layouts and ranks"
