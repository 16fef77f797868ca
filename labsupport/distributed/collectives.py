"""Collective communication (집합 통신) — chapter 5: the ring algorithm, the cost model, and
where each collective appears in training.

* :func:`simulate_ring_allreduce` — the ring all-reduce in plain numpy, step by step (the
  figure of which chunk each rank holds), with the bytes each rank sends.
* :func:`all_to_all`, :func:`moe_dispatch_counts` — all-to-all over numpy rank buffers, and the token counts
  it moves when a mixture-of-experts layer dispatches tokens to the ranks holding their experts.
* :func:`bus_bandwidth`, :func:`algo_bandwidth`, :func:`bus_factor` — nccl-tests' algbw/busbw.
* :func:`alpha_beta_time`, :func:`fit_alpha_beta` — the latency–bandwidth (α–β) cost model.
* :func:`training_traffic` — bytes each collective moves per rank per training step (DP, TP, PP,
  ZeRO).

Real process groups are started by :mod:`labsupport.distributed.launch`; the functions that run
inside the ranks (the ring from send/recv among them) are in :mod:`labsupport.distributed.workers`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from labsupport.distributed.launch import run_workers

__all__ = [
    "RingSimulation", "ring_schedule", "simulate_ring_allreduce", "ring_bytes_per_rank", "all_to_all",
    "moe_dispatch_counts",
    "COLLECTIVES", "bus_factor", "algo_bandwidth", "bus_bandwidth", "alpha_beta_time", "fit_alpha_beta",
    "measure_all_reduce", "measure_local_add", "training_traffic", "pipeline_traffic",
]

#: Collectives as torch.distributed spells them, with nccl-tests' busbw factor as a function of n.
_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
COLLECTIVES: tuple[str, ...] = tuple(_FACTORS)


# ----------------------------------------------------------------------------- ring simulation

def ring_schedule(n: int) -> list[list[tuple[int, int, int]]]:
    """The chunked ring all-reduce on ``n`` ranks as a list of 2(n−1) steps; each step is the list
    of ``(src, dst, chunk)`` transfers, one per rank, all happening at once.

    Steps 0..n−2 (reduce-scatter): rank r sends chunk (r−s) mod n to (r+1) mod n, which adds it.
    Steps n−1..2n−3 (all-gather): rank r sends chunk (r+1−s) mod n, which the receiver copies.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"ring_schedule: n (the number of ranks) must be an int ≥ 1, got {n!r}")
    steps = [[(r, (r + 1) % n, (r - s) % n) for r in range(n)] for s in range(n - 1)]
    steps += [[(r, (r + 1) % n, (r + 1 - s) % n) for r in range(n)] for s in range(n - 1)]
    return steps


@dataclass
class RingSimulation:
    """The outcome of :func:`simulate_ring_allreduce` on ``n`` ranks.

    results: per-rank final buffers (each the element-wise sum of all inputs).
    states: ``states[t][r]`` is rank r's buffer after step t (t = 0 is the input; 2(n−1) steps).
    contributors: ``contributors[t][r][c]`` is the sorted tuple of ranks whose data is summed in
        chunk c of rank r after step t (what the figure colours).
    sends: ``sends[t-1]`` lists the ``(src, dst, chunk)`` transfers of step t.
    bounds: chunk c covers ``buffer[bounds[c]:bounds[c+1]]`` (np.array_split sizes).
    bytes_sent: bytes each rank sent in total; 2(n−1)/n · S when the size divides by n.
    """

    n: int
    results: list[np.ndarray]
    states: list[list[np.ndarray]]
    contributors: list[list[list[tuple[int, ...]]]]
    sends: list[list[tuple[int, int, int]]]
    bounds: list[int]
    bytes_sent: list[int] = field(default_factory=list)

    @property
    def reduce_scatter_steps(self) -> int:
        """How many steps the reduce-scatter phase has (n − 1); the all-gather has as many."""
        return self.n - 1

    def phase(self, t: int) -> str:
        """``"input"``, ``"reduce-scatter"`` or ``"all-gather"`` for the state after step t."""
        return "input" if t == 0 else ("reduce-scatter" if t <= self.n - 1 else "all-gather")


