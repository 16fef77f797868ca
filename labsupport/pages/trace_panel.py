"""Chapter 6's *Trace one document* page: which document to trace, its table, its figure, and
the interactive panel (domain, document) with its static fallback.

* :func:`pick_document` — a document of one domain read in the run's first step that shares
  its packed sample with another document, so the figure shows its own mask block;
* :func:`trace_table` — :meth:`DocumentTrace.rows` as an HTML :class:`~labsupport.pages.tables.Table`;
* :func:`draw_trace` — the sample's attention mask with the document's block outlined, and the
  per-token loss with only the document's tokens coloured;
* :func:`documents_read` and :func:`not_read_note` — which documents of a domain the run read, and
  the line the panel shows for one it did not (a short run reads a small part of each corpus);
* :class:`TracePanel` — a domain dropdown and a document box whose upper limit follows the
  domain (web has fewer documents than code): :meth:`TracePanel.limits` is the rule,
  :meth:`TracePanel.on_domain` the callback that applies it before the table and the figure are
  redrawn (:meth:`TracePanel.redraw`: both, for every document chosen).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from labsupport.training.trace import DocumentTrace, documents_in_sample, trace_document
from labsupport.pages.tables import Table
from labsupport.datasets.gpt_samples import attention_mask_from_cu_seqlens

__all__ = ["document_count", "pick_document", "trace_table", "draw_trace", "documents_read", "not_read_note",
           "TracePanel"]


def document_count(blend: Any, settings: Any, domain: str) -> int:
    """Documents in ``domain``'s ``.idx`` (the trace's valid numbers are ``0 … count − 1``)."""
    ds = blend.datasets[settings.names.index(domain)].dataset
    return len(ds.document_indices) - 1


def pick_document(blend: Any, settings: Any, domain: str, run: Any = None) -> int:
    """The document of ``domain`` to trace by default: in the first step's samples, the first
    one that shares its sample with another document (its block is then a part of the mask);
    else the first of ``domain`` read in that step; else document 0."""
    first = None
    for i in range(min(settings.config.model.global_batch_size, len(blend))):
        d, docs = documents_in_sample(blend, i)
        if settings.names[d] != domain:
            continue
        first = docs[0] if first is None else first
        if len(set(docs)) > 1:
            for doc in docs:
                occ = [o for o in trace_document(blend, settings, domain, doc, run).occurrences if o.blend_index == i]
                if occ and occ[0].span[1] - occ[0].span[0] < settings.config.model.encoder_seq_length:
                    return doc
    return 0 if first is None else first


def trace_table(trace: DocumentTrace, max_occurrences: int = 3) -> Table:
    """The trace's (stage, what, value) rows as a table."""
    title = f"{trace.domain} document {trace.document}: {len(trace.occurrences)} occurrence(s) in this run's blend"
    return Table(["stage", "what", "value"], [list(r) for r in trace.rows(max_occurrences)], caption=title)


def draw_trace(trace: DocumentTrace, blend: Any, run: Any, seq_length: int, occurrence: int = 0,
               figsize: tuple[float, float] = (10.0, 3.6)):
    """Two panels for one occurrence of the traced document (default its first):
    left, the packed sample's attention mask (query × key token positions; dark = may attend)
    with the document's block outlined; right, that sample's per-token loss (nats) at the step
    that read it, the document's tokens coloured and the rest grey.  Returns the figure."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
    from matplotlib.patches import Rectangle  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)


    occ = trace.occurrences[occurrence]
    lo, hi = occ.span
    item = blend[occ.blend_index]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=figsize, gridspec_kw={"width_ratios": [1, 1.6]})
    allowed = (~attention_mask_from_cu_seqlens(item["cu_seqlens"], seq_length)[0]).numpy()
    a1.imshow(allowed, cmap="Greys", vmin=0, vmax=1.6, interpolation="nearest")
    a1.add_patch(Rectangle((lo - 0.5, lo - 0.5), hi - lo, hi - lo, fill=False, ec="tab:orange", lw=2.2))
    a1.set_xlabel("key position (token)")
    a1.set_ylabel("query position (token)")
    a1.grid(False)
    a1.set_title(f"mask of blend sample {occ.blend_index} (dark: may attend),\ndoc {trace.document} outlined",
                 fontsize=9)
    losses = np.asarray(run.token_losses[occ.blend_index])
    inside = np.zeros(seq_length, dtype=bool)
    inside[lo:hi] = True
    pos = np.arange(seq_length)
    a2.bar(pos[~inside], losses[~inside], color="0.75", width=0.9, label="other documents")
    a2.bar(pos[inside], losses[inside], color="tab:orange", width=0.9,
           label=f"doc {trace.document} (tokens {lo}…{hi - 1})")
    a2.set_xlim(-1, seq_length)
    a2.set_ylim(0, 1.3 * float(losses.max()))        # headroom: the legend sits above the bars
    a2.set_xlabel("position in the sample (token)")
    a2.set_ylabel("cross-entropy (nats/token)")
    share = "" if occ.loss_share is None else f": {occ.loss_share:.1%} of the step's summed loss"
    a2.set_title(f"per-token loss at step {occ.step}, rank {occ.rank} (doc {trace.document}{share})", fontsize=9)
    a2.legend(fontsize=8, loc="upper right", ncol=2, framealpha=0.9)
    fig.tight_layout()
    return fig


def documents_read(blend: Any, settings: Any, domain: str) -> list[int]:
    """The documents of ``domain`` (numbers ``0 … count − 1``, sorted) that at least one sample of
    the run's blend holds, in whole or in part — the ones a trace can find."""
    d = settings.names.index(domain)
    found: set[int] = set()
    for i in range(len(blend)):
        if int(blend.dataset_index[i]) == d:
            found.update(documents_in_sample(blend, i)[1])
    return sorted(found)


