"""Worker functions of chapter 5 (NCCL collectives): they run *inside* the ranks started by
:func:`labsupport.distributed.launch.run_workers` and return plain Python values.

Everything here assumes ``torch.distributed`` is initialised (run_workers does it).  Results are
returned with ``.tolist()`` so they print the same on CPU (gloo) and CUDA (NCCL).

Contents: the book's four collectives with the NCCL guide's numbers; the NCCL guide's code snippets as
written and corrected; the ring all-reduce from send/recv (chunked, bandwidth-optimal) and the
naive ring that passes the whole tensor; timing loops for the cost model; two deliberately
broken workers (one raises, one hangs) for the failure demos.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Sequence

import torch
import torch.distributed as dist
from labsupport.distributed.launch import clean_message

__all__ = [
    "whoami", "fail_on_rank", "hang_on_rank", "guide_collectives",
    "guide_all_reduce_snippet", "guide_all_gather_stats_snippet", "guide_reduce_scatter_snippet",
    "guide_broadcast_snippet", "ring_all_reduce", "naive_ring_all_reduce", "ring_vs_all_reduce",
    "ring_trace", "exit_on_rank", "all_to_all_demo", "moe_dispatch_demo", "print_rank_lines",
    "time_all_reduce", "rank_device",
]


def rank_device() -> torch.device:
    """This rank's device: ``cuda:<local>`` under NCCL, the CPU under gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _clean(exc: BaseException) -> str:
    """``exc`` as one line, without the library's noise (a worker's result)."""
    return f"{type(exc).__name__}: {clean_message(str(exc))}"


# ----------------------------------------------------------------------------- demos of the launcher

def whoami() -> dict[str, Any]:
    """Rank, world size and backend, as this rank sees them."""
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": dist.get_backend()}


def fail_on_rank(bad_rank: int) -> list[float]:
    """Every rank joins an all-reduce except ``bad_rank``, which raises ValueError first."""
    rank = dist.get_rank()
    if rank == bad_rank:
        raise ValueError(f"rank {rank} found a NaN in its gradients and gave up")
    t = torch.ones(4, device=rank_device())
    dist.all_reduce(t)
    return t.tolist()


def hang_on_rank(bad_rank: int, seconds: float = 3600.0) -> list[float]:
    """Every rank joins an all-reduce except ``bad_rank``, which sleeps (a stuck data loader)."""
    rank = dist.get_rank()
    if rank == bad_rank:
        time.sleep(seconds)
    t = torch.ones(4, device=rank_device())
    dist.all_reduce(t)
    return t.tolist()


# ----------------------------------------------------------------------------- the four collectives

def guide_collectives() -> dict[str, dict[str, list]]:
    """AllReduce, AllGather, ReduceScatter and Broadcast on the NCCL guide's example data.

    With world size 4 the data are exactly the book's: AllReduce of ``[1,2,3] + 3·rank`` gives
    ``[22, 26, 30]``; AllGather of ``[2r+1, 2r+2]`` gives ``[1..8]``; ReduceScatter of
    ``[8r+1 .. 8r+8]`` gives ``[52, 56]``, ``[60, 64]``, ``[68, 72]``, ``[76, 80]``; Broadcast of
    ``[1,2,3,4]`` from rank 0.  Other world sizes extend the same pattern.
    Returns ``{collective: {"before": [...], "after": [...]}}`` for this rank (int64 lists).
    """
    rank, n, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    out: dict[str, dict[str, list]] = {}

    x = torch.tensor([1, 2, 3], device=dev) + 3 * rank
    before = x.tolist()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    out["all_reduce"] = {"before": before, "after": x.tolist()}

    x = torch.tensor([2 * rank + 1, 2 * rank + 2], device=dev)
    gathered = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(gathered, x)
    out["all_gather"] = {"before": x.tolist(), "after": torch.cat(gathered).tolist()}

    x = torch.arange(1, 2 * n + 1, device=dev) + 2 * n * rank
    chunk = torch.empty(2, dtype=x.dtype, device=dev)
    dist.reduce_scatter(chunk, list(x.chunk(n)), op=dist.ReduceOp.SUM)
    out["reduce_scatter"] = {"before": x.tolist(), "after": chunk.tolist()}

    x = torch.tensor([1, 2, 3, 4], device=dev) if rank == 0 else torch.zeros(4, dtype=torch.int64, device=dev)
    before = x.tolist()
    dist.broadcast(x, src=0)
    out["broadcast"] = {"before": before, "after": x.tolist()}
    return out