def _validate_buffers(buffers: Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(buffers, np.ndarray) and buffers.ndim >= 1:
        buffers = list(buffers)
    if not isinstance(buffers, (list, tuple)) or len(buffers) == 0:
        raise ValueError("buffers must be a non-empty list with one array per rank")
    arrays = [np.asarray(b) for b in buffers]
    for i, a in enumerate(arrays):
        if a.shape != arrays[0].shape:
            raise ValueError(f"buffers[{i}] has shape {a.shape} but buffers[0] has {arrays[0].shape}: "
                             "every rank must hold a tensor of the same shape")
        if a.dtype != arrays[0].dtype:
            raise ValueError(f"buffers[{i}] has dtype {a.dtype} but buffers[0] has {arrays[0].dtype}: "
                             "every rank must hold the same dtype")
    return arrays


def simulate_ring_allreduce(buffers: Sequence[np.ndarray]) -> RingSimulation:
    """Run the chunked ring all-reduce (SUM) on per-rank arrays, in numpy, recording every step.

    buffers: one array per rank, all of the same shape and dtype (n = len(buffers)); any shape,
        flattened and split into n chunks with ``np.array_split`` (chunks may be empty).
    Returns a :class:`RingSimulation`; ``results[r]`` has the input's shape.  All transfers of a
    step read the senders' buffers *before* the step, as on real hardware.  The inputs are not
    modified.
    """
    arrays = _validate_buffers(buffers)
    n, shape = len(arrays), arrays[0].shape
    flat = [a.reshape(-1).copy() for a in arrays]
    size = flat[0].size
    bounds = [0] + list(np.cumsum([len(c) for c in np.array_split(np.empty(size), n)]))
    bounds = [int(b) for b in bounds]
    itemsize = arrays[0].dtype.itemsize

    def sl(c: int) -> slice:
        return slice(bounds[c], bounds[c + 1])

    contrib = [[(r,) for _ in range(n)] for r in range(n)]
    states = [[f.reshape(shape).copy() for f in flat]]
    contributors = [[list(row) for row in contrib]]
    schedule = ring_schedule(n)
    sent = [0] * n
    for t, step in enumerate(schedule):
        reducing = t < n - 1
        payload = [(src, dst, c, flat[src][sl(c)].copy(), contrib[src][c]) for src, dst, c in step]
        for src, dst, c, data, who in payload:
            if reducing:
                flat[dst][sl(c)] += data
                contrib[dst][c] = tuple(sorted(set(contrib[dst][c]) | set(who)))
            else:
                flat[dst][sl(c)] = data
                contrib[dst][c] = who
            sent[src] += data.size * itemsize
        states.append([f.reshape(shape).copy() for f in flat])
        contributors.append([list(row) for row in contrib])
    return RingSimulation(n=n, results=[f.reshape(shape) for f in flat], states=states,
                          contributors=contributors, sends=schedule, bounds=bounds, bytes_sent=sent)


def ring_bytes_per_rank(nbytes: float, world_size: int, algorithm: str = "ring") -> float:
    """Bytes one rank sends in an all-reduce of ``nbytes``: ``"ring"`` 2(n−1)/n·S (chunked, the
    bandwidth-optimal lower bound), ``"naive"`` (n−1)·S (the whole tensor travels around)."""
    n = _check_world(world_size)
    if algorithm == "ring":
        return 2 * (n - 1) / n * nbytes
    if algorithm == "naive":
        return (n - 1) * nbytes
    raise ValueError(f"algorithm must be 'ring' or 'naive', got {algorithm!r}")


# ----------------------------------------------------------------------------- all-to-all

def all_to_all(buffers: Sequence[np.ndarray]) -> list[np.ndarray]:
    """All-to-all over per-rank arrays: rank r sends chunk j of its buffer to rank j, and rank j
    stores it as its chunk r — a transpose of the (rank, chunk) grid.

    buffers: one 1-D array per rank, all of the same length L and dtype (n = len(buffers)); L must
        divide by n (each chunk L/n elements, as ``torch.distributed.all_to_all_single`` with equal splits).
    Returns n arrays of length L: ``out[j] = concat(chunk j of buffers[0], …, chunk j of buffers[n−1])``.
    Each rank sends (n−1)/n·L elements (its own chunk stays), nccl-tests' busbw factor.  Inputs unchanged.
    """
    arrays = _validate_buffers(buffers)
    n = len(arrays)
    if arrays[0].ndim != 1 or arrays[0].size % n:
        raise ValueError(f"all_to_all: each buffer must be 1-D with a length that divides by n={n} ranks, "
                         f"got shape {arrays[0].shape}")
    chunks = [np.split(a, n) for a in arrays]                  # chunks[src][dst]
    return [np.concatenate([chunks[src][dst] for src in range(n)]) for dst in range(n)]


def moe_dispatch_counts(expert_of_token: Sequence[Sequence[int]], experts_per_rank: int) -> np.ndarray:
    """Token counts of expert-parallel MoE dispatch: ``counts[src, dst]`` tokens rank src sends to rank dst.

    expert_of_token: per rank, the expert id each of its tokens is routed to (top-1; ids 0 … E−1,
        experts laid out in blocks: rank d holds experts d·experts_per_rank … (d+1)·experts_per_rank − 1).
    Returns an (n, n) int64 array: row src is that rank's ``input_splits`` (Megatron's name in
    ``MoEAlltoAllTokenDispatcher``), column dst that rank's ``output_splits``; the combine all-to-all
    sends the transpose back.
    """
    n = len(expert_of_token)
    counts = np.zeros((n, n), dtype=np.int64)
    for src, experts in enumerate(expert_of_token):
        dst = np.asarray(experts, dtype=np.int64) // experts_per_rank
        if dst.size and (dst.min() < 0 or dst.max() >= n):
            raise ValueError(f"moe_dispatch_counts: rank {src} routes a token to an expert outside 0 … "
                             f"{n * experts_per_rank - 1}")
        counts[src] = np.bincount(dst, minlength=n)
    return counts


# ----------------------------------------------------------------------------- cost model

def _check_world(world_size: int) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size must be an int ≥ 1 (the number of ranks), got {world_size!r}")
    return int(world_size)


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' busbw/algbw factor: all_reduce 2(n−1)/n; all_gather, reduce_scatter,
    all_to_all (n−1)/n; broadcast, reduce 1.  For all_to_all S is one rank's whole send buffer
    (nccl-tests v2.19.6 ``src/alltoall.cu``, ``AlltoAllGetBw``: ``count * nranks * typesize`` bytes)."""
    if collective not in _FACTORS:
        raise ValueError(f"collective {collective!r} is not one of {', '.join(COLLECTIVES)} "
                         "(spelled as in torch.distributed)")
    return float(_FACTORS[collective](_check_world(world_size)))


def algo_bandwidth(nbytes: float, seconds: float) -> float:
    """algbw in decimal GB/s: S / t / 1e9 (S in bytes, t in seconds)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be ≥ 0, got {nbytes!r}")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0 (a measured time), got {seconds!r}")
    return nbytes / seconds / 1e9