def not_read_note(blend: Any, settings: Any, domain: str, document: int, shown: int = 8) -> str:
    """One line for a document the run never read: why (the run reads ``len(blend)`` samples, a
    small part of the corpus) and the nearest documents of ``domain`` it did read."""
    read = documents_read(blend, settings, domain)
    near = sorted(sorted(read, key=lambda k: (abs(k - document), k))[:shown])
    total = document_count(blend, settings, domain)
    return (f"{domain} document {document} is in none of the {len(blend)} samples this run reads "
            f"(they hold {len(read)} of its {total} documents); near it, these were read: "
            f"{', '.join(map(str, near))}")


class TracePanel:
    """The interactive trace: ``domain`` dropdown, ``document`` box, output area.

    Changing the domain first moves the document box's limit to that domain's last document
    and clamps the value into it (:meth:`limits`), then redraws once; an out-of-range number
    can no longer reach :func:`trace_document`.  ``widgets`` are ipywidgets (built by
    :meth:`build`); the rule itself needs none, so it is tested headless.
    """

    def __init__(self, blend: Any, settings: Any, run: Any, domain: str, document: int) -> None:
        self.blend, self.settings, self.run = blend, settings, run
        self.domain, self.document = domain, int(document)
        self.widgets: dict[str, Any] = {}
        self._updating = False

    def limits(self, domain: str, document: int) -> tuple[int, int]:
        """(largest document number of ``domain``, ``document`` clamped to ``0 … that``)."""
        top = document_count(self.blend, self.settings, domain) - 1
        return top, min(max(int(document), 0), top)

    def trace(self) -> DocumentTrace:
        return trace_document(self.blend, self.settings, self.domain, self.document, self.run)

    def build(self):
        """The widgets (a VBox), showing the current trace."""
        import ipywidgets as W  # noqa: PLC0415 - ipywidgets only when the panel is shown (start-up time)

        top, self.document = self.limits(self.domain, self.document)
        dom = W.Dropdown(options=list(self.settings.names), value=self.domain, description="domain")
        doc = W.BoundedIntText(value=self.document, min=0, max=top, description="document")
        out = W.Output()
        self.widgets = {"domain": dom, "document": doc, "output": out}
        dom.observe(self.on_domain, "value")
        doc.observe(self.on_document, "value")
        self.redraw()
        return W.VBox([W.HBox([dom, doc]), out])

    def on_domain(self, change: dict) -> None:
        """Domain changed: move the document limit (clamping the value), then redraw once."""
        self.domain = change["new"]
        top, value = self.limits(self.domain, self.widgets["document"].value)
        self._updating = True            # the clamp below fires on_document; draw only once
        try:
            doc = self.widgets["document"]
            if value > doc.max:          # raise the limit before the value, lower it after
                doc.max = top
                doc.value = value
            else:
                doc.value = value
                doc.max = top
        finally:
            self._updating = False
        self.document = value
        self.redraw()

    def on_document(self, change: dict) -> None:
        self.document = int(change["new"])
        if not self._updating:
            self.redraw()

    def redraw(self) -> None:
        """The table and the figure of the current document; for one the run never read, the
        table and :func:`not_read_note` instead of a figure."""
        import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)
        from IPython.display import display  # noqa: PLC0415 - IPython only when shown in a notebook (start-up time)

        out = self.widgets["output"]
        with out:
            out.clear_output(wait=True)
            try:
                trace = self.trace()
            except ValueError as exc:    # a bad domain typed by hand; the limits rule out the rest
                print(f"ValueError: {exc}")
                return
            display(trace_table(trace))
            if not trace.occurrences:
                print(not_read_note(self.blend, self.settings, self.domain, self.document))
                return
            fig = draw_trace(trace, self.blend, self.run, self.settings.config.model.encoder_seq_length)
            display(fig)
            plt.close(fig)               # shown once, by display, not again at the cell's end
