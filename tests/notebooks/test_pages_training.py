"""Chapter 6's page (issue #24): the trace panel's document limit follows its domain, the trace
figure labels its axes and colours only the traced document, and the speed fixes of the
chapter's default run keep what they replace (the data-plan digest, the finite-gradient check)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from labsupport.training.data import NaiveTextDataset, build_blend
from labsupport.training.data_plan import consumed_digest
from labsupport.training.faults import TrainingError, check_finite
from labsupport.training.settings import load_settings
from labsupport.training.trace import trace_document
from labsupport.training.trainer import train
from labsupport.pages.trace_panel import (TracePanel, document_count, documents_read, draw_trace, not_read_note,
                                          pick_document, trace_table)


@pytest.fixture(scope="module")
def traced():
    settings = load_settings(overrides=["trainer.max_steps=4"])
    blend = build_blend(settings)
    run = train(settings, keep_token_losses=True, show_progress=False)
    return settings, blend, run


def test_panel_limit_follows_the_domain_and_clamps_the_document(traced, capsys):
    settings, blend, run = traced
    counts = {name: document_count(blend, settings, name) for name in settings.names}
    assert counts["code"] > counts["web"]                 # the case of the issue: 379 fits code, not web
    panel = TracePanel(blend, settings, run, "code", counts["web"] + 10)
    panel.build()
    doc = panel.widgets["document"]
    assert doc.max == counts["code"] - 1 and doc.value == counts["web"] + 10
    redraws = []
    panel.redraw = lambda: redraws.append((panel.domain, panel.document))
    panel.widgets["domain"].value = "web"                 # the callback the dropdown fires
    assert (doc.max, doc.value) == (counts["web"] - 1, counts["web"] - 1)
    assert redraws == [("web", counts["web"] - 1)]       # one redraw, already in range
    panel.widgets["domain"].value = "code"                # a larger domain: the limit rises, the value stays
    assert (doc.max, doc.value) == (counts["code"] - 1, counts["web"] - 1)
    doc.value = counts["code"] + 50                       # typed past the limit: the box clamps it
    assert doc.value == counts["code"] - 1
    assert "out of range" not in capsys.readouterr().out


def test_panel_limits_rule(traced):
    settings, blend, run = traced
    panel = TracePanel(blend, settings, run, "code", 0)
    web = document_count(blend, settings, "web")
    assert panel.limits("web", 10_000) == (web - 1, web - 1)
    assert panel.limits("web", -3) == (web - 1, 0)
    assert panel.limits("web", 5) == (web - 1, 5)
    trace_document(blend, settings, "web", panel.limits("web", 379)[1], run)   # never out of range


def test_default_trace_is_a_document_that_shares_its_sample(traced):
    settings, blend, run = traced
    doc = pick_document(blend, settings, "code", run)
    trace = trace_document(blend, settings, "code", doc, run)
    first = trace.occurrences[0]
    assert first.step == 1 and first.blend_index < settings.config.model.global_batch_size
    lo, hi = first.span
    assert 0 < hi - lo < settings.config.model.encoder_seq_length                # a part of the sample, not all of it
    text = repr(trace_table(trace))
    assert f"code document {doc}" in text and "ch2 .idx" in text
    assert "<table>" in trace_table(trace)._repr_html_()


def test_trace_figure_labels_axes_and_colours_only_the_document(traced):
    settings, blend, run = traced
    doc = pick_document(blend, settings, "code", run)
    trace = trace_document(blend, settings, "code", doc, run)
    lo, hi = trace.occurrences[0].span
    fig = draw_trace(trace, blend, run, settings.config.model.encoder_seq_length)
    mask_ax, loss_ax = fig.axes
    for ax in (mask_ax, loss_ax):
        assert ax.get_xlabel() and ax.get_ylabel() and "(" in ax.get_xlabel() + ax.get_ylabel()   # units
    orange = matplotlib.colors.to_rgba("tab:orange")
    bars = [p for p in loss_ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    coloured = sorted(round(p.get_x() + p.get_width() / 2) for p in bars if p.get_facecolor() == orange)
    assert coloured == list(range(lo, hi))
    assert len(bars) == settings.config.model.encoder_seq_length
    outline = [p for p in mask_ax.patches if not p.get_fill()]
    assert len(outline) == 1 and outline[0].get_width() == hi - lo
    matplotlib.pyplot.close(fig)


class _Counting:
    """A dataset wrapper that counts reads (the data-plan digest used to read every sample twice)."""

    def __init__(self, inner):
        self.inner, self.reads = inner, 0
        self.dataset_index, self.dataset_sample_index = inner.dataset_index, inner.dataset_sample_index

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        self.reads += 1
        return self.inner[i]


def test_naive_dataset_is_read_once_per_sample_and_the_digest_is_unchanged(traced):
    settings, blend, _ = traced
    from labsupport.datasets.tokenizer import Tokenizer, read_documents
    from labsupport.paths import data_file

    tok = Tokenizer(settings.tokenizer_path)
    naive = _Counting(NaiveTextDataset([read_documents(data_file(n))[:20] for n in settings.names], tok,
                                       settings.config.model.encoder_seq_length, blend))
    steps = 3
    train(settings, dataset=naive, stop_after=steps, show_progress=False)
    assert naive.reads == steps * settings.config.model.global_batch_size
    consumed = steps * settings.config.model.global_batch_size
    read_again = consumed_digest(naive.inner, consumed).hexdigest()
    known = {i: naive.inner[i]["tokens"] for i in range(0, consumed, 2)}       # half known, half read
    assert consumed_digest(naive.inner, consumed, known=known).hexdigest() == read_again
    wrong = {0: torch.zeros_like(known[0])}
    assert consumed_digest(naive.inner, consumed, known=wrong).hexdigest() != read_again


def test_finite_check_names_the_parameter_and_ignores_a_sum_that_only_overflows():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    check_finite(1.0, model, 3)
    model[1].weight.grad[0, 1] = float("nan")
    with pytest.raises(TrainingError, match=r"step 3: the gradient of 1\.weight"):
        check_finite(1.0, model, 3)
    model[1].weight.grad.fill_(3e38)                      # finite, but float32 sums of it overflow
    check_finite(1.0, model, 3)
    model[0].bias.grad[2] = -float("inf")
    with pytest.raises(TrainingError, match=r"0\.bias"):
        check_finite(1.0, model, 3)
    with pytest.raises(TrainingError, match="the loss is nan"):
        check_finite(float("nan"), model, 4)


def test_token_losses_on_flat_rows_equal_the_class_axis_form(traced):
    from torch.nn import functional as F

    from labsupport.training.data import collate
    from labsupport.training.trainer import token_losses

    settings, blend, run = traced
    idx = list(range(settings.config.model.micro_batch_size))
    batch = collate([blend[i] for i in idx], idx, True)
    with torch.no_grad():
        flat = token_losses(run.model, batch)
        logits = run.model(batch.tokens, batch.position_ids, batch.masked)
        by_class_axis = F.cross_entropy(logits.float().transpose(1, 2), batch.labels, reduction="none")
    assert flat.shape == batch.labels.shape
    torch.testing.assert_close(flat, by_class_axis, rtol=1e-6, atol=1e-5)


def test_panel_redraws_table_and_figure_for_every_document(traced, monkeypatch, capsys):
    """Issue #29: the panel redrew only its table (the figure stayed on the first document), and a
    document the run never read showed "0 occurrence(s)" with no word of why."""
    import IPython.display

    settings, blend, run = traced
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    read = documents_read(blend, settings, "code")
    assert read and all(trace_document(blend, settings, "code", k, run).occurrences for k in read[:3])
    unread = next(k for k in range(document_count(blend, settings, "code")) if k not in read)
    assert not trace_document(blend, settings, "code", unread, run).occurrences
    panel = TracePanel(blend, settings, run, "code", read[0])
    panel.build()
    titles = []
    for k in read[1:3]:                                      # not read[0], the value it starts with
        shown.clear()
        panel.widgets["document"].value = k                  # the callback the box fires
        table, fig = shown
        assert f"code document {k}:" in repr(table)
        titles.append(fig.axes[0].get_title())
        assert f"doc {k} outlined" in titles[-1]
    assert titles[0] != titles[1]
    shown.clear()
    capsys.readouterr()
    panel.widgets["document"].value = unread
    assert len(shown) == 1 and "0 occurrence(s)" in repr(shown[0])   # the table, no figure
    note = capsys.readouterr().out
    assert f"code document {unread} is in none of the {len(blend)} samples this run reads" in note
    near = [int(x) for x in note.rsplit(": ", 1)[1].split(", ")]
    assert near and set(near) <= set(read)
    assert not_read_note(blend, settings, "code", unread) in note
