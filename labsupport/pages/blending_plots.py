"""Chapter 3's blending chart: epochs per dataset of a :class:`~labsupport.datasets.blending.BlendReport`
against its warning threshold (chapter 3). The draw function returns the Axes; the notebook calls
``plt.show()``."""
from __future__ import annotations

from labsupport.datasets.blending import BlendReport

__all__ = ["plot_epochs"]


def plot_epochs(report: BlendReport, ax=None, title: str | None = None, ymax: float | None = None):
    """Bar chart of ``report``'s epochs per dataset with the warning threshold; returns the axes.

    ymax: the top of the y axis — pass the same value to panels that are compared side by
    side (default: fits this report and its threshold)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.2))
    colors = ["tab:red" if r.warning else "tab:blue" for r in report.rows]
    ax.bar([r.name for r in report.rows], [r.epochs for r in report.rows], color=colors)
    ax.axhline(report.warn_epochs, color="tab:red", ls="--", lw=1)
    # the threshold is named beside the axis, outside the bars, so it never hides a bar or its value
    ax.annotate(f"warning\nabove {report.warn_epochs:g}", (1.0, report.warn_epochs),
                xycoords=ax.get_yaxis_transform(), xytext=(4, 0), textcoords="offset points", ha="left",
                va="center", fontsize=8, color="tab:red", annotation_clip=False)
    top = ymax if ymax is not None else 1.18 * max([r.epochs for r in report.rows] + [report.warn_epochs])
    for k, r in enumerate(report.rows):
        ax.annotate(f"{r.epochs:.2f}", (k, r.epochs), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, top)
    ax.set_ylabel("epochs (times each document is read)", fontsize=9)
    ax.set_title(title or f"epochs per dataset, blend of {report.size:,} samples", fontsize=10)
    return ax
