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
    from matplotlib.patches import Rectangle  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

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
            ax.add_patch(Rectangle((c - 0.45, r - 0.4), 0.9, 0.8, facecolor=(shade, shade, 1.0), edgecolor="0.4",
                                   lw=0.6))
            ax.text(c, r, f"{v:g}", ha="center", va="center", fontsize=7)
    ax.set_title(title, fontsize=9)


def plot_before_after(results: Sequence[Mapping[str, Mapping[str, Sequence[float]]]],
                      collectives: Sequence[str] | None = None):
    """One row per collective, before | after, one line of boxes per rank.

    results: what ``run_workers(guide_collectives, n)`` returned (index = rank)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

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
    """The ring's steps, one panel each: rows = ranks, columns = chunks, the number (and colour)
    in a cell = how many ranks' data that chunk holds (n = fully reduced).  The arrows are the
    step's sends: rank r passes one chunk to rank r+1 (the arrow from the last rank wraps round
    to rank 0); orange arrows are added by the receiver (reduce-scatter phase), green ones copied
    (all-gather phase).  First row: the input and the reduce-scatter steps; second row: the
    all-gather steps."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
    from matplotlib.patches import FancyArrowPatch  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    n, steps = sim.n, len(sim.contributors)
    cols = n  # input + (n−1) reduce-scatter steps on the first row; (n−1) all-gather steps below
    nrows = 2 if n > 1 else 1
    fig, axes = plt.subplots(nrows, cols, figsize=(2.5 * cols + 0.4, 2.45 * nrows * max(1.0, n / 4) + 0.5),
                             squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.set_visible(False)
    for t in range(steps):
        ax = axes[0, t] if t < n else axes[1, t - n + 1]
        ax.set_visible(True)
        counts = np.array([[len(sim.contributors[t][r][c]) for c in range(n)] for r in range(n)])
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=n + 1, aspect="equal")
        for r in range(n):
            for c in range(n):
                full = counts[r, c] == n
                ax.text(c, r, str(counts[r, c]), ha="center", va="center", fontsize=10,
                        color="white" if full else "black", fontweight="bold" if full else "normal")
        if t > 0:
            reducing = t <= n - 1
            for src, dst, c in sim.sends[t - 1]:
                wrap = dst < src
                arrow = FancyArrowPatch((c + 0.3, src + (-0.25 if wrap else 0.25)),
                                        (c + 0.3, dst + (0.25 if wrap else -0.25)),
                                        connectionstyle=f"arc3,rad={-0.5 if wrap else 0.0}",
                                        arrowstyle="-|>", mutation_scale=11, lw=1.4,
                                        color="tab:orange" if reducing else "tab:green")
                ax.add_patch(arrow)
        ax.set_xticks(range(n), [f"chunk {c}" if n <= 4 else f"c{c}" for c in range(n)], fontsize=8)
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)], fontsize=9)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylim(n - 0.5, -0.5)
        ax.grid(False)
        title = "input" if t == 0 else f"step {t}: {'add' if t <= n - 1 else 'copy'} ({sim.phase(t)})"
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"ring all-reduce on {n} ranks — number = how many ranks' data the chunk holds ({n} = fully reduced)\n"
                 "arrows = the step's sends, rank r → rank r+1 (orange: added to the receiver's chunk, green: copied)",
                 fontsize=10)
    return fig


def plot_allreduce_sweep(nbytes: Sequence[float], seconds: Sequence[float], world_size: int,
                         alpha: float | None = None, beta: float | None = None, label: str = "gloo (measured)",
                         spread: tuple[Sequence[float], Sequence[float]] | None = None):
    """Left: time vs size (log–log) with the α–β fit and its latency floor 2(n−1)·α (the model's
    plateau of small messages); right: busbw vs size with the fitted link bandwidth 1/β.
    ``spread``: (lowest, highest) seconds per size over repeated sweeps, drawn as a band."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    s = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.0, 4.6), layout="constrained")
    a1.loglog(s, t * 1e6, "o-", label=label)
    if spread is not None:
        lo, hi = (np.asarray(x, dtype=float) * 1e6 for x in spread)
        a1.fill_between(s, lo, hi, alpha=0.2, label="min–max over sweeps")
    fitted = alpha is not None and beta is not None
    if fitted:
        grid = np.geomspace(s.min(), s.max(), 50)
        model = [alpha_beta_time("all_reduce", g, world_size, alpha, beta) * 1e6 for g in grid]
        a1.loglog(grid, model, "--", color="0.3",
                  label=f"α–β fit: α={alpha * 1e6:.0f} µs, 1/β={1 / beta / 1e9:.2f} GB/s" if beta > 0 else "α–β fit")
        floor = 2 * (world_size - 1) * alpha * 1e6
        if floor > 0:
            a1.axhline(floor, color="tab:red", ls=":", lw=1.2,
                       label=f"latency floor 2(n−1)·α = {floor:.0f} µs")
        if beta > 0 and alpha > 0:
            knee = world_size * alpha / beta
            if s.min() <= knee <= s.max():   # named in the legend, below the plot, so no label runs off it
                a1.axvline(knee, color="0.6", ls=":", lw=1,
                           label=f"knee n·α/β = {knee / 1e3:,.0f} kB: latency-bound left, bandwidth-bound right")
    a1.set_xlabel("message size S (bytes)", fontsize=10)
    a1.set_ylabel("time per all-reduce (µs)", fontsize=10)
    a1.set_title("time per call: measured and the α–β model", fontsize=10)
    a1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    busbw = [bus_bandwidth("all_reduce", x, y, world_size) for x, y in zip(s, t)]
    a2.semilogx(s, busbw, "o-", label=label)
    if fitted and beta > 0:
        a2.axhline(1 / beta / 1e9, color="0.3", ls="--", lw=1, label=f"fitted link 1/β = {1 / beta / 1e9:.2f} GB/s")
    a2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    a2.set_xlabel("message size S (bytes)", fontsize=10)
    a2.set_ylabel("busbw (GB/s)", fontsize=10)
    a2.set_title("small S: latency-bound · large S: bandwidth-bound", fontsize=10)
    return fig