def all_to_all_demo(per_peer: int = 2) -> dict[str, list]:
    """``dist.all_to_all_single`` on ``[100·rank + 0 … 100·rank + n·per_peer − 1]`` (int64, n·per_peer
    elements): rank r receives chunk r of every rank, in rank order.  Returns ``{"before", "after"}`` lists."""
    rank, n, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    x = torch.arange(n * per_peer, device=dev) + 100 * rank
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    return {"before": x.tolist(), "after": y.tolist()}


def moe_dispatch_demo(expert_of_token: list[list[int]], experts_per_rank: int) -> dict[str, list]:
    """Expert-parallel MoE dispatch and combine with two ``all_to_all_single`` calls (uneven splits).

    expert_of_token: per rank, the expert of each of its tokens (token t of rank r has value 1000·r + t);
    rank d holds experts d·experts_per_rank …  Tokens are sorted by destination rank (stable), the
    counts exchanged, the tokens sent; each "expert" adds 0.5 (tensor + 0.5 as a stand-in), and the
    reverse all-to-all brings the results home.  Returns this rank's ``input_splits``,
    ``output_splits``, the tokens it received and its tokens after the combine, in their original order.
    """
    rank, dev = dist.get_rank(), rank_device()
    experts = torch.tensor(expert_of_token[rank], dtype=torch.int64, device=dev)
    tokens = 1000.0 * rank + torch.arange(len(experts), dtype=torch.float64, device=dev)
    dst = experts // experts_per_rank
    order = torch.argsort(dst, stable=True)                       # permute: group tokens by destination
    input_splits = torch.bincount(dst, minlength=dist.get_world_size())
    output_splits = torch.empty_like(input_splits)
    dist.all_to_all_single(output_splits, input_splits)           # everyone learns what it will receive
    ins, outs = input_splits.tolist(), output_splits.tolist()
    received = torch.empty(sum(outs), dtype=tokens.dtype, device=dev)
    dist.all_to_all_single(received, tokens[order], outs, ins)    # dispatch
    processed = received + 0.5                                    # the local experts' work
    back = torch.empty(len(experts), dtype=tokens.dtype, device=dev)
    dist.all_to_all_single(back, processed, ins, outs)            # combine: the reverse all-to-all
    combined = torch.empty_like(back)
    combined[order] = back                                        # unpermute
    return {"input_splits": ins, "output_splits": outs, "received": received.tolist(), "combined": combined.tolist()}


# ----------------------------------------------------------------------------- the NCCL guide's snippets

def guide_all_reduce_snippet(numel: int = 1024, seed: int = 0) -> dict[str, Any]:
    """the NCCL guide's gradient averaging (``all_reduce(SUM)`` then ``/= world_size``) on this rank's
    device, checked against the mean of every rank's gradients and against ``ReduceOp.AVG``."""
    rank, world_size, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    # guide: torch.randn(1024, device=f"cuda:{rank}")
    gradients = torch.randn(numel, generator=gen, dtype=torch.float64).to(dev)
    local = gradients.clone()
    dist.all_reduce(gradients, op=dist.ReduceOp.SUM)                            # as in the NCCL guide
    gradients /= world_size
    everyone = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(everyone, local)
    expected = torch.stack(everyone).mean(dim=0)
    avg = local.clone()
    try:
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        avg_diff = float((avg - gradients).abs().max())
    except (RuntimeError, ValueError):  # older gloo: no AVG
        avg_diff = None
    return {"max_diff_vs_mean": float((gradients - expected).abs().max()), "max_diff_vs_AVG": avg_diff,
            "first3": [round(v, 6) for v in gradients[:3].tolist()]}


