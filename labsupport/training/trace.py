"""Follow one document through the whole pipeline — chapter 6 (end to end).

:func:`trace_document` answers, for document ``k`` of one blended domain: its text, its token
ids, where they sit in the ``.bin`` (byte offset) and what the ``.idx`` says about it (chapter
2), which GPT samples and blend positions hold it (chapters 3–4), which optimizer step and DP
rank read it (the sampler), its position ids and segment in that packed sample, and — given a
run with ``keep_token_losses`` — its share of that step's summed loss.

Example: ``trace_document(blend, settings, "code", 7, result)`` → a :class:`DocumentTrace`;
``trace.rows()`` lists (stage, what, value) for a table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from labsupport.datasets.tokenizer import read_documents
from labsupport.paths import data_file

__all__ = ["DocumentTrace", "Occurrence", "trace_document", "documents_in_sample"]


@dataclass
class Occurrence:
    """One place the document's tokens appear in the training stream."""

    blend_index: int          # position in the blend (what the sampler hands out)
    gpt_sample: int           # sample id in the domain's GPTDataset (after its shuffle)
    step: int                 # optimizer step that reads it (1-based)
    rank: int                 # DP rank that reads it
    span: tuple[int, int]     # [start, end) token positions of this document inside the sample
    position_ids: list[int]   # the sample's position ids over the span
    segment: int              # which block of the block-diagonal mask (0-based)
    loss_share: float | None = None  # this span's share of the step's summed loss


@dataclass
class DocumentTrace:
    domain: str
    document: int
    text: str
    token_ids: list[int]
    byte_offset: int
    byte_length: int
    idx_entry: dict[str, int]
    occurrences: list[Occurrence] = field(default_factory=list)

    def rows(self, max_occurrences: int = 3) -> list[tuple[str, str, str]]:
        """(stage, what, value) rows for a table."""
        ids = self.token_ids
        shown = " ".join(map(str, ids[:12])) + (" …" if len(ids) > 12 else "")
        rows = [("ch1 text", f"{self.domain} document {self.document}",
                 repr(self.text[:70]) + ("…" if len(self.text) > 70 else "")),
                ("ch1 tokens", f"{len(ids)} ids (EOD last)", shown),
                ("ch2 .bin", "byte offset, bytes", f"{self.byte_offset:,}, {self.byte_length:,}"),
                ("ch2 .idx", "length, pointer, document index",
                 ", ".join(f"{k}={v:,}" for k, v in self.idx_entry.items()))]
        for o in self.occurrences[:max_occurrences]:
            pos = o.position_ids
            rows.append(("ch3-4 blend", f"blend index {o.blend_index} (GPT sample {o.gpt_sample})",
                         f"tokens {o.span[0]}…{o.span[1] - 1} of the sample, mask block {o.segment}, "
                         f"position ids {pos[0]}…{pos[-1]}"))
            share = "" if o.loss_share is None else f"; {o.loss_share:.1%} of the step's summed loss"
            rows.append(("ch6 sampler", "step, DP rank", f"step {o.step}, rank {o.rank}{share}"))
        if len(self.occurrences) > max_occurrences:
            rows.append(("…", f"{len(self.occurrences) - max_occurrences} more occurrence(s)", ""))
        if not self.occurrences:
            rows.append(("ch3-4 blend", "not drawn", "this run's samples do not reach this document"))
        return rows


def _spans(gpt: Any, row: int, position: int) -> tuple[int, int]:
    """[start, end) of document-index position ``position`` inside pre-shuffle sample ``row``."""
    beg, beg_off = (int(v) for v in gpt.sample_index[row])
    end, end_off = (int(v) for v in gpt.sample_index[row + 1])
    lengths = gpt.dataset.sequence_lengths
    doc = gpt.document_index
    start = 0
    for p in range(beg, position):
        start += int(lengths[doc[p]]) - (beg_off if p == beg else 0)
    first = beg_off if position == beg else 0
    last = end_off + gpt.extra if position == end else int(lengths[doc[position]])
    return start, min(start + last - first, gpt.seq_length)