def bus_bandwidth(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """busbw in decimal GB/s as nccl-tests reports it: algbw × :func:`bus_factor`.

    nbytes: the collective's size S in bytes as nccl-tests counts it — the buffer all-reduced or
    broadcast; for all_gather and reduce_scatter the *total* (per-rank size × world_size).
    seconds: time of one operation.  busbw is comparable with the link's bandwidth: a ring on
    links of B GB/s shows busbw → B for large S, whatever the number of ranks.
    """
    factor = bus_factor(collective, world_size)
    return algo_bandwidth(nbytes, seconds) * factor


def _ring_steps(collective: str, n: int) -> tuple[int, float]:
    """(latency steps, bytes factor) of the ring version of ``collective`` on n ranks."""
    factor = bus_factor(collective, n)
    steps = 2 * (n - 1) if collective == "all_reduce" else (n - 1)
    return steps, factor


def alpha_beta_time(collective: str, nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """Predicted seconds of one ring ``collective`` of ``nbytes`` on ``world_size`` ranks.

    T = steps·α + factor·S·β, with α the per-message latency (s), β the seconds per byte of one
    link (1 / bandwidth in B/s), steps = 2(n−1) for all_reduce and n−1 otherwise, factor the busbw
    factor (so for large S, busbw → 1/β).  Broadcast/reduce use the pipelined-chain bound
    (n−1)·α + S·β.  The reduction arithmetic is ignored.
    """
    n = _check_world(world_size)
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError(f"nbytes, alpha and beta must be ≥ 0, got {nbytes!r}, {alpha!r}, {beta!r}")
    steps, factor = _ring_steps(collective, n)
    return steps * alpha + factor * nbytes * beta


def fit_alpha_beta(collective: str, nbytes: Sequence[float], seconds: Sequence[float],
                   world_size: int) -> tuple[float, float]:
    """Least-squares (α, β) of :func:`alpha_beta_time` to measured times, relative errors weighted
    equally (so small and large sizes count alike).  Returns (α seconds, β seconds per byte), both ≥ 0."""
    n = _check_world(world_size)
    s = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if s.shape != t.shape or s.ndim != 1 or len(s) < 2:
        raise ValueError(f"nbytes and seconds must be 1-D of the same length ≥ 2, got {s.shape} and {t.shape}")
    if np.any(t <= 0):
        raise ValueError("seconds must all be > 0")
    steps, factor = _ring_steps(collective, n)
    design = np.stack([np.full_like(s, steps), factor * s], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:   # refit with α = 0
        alpha, beta = 0.0, float(np.sum(design[:, 1]) / np.sum(design[:, 1] ** 2))
    elif beta < 0:  # refit with β = 0
        alpha, beta = float(np.sum(design[:, 0]) / np.sum(design[:, 0] ** 2)), 0.0
    return float(alpha), float(beta)


def measure_all_reduce(world_size: int, sizes: Sequence[int], reps: int | Sequence[int] = 5, *,
                       backend: str = "gloo", impl: str = "dist", timeout: float = 120.0,
                       warmup: int = 1, stat: str = "mean") -> list[float]:
    """Seconds per all-reduce for each size in ``sizes`` (bytes, float32 tensors), measured on a
    fresh process group: the max over ranks (the slowest rank, as nccl-tests reports with
    ``-a 3``; its default averages over ranks) of each rank's time per call.

    reps: timed calls per size (one number or one per size), after ``warmup`` untimed calls.
    stat: ``"mean"`` (one timer around the reps, nccl-tests' way) or ``"median"`` of the calls
    timed one by one — robust to the other processes of a shared CPU, what chapter 5 plots.
    impl: ``"dist"``, ``"ring"`` or ``"naive"``."""
    from labsupport.distributed.workers import time_all_reduce  # noqa: PLC0415 - torch only when measuring (start-up time)

    reps = reps if isinstance(reps, (int, float)) else list(reps)
    per_rank = run_workers(time_all_reduce, world_size, (list(sizes), reps, warmup, impl, "float32", stat),
                           backend=backend, timeout=timeout, echo=False)
    return [max(r[i] for r in per_rank) for i in range(len(sizes))]


def measure_local_add(sizes: Sequence[int], reps: int = 5) -> list[float]:
    """Bandwidth in decimal GB/s of ``np.add(a, b, out=b)`` on float32 buffers of each size (bytes):
    the reduction a gloo rank runs on every segment it receives, alone on this CPU. Counts 3 bytes
    moved per byte of buffer (read a, read b, write b); the median of ``reps`` timed loops."""

    out = []
    for nbytes in sizes:
        a = np.ones(max(int(nbytes) // 4, 1), np.float32)
        b = np.zeros_like(a)
        loops = max(3, (1 << 26) // max(int(nbytes), 1))
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(loops):
                np.add(a, b, out=b)
            times.append((time.perf_counter() - start) / loops)
        out.append(3 * a.nbytes / float(np.median(times)) / 1e9)
    return out


# ----------------------------------------------------------------------------- training traffic

def training_traffic(*, params: float, hidden: int, layers: int, seq_len: int, micro_batch: int,
                     micro_batches: int, dp: int, tp: int, pp: int, grad_bytes: int = 4,
                     act_bytes: int = 2, param_bytes: int = 2, distributed_optimizer: bool = False,
                     sequence_parallel: bool = True) -> list[dict]:
    """Bytes each collective sends per rank in one training step of a Megatron-style 3-D layout.

    params: model parameters; hidden/layers/seq_len: transformer shape; micro_batch: sequences per
    micro-batch; micro_batches: micro-batches per step per data-parallel rank; dp/tp/pp: group sizes;
    grad_bytes: bytes per reduced gradient element — 4 (fp32) by default, as Megatron reduces them with
    ``--bf16`` unless ``--grad-reduce-in-bf16`` (2) (Megatron-LM core_v0.16.1 ``megatron/training/arguments.py``
    sets ``accumulate_allreduce_grads_in_fp32``, which ``training.py`` passes on as
    ``DistributedDataParallelConfig.grad_reduce_in_fp32``; NeMo 2.x ``MegatronMixedPrecision`` defaults
    ``grad_reduce_in_fp32=True``). act_bytes: bytes per activation element (2 = bf16).
    param_bytes: bytes per parameter element the distributed optimizer all-gathers (2 = bf16: it
    gathers ``bucket.param_data`` in the parameters' dtype, megatron-core 0.16.1
    ``distributed/param_and_grad_buffer.py``).
    Rows (dicts): ``parallelism, collective, group, message_bytes, ops_per_step, bytes_per_rank``.

    * DP: one all-reduce of this rank's gradients (params / (tp·pp) elements), or with the
      distributed optimizer (ZeRO-1/2) a reduce-scatter of gradients + an all-gather of updated
      parameters — the same bytes when both have the same element size; with fp32 gradients and
      bf16 parameters the all-gather moves half of what the reduce-scatter does.
    * TP with sequence parallelism: per layer and micro-batch, forward 2 all-gathers + 2
      reduce-scatters of the activation ``micro_batch × seq_len × hidden``, backward the same, as
      Korthikanti et al. (2022) count them (without sequence parallelism: 4 all-reduces, the same
      bytes).  An implementation that re-gathers inputs in the backward pass sends more.
    * PP: per micro-batch, activations go forward and their gradients come back, stage to stage
      (send/recv).  What a rank *sends* depends on its stage (megatron-core 0.16.1,
      ``pipeline_parallel/p2p_communication.py``: ``send_forward`` does nothing on the last stage,
      ``send_backward`` nothing on the first, ``recv_forward``/``recv_backward`` likewise):

      ====================  ==========================  ==========================
      stage                 sends per micro-batch       receives per micro-batch
      ====================  ==========================  ==========================
      first (rank 0)        its output activation       the gradient of that output
      interior              activation + input gradient activation + output gradient
      last (rank pp−1)      the gradient of its input   the activation of its input
      ====================  ==========================  ==========================

      so first and last stages send ``micro_batches`` messages per step, interior stages twice as
      many (one PP row per stage kind; ``stage`` says which).  With sequence parallelism each TP
      rank sends only its 1/tp slice of the sequence (``get_tensor_shapes``), without it the
      whole activation.

    Every row has ``stage``: ``"all"`` for DP and TP, ``"first"``, ``"interior"`` or ``"last"``
    for PP (``"interior"`` only when pp > 2), and ``received_bytes``, what that rank receives.
    Example — pp=2, 8 micro-batches of 4.2 MB: the first stage sends 8 × 4.2 MB of activations
    and receives as much gradient; the last stage the opposite; nobody sends 16 messages.
    """
    for name, v in (("dp", dp), ("tp", tp), ("pp", pp), ("layers", layers), ("micro_batches", micro_batches)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"training_traffic: {name} must be an int ≥ 1, got {v!r}")
    if layers % pp:
        raise ValueError(f"training_traffic: layers ({layers}) must divide by pp ({pp})")
    rows = []
    grads = params / (tp * pp) * grad_bytes
    if distributed_optimizer:
        weights = params / (tp * pp) * param_bytes
        rows.append(_row("DP (ZeRO)", "reduce_scatter", dp, grads, 1, (dp - 1) / dp * grads))
        rows.append(_row("DP (ZeRO)", "all_gather", dp, weights, 1, (dp - 1) / dp * weights))
    else:
        rows.append(_row("DP", "all_reduce", dp, grads, 1, 2 * (dp - 1) / dp * grads))
    act = micro_batch * seq_len * hidden * act_bytes
    tp_ops = 4 * (layers // pp) * micro_batches
    for coll in ("all_gather", "reduce_scatter"):
        rows.append(_row("TP", coll, tp, act, tp_ops, tp_ops * (tp - 1) / tp * act))
    rows.extend(pipeline_traffic(pp, micro_batches, act / tp if sequence_parallel else act))
    return rows


def _row(parallelism: str, collective: str, group: int, message: float, ops: int, sent: float,
         stage: str = "all", received: float | None = None) -> dict:
    return {"parallelism": parallelism, "collective": collective, "group": group, "message_bytes": message,
            "ops_per_step": ops, "bytes_per_rank": sent, "stage": stage,
            "received_bytes": sent if received is None else received}


def pipeline_traffic(pp: int, micro_batches: int, message_bytes: float) -> list[dict]:
    """The PP rows of :func:`training_traffic`: one per stage kind (first, interior, last).

    pp: pipeline stages; micro_batches: per step; message_bytes: one activation (= one gradient)
    crossing one stage boundary, per rank.  ``ops_per_step`` counts the sends of one rank of
    that stage.  Empty when pp == 1 (nothing crosses a boundary).

    >>> [(r["stage"], r["ops_per_step"]) for r in pipeline_traffic(3, 8, 1.0)]
    [('first', 8), ('interior', 16), ('last', 8)]
    """
    if pp == 1:
        return []
    m, msg = micro_batches, message_bytes
    rows = [_row("PP", "send/recv", 2, msg, m, m * msg, "first")]
    if pp > 2:
        rows.append(_row("PP", "send/recv", 2, msg, 2 * m, 2 * m * msg, "interior"))
    rows.append(_row("PP", "send/recv", 2, msg, m, m * msg, "last"))
    return rows