def _batch(rank: int, seed: int) -> torch.Tensor:
    """Rank-dependent data of rank-dependent size (a local batch of a scalar feature)."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    size = 100 * (rank + 1)
    return 10.0 * rank + (1.0 + rank) * torch.randn(size, generator=gen, dtype=torch.float64)


def guide_all_gather_stats_snippet(seed: int = 0) -> dict[str, Any]:
    """the NCCL guide's "global statistics with AllGather" snippet as written, and the correct version.

    As written, ``compute_batch_stats`` returns ``[mean, std]`` per rank, and the global numbers are
    ``stack(all).mean(0)`` / ``stack(all).std(0)``: a mean of means (wrong when batches differ in
    size) and the spread *across ranks* of the per-rank statistics, not the data's std.
    Correct: all-reduce ``[count, sum, sum of squares]`` in float64 and derive mean and std.
    """
    rank, world_size, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    local_batch = _batch(rank, seed).to(dev)

    def compute_batch_stats(batch: torch.Tensor) -> torch.Tensor:
        return torch.stack([batch.mean(), batch.std()])

    local_batch_stats = compute_batch_stats(local_batch)                        # --- as written
    all_batch_stats = [torch.empty_like(local_batch_stats) for _ in range(world_size)]
    dist.all_gather(all_batch_stats, local_batch_stats)
    global_mean = torch.stack(all_batch_stats).mean(dim=0)
    global_std = torch.stack(all_batch_stats).std(dim=0)

    stats = torch.stack([torch.tensor(float(local_batch.numel()), dtype=torch.float64, device=dev),
                         local_batch.sum(), (local_batch ** 2).sum()])           # --- corrected
    dist.all_reduce(stats, op=dist.ReduceOp.SUM)
    count, total, total_sq = stats.tolist()
    mean = total / count
    std = ((total_sq - count * mean ** 2) / (count - 1)) ** 0.5

    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([local_batch.numel()], device=dev))      # --- ground truth
    padded = torch.zeros(int(max(s.item() for s in sizes)), dtype=torch.float64, device=dev)
    padded[: local_batch.numel()] = local_batch
    everything = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(everything, padded)
    data = torch.cat([e[: int(s.item())] for e, s in zip(everything, sizes)])
    return {
        "moments": [float(local_batch.numel()), local_batch.sum().item(), (local_batch ** 2).sum().item()],
        "local": {"n": local_batch.numel(), "mean": round(local_batch_stats[0].item(), 4),
                  "std": round(local_batch_stats[1].item(), 4)},
        "as_written": {"mean": round(global_mean[0].item(), 4), "std_of_means": round(global_std[0].item(), 4),
                       "std_of_stds": round(global_std[1].item(), 4), "mean_of_stds": round(global_mean[1].item(), 4)},
        "corrected": {"mean": round(mean, 4), "std": round(std, 4)},
        "truth": {"mean": round(data.mean().item(), 4), "std": round(data.std().item(), 4)},
    }


def guide_reduce_scatter_snippet(per_rank: int = 2) -> dict[str, Any]:
    """the NCCL guide's ``dist.reduce_scatter(out, [local_output] * world_size)``, then two repairs.

    ``local_output`` has ``per_rank × world_size`` elements (rank r: ``8r+1 .. 8r+8`` for 4 ranks).
    as_written: the output of size ``per_rank`` against a list of whole tensors → an error.
    unsplit: shapes made consistent by making the output whole-size → every rank receives the
        whole sum (an all-reduce that moved world_size times the data), nothing is scattered.
    corrected: the input list is the tensor split into world_size chunks → rank r gets chunk r.
    """
    rank, world_size, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    output_size = per_rank * world_size
    local_output = torch.arange(1, output_size + 1, device=dev) + output_size * rank
    out: dict[str, Any] = {"local_output": local_output.tolist()}

    reduced_output = torch.empty(output_size // world_size, dtype=local_output.dtype, device=dev)
    try:
        dist.reduce_scatter(reduced_output, [local_output] * world_size)
        out["as_written"] = reduced_output.tolist()
    except (RuntimeError, ValueError) as exc:
        out["as_written"] = _clean(exc)

    whole = torch.empty(output_size, dtype=local_output.dtype, device=dev)
    dist.reduce_scatter(whole, [local_output] * world_size)
    out["unsplit"] = whole.tolist()

    reduced_output = torch.empty(output_size // world_size, dtype=local_output.dtype, device=dev)
    dist.reduce_scatter(reduced_output, list(local_output.chunk(world_size)))
    out["corrected"] = reduced_output.tolist()
    return out


def guide_broadcast_snippet() -> dict[str, Any]:
    """the NCCL guide's ``broadcast_object_list([model_state], src=0)`` then ``load_state_dict(model_state)``.

    The broadcast fills the *list* that was passed; the name ``model_state`` still refers to
    ``None`` on every rank but 0.  Corrected: keep the list and read element 0.
    """
    rank = dist.get_rank()
    model_state = {"layer.weight": [1.0, 2.0], "step": 100} if rank == 0 else None   # load_checkpoint()
    dist.broadcast_object_list([model_state], src=0)                              # as written
    as_written = model_state
    holder = [model_state]                                                          # corrected
    dist.broadcast_object_list(holder, src=0)
    return {"as_written": as_written, "corrected": holder[0]}


# ----------------------------------------------------------------------------- ring all-reduce

def _exchange(send: torch.Tensor, recv: torch.Tensor, right: int, left: int) -> int:
    """Send ``send`` to ``right`` while receiving ``recv`` from ``left``; returns bytes sent.
    Empty chunks (fewer elements than ranks) are skipped on both sides alike."""
    if send.numel():
        request = dist.isend(send, right)
    if recv.numel():
        dist.recv(recv, left)
    if send.numel():
        request.wait()
    return send.numel() * send.element_size()


def ring_all_reduce(tensor: torch.Tensor, phase: str = "all") -> tuple[torch.Tensor, int]:
    """The bandwidth-optimal ring all-reduce (SUM) built from send/recv, as NCCL's Ring algorithm.

    The flattened tensor is split into ``n = world_size`` chunks (``torch.tensor_split``, so any
    size works).  Reduce-scatter phase, steps s = 0..n−2: rank r sends chunk (r−s) mod n to rank
    r+1 and adds the chunk it receives from r−1 (chunk (r−s−1) mod n) into its own; afterwards
    rank r holds the fully reduced chunk (r+1) mod n.  All-gather phase, n−1 steps: rank r sends
    chunk (r+1−s) mod n and overwrites chunk (r−s) mod n with what it receives.

    phase: ``"all"`` (the all-reduce), or ``"reduce_scatter"`` to stop after the first phase (the
    returned tensor then holds partial sums except chunk (r+1) mod n).
    Returns ``(result with tensor's shape and dtype, bytes this rank sent)``; each rank sends
    2(n−1) chunks, i.e. 2(n−1)/n · S bytes for a tensor of S bytes divisible by n.
    The input is not modified.
    """
    if phase not in ("all", "reduce_scatter"):
        raise ValueError(f"phase must be 'all' or 'reduce_scatter', got {phase!r}")
    rank, n = dist.get_rank(), dist.get_world_size()
    flat = tensor.detach().clone().reshape(-1)
    if n == 1:
        return flat.reshape(tensor.shape), 0
    chunks = list(flat.tensor_split(n))
    right, left = (rank + 1) % n, (rank - 1) % n
    sent = 0
    for s in range(n - 1):
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        sent += _exchange(chunks[send_i], incoming, right, left)
        chunks[recv_i] += incoming
    if phase == "all":
        for s in range(n - 1):
            send_i, recv_i = (rank + 1 - s) % n, (rank - s) % n
            incoming = torch.empty_like(chunks[recv_i])
            sent += _exchange(chunks[send_i], incoming, right, left)
            chunks[recv_i].copy_(incoming)
    return flat.reshape(tensor.shape), sent


def naive_ring_all_reduce(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The ring of the PyTorch tutorial: the *whole* tensor travels n−1 hops around the ring and
    every rank adds what passes by.  Same result, but each rank sends (n−1) · S bytes instead of
    2(n−1)/n · S.  Returns ``(result, bytes this rank sent)``; the input is not modified."""
    rank, n = dist.get_rank(), dist.get_world_size()
    acc = tensor.detach().clone()
    passing = tensor.detach().clone()
    sent = 0
    for _ in range(n - 1):
        incoming = torch.empty_like(passing)
        sent += _exchange(passing, incoming, (rank + 1) % n, (rank - 1) % n)
        acc += incoming
        passing = incoming
    return acc, sent


def _random_tensor(numel: int, dtype: str, seed: int, rank: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.startswith("int"):
        t = torch.randint(-1000, 1000, (numel,), generator=gen, dtype=getattr(torch, dtype))
    else:
        t = torch.randn(numel, generator=gen, dtype=getattr(torch, dtype))
    return t.to(device)


def ring_vs_all_reduce(numel: int, dtype: str = "float64", seed: int = 0,
                       algorithms: Sequence[str] = ("ring", "naive")) -> dict[str, Any]:
    """Compare the hand-made rings with ``dist.all_reduce`` on this rank's random tensor.

    Returns, per algorithm, ``exact`` (bitwise equal), ``max_abs_diff`` and ``bytes_sent`` by this
    rank, plus ``tensor_bytes`` (S).  Integer dtypes must match exactly; floats may differ in the
    last bits because the additions happen in a different order.
    """
    rank = dist.get_rank()
    x = _random_tensor(numel, dtype, seed, rank, rank_device())
    reference = x.clone()
    dist.all_reduce(reference)
    out: dict[str, Any] = {"tensor_bytes": x.numel() * x.element_size()}
    impl = {"ring": ring_all_reduce, "naive": naive_ring_all_reduce}
    for name in algorithms:
        result, sent = impl[name](x)
        diff = (result.double() - reference.double()).abs().max().item() if numel else 0.0
        out[name] = {"exact": bool(torch.equal(result, reference)), "max_abs_diff": diff, "bytes_sent": sent}
    return out


def ring_trace(numel: int, dtype: str = "int64", seed: int = 0, phase: str = "all") -> dict[str, list]:
    """This rank's random input and its buffer after :func:`ring_all_reduce` (``phase`` as there),
    so the parent can replay the same inputs through the numpy simulation."""
    x = _random_tensor(numel, dtype, seed, dist.get_rank(), rank_device())
    result, sent = ring_all_reduce(x, phase=phase)
    return {"input": x.tolist(), "output": result.tolist(), "bytes_sent": sent}


def print_rank_lines(lines: int = 2) -> int:
    """Print a few lines (to show that run_workers echoes them in rank order)."""
    rank = dist.get_rank()
    for i in range(lines):
        print(f"line {i} of rank {rank}")
    return rank


def exit_on_rank(bad_rank: int, code: int = 3) -> int:
    """``bad_rank`` leaves the process abruptly (``os._exit``), as a crashed worker would."""
    if dist.get_rank() == bad_rank:
        os._exit(code)
    dist.barrier()
    return dist.get_rank()


# ----------------------------------------------------------------------------- timing

def time_all_reduce(sizes: Sequence[int], reps: int | Sequence[int] = 5, warmup: int = 1, impl: str = "dist",
                    dtype: str = "float32", stat: str = "mean") -> list[float]:
    """Seconds per all-reduce of each size in ``sizes`` (bytes), measured on this rank.

    reps: timed calls per size (one number, or one per size).  warmup: untimed calls before them
    (the first calls of a size pay for buffers and connections).  impl: ``"dist"``
    (``dist.all_reduce``), ``"ring"`` or ``"naive"`` (the rings above).  stat: ``"mean"`` — one
    timer around the ``reps`` calls, as nccl-tests does — or ``"median"`` — each call timed
    alone, the median kept, so a call delayed by another process on a shared CPU does not move
    the result.  A barrier precedes each size; the caller takes the max over ranks (nccl-tests'
    ``-a 3``; its default is the average).
    """
    fns = {"dist": lambda t: dist.all_reduce(t), "ring": ring_all_reduce, "naive": naive_ring_all_reduce}
    if impl not in fns:
        raise ValueError(f"impl must be one of {sorted(fns)}, got {impl!r}")
    if stat not in ("mean", "median"):
        raise ValueError(f"stat must be 'mean' or 'median', got {stat!r}")
    fn, dev = fns[impl], rank_device()
    element = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    per_size = [int(reps)] * len(sizes) if isinstance(reps, (int, float)) else [int(r) for r in reps]
    if len(per_size) != len(sizes) or min(per_size, default=1) < 1:
        raise ValueError(f"reps must be ≥ 1, one number or one per size; got {reps!r} for {len(sizes)} sizes")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    seconds = []
    for nbytes, reps in zip(sizes, per_size):
        t = torch.ones(max(1, int(nbytes) // element), dtype=getattr(torch, dtype), device=dev)
        for _ in range(warmup):
            fn(t)
        sync()
        dist.barrier()
        if stat == "mean":
            start = time.perf_counter()
            for _ in range(reps):
                fn(t)
            sync()
            seconds.append((time.perf_counter() - start) / reps)
            continue
        calls = []
        for _ in range(reps):
            start = time.perf_counter()
            fn(t)
            sync()
            calls.append(time.perf_counter() - start)
        seconds.append(float(statistics.median(calls)))
    return seconds
