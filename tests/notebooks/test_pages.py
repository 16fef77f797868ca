"""Pages of chapters 0–5 as JupyterLab shows them (issue #24): tables as HTML with a stable text form, figures
whose legends and notes stay off the data and inside the figure, the megatron-core note true after a plain
``make lab``, Checkpoints that claim what the chapter runs, and a recap command that names its own tokenizer."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from labsupport.datasets import blending  # noqa: E402
from labsupport.pages import collectives_plots as plots  # noqa: E402
from labsupport.pages import figures  # noqa: E402
from labsupport.pages.blending_plots import plot_epochs  # noqa: E402
from labsupport.pages.optional_megatron import not_installed_note  # noqa: E402
from labsupport.pages.tables import Table, show_table  # noqa: E402
from labsupport.paths import REPO_ROOT  # noqa: E402

CHAPTERS = sorted((REPO_ROOT / "notebooks").glob("0[0-5]_*.ipynb"))


def _nb(name):
    return nbformat.read(REPO_ROOT / "notebooks" / f"{name}.ipynb", as_version=4)


# ----------------------------------------------------------------------------- tables

def test_table_text_and_html_come_from_the_same_rows():
    t = Table(["key", "GB"], [["model.tensor_model_parallel_size", "30.1"], ["<b>", "7"]], numeric=["GB"],
              caption="cost", notes=["a note"])
    text = str(t).splitlines()
    assert text[0] == "cost" and text[-1] == "a note"
    assert text[1].split() == ["key", "GB"]
    assert text[3].startswith("model.tensor_model_parallel_size") and text[3].endswith("30.1")
    assert text[4].endswith("   7"), "numeric columns are right-aligned in the text form"
    html = t._repr_html_()
    assert html.count("<tr>") == 3 and "model.tensor_model_parallel_size" in html.replace("<wbr>", "")
    assert "&lt;b&gt;" in html and "<b>" not in html, "cells are escaped"
    assert 'style="text-align:right; vertical-align:top">30.1' in html


def test_a_row_of_the_wrong_length_is_refused_with_its_index():
    with pytest.raises(ValueError, match=r"row 1 has 1 cells for 2 columns"):
        Table(["a", "b"], [[1, 2], [3]])


def test_show_table_displays_both_forms_and_returns_nothing(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    assert show_table(["a"], [[1]]) is None                    # a call on a cell's last line is not shown twice
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(shown[0])
    assert set(data) >= {"text/plain", "text/html"}
    assert data["text/plain"] == "a\n-\n1"


@pytest.mark.parametrize("name, needle", [
    ("00_orientation", "TP time ÷ compute"),
    ("00_orientation", "what it controls"),
    ("00_orientation", "error or warning"),
    ("00_orientation", "full fine-tune fits?"),
    ("00_orientation", "the Q&amp;A says"),
    ("04_packing_and_masks", "packs not full"),
    ("05_nccl_collectives", "the guide exports"),
    ("05_nccl_collectives", "sent per rank per step GB"),
])
def test_committed_tables_are_html_with_a_text_form(name, needle):
    outs = [o for c in _nb(name).cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/html" in o.get("data", {}) and needle in o["data"]["text/html"]]
    assert len(outs) == 1, f"{name}: expected one HTML table with {needle!r}, found {len(outs)} (re-run the notebook)"
    assert outs[0]["data"]["text/plain"].strip(), "the text form is what nbval compares"


def test_the_generations_table_fits_the_page():
    """The NeMo generations table was clipped on the right in JupyterLab: no cell is a long unbreakable run."""
    cell = next(c for c in _nb("00_orientation").cells if c.cell_type == "markdown" and "| | NeMo 1.x |" in c.source)
    table = [line for line in cell.source.splitlines() if line.startswith("|")]
    for line in table:
        for part in line.split("|"):
            longest = max((len(w) for w in part.split()), default=0)
            assert longest <= 40, f"an unbreakable {longest}-character run in {part.strip()!r}"


# ----------------------------------------------------------------------------- figures

def _inside(fig, artist, renderer):
    box, page = artist.get_window_extent(renderer), fig.bbox
    return box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1


def _overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_starvation_note_is_in_the_legend_below_the_plot():
    ax = figures.draw_starvation({"tokenize every step, 1 core": 341_322.0, "mmap .bin/.idx, 1 core": 43_555_830.0})
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("crosses one GPU at N ≈ 118M" in t for t in labels), labels
    assert not any("crosses" in t.get_text() for t in ax.texts), "no crossing note printed on the plot"
    legend = ax.get_legend().get_window_extent(r)
    assert legend.y1 <= ax.get_window_extent(r).y0 + 1, "the legend sits below the axes, off the data"
    assert all(_inside(fig, a, r) for a in [ax.get_legend(), ax.title, ax.xaxis.label]), "everything on the figure"
    assert fig.get_size_inches()[0] * fig.dpi <= 1000, "fits JupyterLab's output width without scaling"
    plt.close(fig)


@pytest.mark.parametrize("weights", [[0.4, 0.5, 0.1], [0.95, 0.0, 0.05], [0.34, 0.33, 0.33]])
def test_epochs_chart_has_no_legend_over_its_value_labels(weights):
    rep = blending.blend_report(weights, [814, 235, 911], 3906, names=["web", "code", "books"], warn_epochs=4)
    fig, ax = plt.subplots(figsize=(6, 3))
    plot_epochs(rep, ax)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert ax.get_legend() is None
    values = [t for t in ax.texts if re.fullmatch(r"\d+\.\d\d", t.get_text())]
    note = [t for t in ax.texts if t.get_text().startswith("warning")]
    assert len(values) == 3 and len(note) == 1
    assert note[0].get_window_extent(r).x0 >= ax.get_window_extent(r).x1, "the threshold is named outside the bars"
    assert all(v.get_window_extent(r).y1 <= ax.get_window_extent(r).y1 for v in values), "value labels inside the axes"
    assert _inside(fig, note[0], r)
    plt.close(fig)


@pytest.mark.parametrize("alpha", [341e-6, 3e-6, 2e-3])
def test_sweep_labels_stay_on_the_figure(alpha):
    sizes = np.array([1 << k for k in range(10, 23, 2)], float)
    sec = np.array([600, 3000, 1030, 3600, 620, 2200, 4300]) * 1e-6
    fig = plots.plot_allreduce_sweep(sizes, sec, 2, alpha, 1 / 1.23e9, spread=(sec * 0.5, sec * 1.6))
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert not ax.texts, "no free text on the plots: the knee is named in the legend"
        assert ax.get_legend() is not None and _inside(fig, ax.get_legend(), r)
        assert ax.get_legend().get_window_extent(r).y1 <= ax.get_window_extent(r).y0 + 1
        assert not _overlaps(ax.get_legend().get_window_extent(r), ax.get_window_extent(r).shrunk(0.98, 0.98))
    plt.close(fig)


# ----------------------------------------------------------------------------- what the learner is told

def test_megatron_note_is_true_without_it():
    note = not_installed_note("its index", ModuleNotFoundError("No module named 'megatron'"))
    assert "`make setup-crosscheck` installs it" in note
    assert "ModuleNotFoundError" in note and note.endswith("this cell shows its index.")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_chapter_calls_megatron_core_optional(path):
    for i, c in enumerate(nbformat.read(path, as_version=4).cells):
        assert "optional: `make setup-crosscheck`" not in c.source and "optional — `make" not in c.source, \
            f"{path.name} cell {i}: make setup installs megatron-core"
        if c.cell_type == "code" and "except ImportError" in c.source and "megatron" in c.source:
            assert "not_installed_note(" in c.source, \
                f"{path.name} cell {i}: say what the cell would show, and how to get it"


def test_ch02_try_this_names_its_own_tokenizer():
    recap = next(c for c in _nb("02_binary_indexing").cells if c.source.startswith("## Recap"))
    assert "*.model" not in recap.source, "a glob matches every model other chapters trained into work/tokenizer"
    assert "{tok.path}" in recap.source


def test_ch05_shows_init_process_group_in_a_visible_cell():
    cells = _nb("05_nccl_collectives").cells
    started = [c for c in cells if c.cell_type == "code" and "dist.init_process_group(" in c.source]
    assert len(started) == 1 and "destroy_process_group()" in started[0].source
    out = "".join(o.get("text", "") for o in started[0].outputs)
    assert "rank 0 of 1, backend gloo: all_reduce → [1.0, 2.0, 3.0]" in out
    assert "started and destroyed: True" in out
    checkpoint = next(c for c in cells if c.source.startswith("## Checkpoint"))
    assert "*starting a process group by hand*" in checkpoint.source


def test_ch03_checkpoint_claims_the_mix_not_a_trained_model():
    cells = _nb("03_blending").cells
    check = next(c for c in cells if c.source.startswith("## Checkpoint"))
    assert "more code, better coding" not in check.source
    assert "this chapter measures the mix" in check.source
