"""Figures of chapter 5 (NCCL collectives): before/after per rank, the ring's steps, and the
measured all-reduce time and bus bandwidth against the α–β model.

Every function draws on a new matplotlib figure and returns it; the notebook ends the cell with
``plt.show()``.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from labsupport.distributed.collectives import RingSimulation, alpha_beta_time, bus_bandwidth

__all__ = ["plot_before_after", "plot_ring_steps", "plot_allreduce_sweep"]


def _grid(ax, rows: Sequence[Sequence[float]], title: str, width: int) -> None:
    """Draw per-rank value rows as a table of boxes (row = rank)."""
    from matplotlib.patches import Rectangle

    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks(range(len(rows)), [f"rank {r}" for r in range(len(rows))], fontsize=8)
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    vmax = max((abs(v) for row in rows for v in row), default=1) or 1
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            shade = 0.92 - 0.55 * abs(v) / vmax
            ax.add_patch(Rectangle((c - 0.45, r - 0.4), 0.9, 0.8, facecolor=(shade, shade, 1.0), edgecolor="0.4", lw=0.6))
            ax.text(c, r, f"{v:g}", ha="center", va="center", fontsize=7)
    ax.set_title(title, fontsize=9)


def plot_before_after(results: Sequence[Mapping[str, Mapping[str, Sequence[float]]]],
                      collectives: Sequence[str] | None = None):
    """One row per collective, before | after, one line of boxes per rank.

    results: what ``run_workers(seed_collectives, n)`` returned (index = rank)."""
    import matplotlib.pyplot as plt

    collectives = list(collectives or results[0].keys())
    fig, axes = plt.subplots(len(collectives), 2, figsize=(8.5, 1.15 * len(collectives) * (len(results) / 4 + 0.6)),
                             squeeze=False)
    for i, name in enumerate(collectives):
        before = [r[name]["before"] for r in results]
        after = [r[name]["after"] for r in results]
        width = max(len(x) for x in before + after)
        _grid(axes[i, 0], before, f"{name}: before", width)
        _grid(axes[i, 1], after, f"{name}: after", width)
    fig.tight_layout()
    return fig


def plot_ring_steps(sim: RingSimulation):
    """One panel per step of the ring: rows = ranks, columns = chunks, colour = how many ranks'
    data the chunk holds (1 … n); arrows of the step are listed under each panel."""
    import matplotlib.pyplot as plt

    n, steps = sim.n, len(sim.contributors)
    fig, axes = plt.subplots(1, steps, figsize=(1.55 * steps + 0.6, 0.42 * n + 1.3), squeeze=False,
                             layout="constrained")
    for t in range(steps):
        ax = axes[0, t]
        counts = np.array([[len(sim.contributors[t][r][c]) for c in range(n)] for r in range(n)])
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=n, aspect="equal")
        for r in range(n):
            for c in range(n):
                full = counts[r, c] == n
                ax.text(c, r, str(counts[r, c]), ha="center", va="center", fontsize=7,
                        color="white" if full else "black", fontweight="bold" if full else "normal")
        ax.set_xticks(range(n), [f"c{c}" for c in range(n)], fontsize=6)
        ax.set_yticks(range(n), [f"r{r}" for r in range(n)] if t == 0 else [""] * n, fontsize=6)
        ax.grid(False)
        label = "input" if t == 0 else f"step {t}\n{sim.phase(t)}"
        ax.set_title(label, fontsize=7)
    fig.suptitle(f"ring all-reduce on {n} ranks: how many ranks' data each chunk holds "
                 f"(n = {n} means fully reduced)", fontsize=9)
    return fig


def plot_allreduce_sweep(nbytes: Sequence[float], seconds: Sequence[float], world_size: int,
                         alpha: float | None = None, beta: float | None = None, label: str = "gloo (measured)"):
    """Left: time vs size (log–log) with the α–β fit; right: busbw vs size."""
    import matplotlib.pyplot as plt

    s = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.0, 3.4))
    a1.loglog(s, t * 1e6, "o-", label=label)
    if alpha is not None and beta is not None:
        grid = np.geomspace(s.min(), s.max(), 50)
        model = [alpha_beta_time("all_reduce", g, world_size, alpha, beta) * 1e6 for g in grid]
        a1.loglog(grid, model, "--", label=f"α–β fit: α={alpha * 1e6:.0f} µs, 1/β={1 / beta / 1e9:.2f} GB/s"
                  if beta > 0 else "α–β fit")
    a1.set_xlabel("message size S (bytes)")
    a1.set_ylabel("time per all-reduce (µs)")
    a1.legend(fontsize=7)
    busbw = [bus_bandwidth("all_reduce", x, y, world_size) for x, y in zip(s, t)]
    a2.semilogx(s, busbw, "o-")
    a2.set_xlabel("message size S (bytes)")
    a2.set_ylabel("busbw (GB/s)")
    a2.set_title("small S: latency-bound · large S: bandwidth-bound", fontsize=8)
    fig.tight_layout()
    return fig