def trace_document(blend: Any, settings: Any, domain: str, document: int, result: Any = None,
                   texts: list[str] | None = None) -> DocumentTrace:
    """Trace document ``document`` of ``domain`` (a name in ``settings.names``) through ``blend``.

    ``result``: a :class:`~labsupport.training.trainer.TrainResult` run with
    ``keep_token_losses=True`` (adds each occurrence's loss share); ``texts``: the domain's raw
    documents (default: read from ``data/<domain>.jsonl``).
    """
    if domain not in settings.names:
        raise ValueError(f"domain {domain!r} is not in the blend; choose one of {settings.names}")
    d = settings.names.index(domain)
    gpt = blend.datasets[d]
    ds = gpt.dataset
    n_docs = len(ds.document_indices) - 1
    if not 0 <= document < n_docs:
        raise ValueError(f"document {document} out of range: {domain} has {n_docs} documents")
    seq = int(ds.document_indices[document])
    texts = read_documents(data_file(domain)) if texts is None else texts
    itemsize = np.dtype(ds.dtype).itemsize
    length = int(ds.sequence_lengths[seq])
    trace = DocumentTrace(domain, document, texts[document], ds.get(seq).tolist(), int(ds.sequence_pointers[seq]),
                          length * itemsize, {"length": length, "pointer": int(ds.sequence_pointers[seq]),
                                              "document_index": seq})
    inverse = np.empty_like(gpt.shuffle_index)
    inverse[gpt.shuffle_index] = np.arange(gpt.shuffle_index.size, dtype=inverse.dtype)
    sample_pos = blend.dataset_sample_index
    starts = gpt.sample_index[:, 0]
    for position in np.flatnonzero(gpt.document_index == seq):
        rows = np.flatnonzero((starts[:-1] <= position) & (starts[1:] >= position))
        for row in rows:
            if row + 1 >= len(starts) or (starts[row + 1] == position
                                          and gpt.sample_index[row + 1][1] + gpt.extra == 0):
                continue
            sample = int(inverse[row])
            hits = np.flatnonzero((blend.dataset_index == d) & (sample_pos == sample))
            for i in hits:
                start, end = _spans(gpt, int(row), int(position))
                if end <= start:
                    continue
                item = blend[int(i)]
                cu = item["cu_seqlens"].numpy()
                segment = int(np.searchsorted(cu, start, side="right") - 1)
                per_step = settings.config.model.global_batch_size
                within = int(i) % per_step
                rank = (within // settings.config.model.micro_batch_size) % settings.data_parallel_size
                occ = Occurrence(int(i), sample, int(i) // per_step + 1, rank, (start, end),
                                 item["position_ids"][start:end].tolist(), segment)
                if result is not None and int(i) in result.token_losses:
                    step_ids = [j for j in range(int(i) - within, int(i) - within + per_step)]
                    total = sum(float(result.token_losses[j].sum()) for j in step_ids if j in result.token_losses)
                    mine = float(result.token_losses[int(i)][start:end].sum())
                    occ.loss_share = mine / total if total else None
                trace.occurrences.append(occ)
    trace.occurrences.sort(key=lambda o: o.blend_index)
    return trace


def documents_in_sample(blend: Any, index: int) -> tuple[int, list[int]]:
    """(dataset id, document ids in order) of the blended sample at ``index``."""
    d, s = int(blend.dataset_index[index]), int(blend.dataset_sample_index[index])
    gpt = blend.datasets[d]
    row = int(gpt.shuffle_index[s])
    beg, end = int(gpt.sample_index[row][0]), int(gpt.sample_index[row + 1][0])
    seqs = gpt.document_index[beg:end + 1]
    docs = np.searchsorted(gpt.dataset.document_indices, seqs, side="right") - 1
    return d, [int(x) for x in docs]
