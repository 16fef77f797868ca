"""The symptom → suspect table of book §6.2.7, each row injected into chapter 6's pipeline,
measured, fixed and measured again.

Every function returns plain numbers (``before`` = the bug, ``after`` = the fix) so the notebook
prints a table and the tests check the direction of each effect:

=====================================  =======================================  ==============================
symptom                                suspect (injected)                       fix
=====================================  =======================================  ==============================
CPU-bound, GPU starved                 tokenize every step                      ``.bin``/``.idx`` index (ch2)
low token throughput                   one padded document per row              packing (ch4)
model mixes unrelated documents        ``reset_attention_mask: false``          boundary mask (ch4)
broken output                          decode with another tokenizer            one tokenizer; config check
good at one domain only / overfitting  tiny domain, high weight                 cap its epochs (ch3)
OOM on terabytes                       load every ``.bin`` into RAM             mmap (ch2)
=====================================  =======================================  ==============================

The same rows as a measured log summary (chapter 6's exercise q3, the diagnosis cell after §6.2.7:
``labsupport.check.ch06`` draws its logs with :func:`symptom_log`): each row disturbs one field
(``data_share``, ``real_token_share``, ``cross_document_attention``, ``decode_roundtrip_ok``,
``small_domain_gap``, ``rss_over_corpus``), whose healthy range :data:`HEALTHY_RANGES` / :data:`HEALTHY`
state.
"""
from __future__ import annotations

import dataclasses
import json
import operator
import os
from typing import Any, Sequence

import numpy as np
import torch

from labsupport.config import ConfigError
from labsupport.datasets.gpt_samples import GPTDataset
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path
from labsupport.datasets.preprocess import preprocess
from labsupport.datasets.tokenizer import Tokenizer, decode_lenient, read_documents, workbook_tokenizer
from labsupport.fileio import atomic_write
from labsupport.paths import data_file, work_dir
from labsupport.training.data import NaiveTextDataset, build_blend, collate, dataset_config
from labsupport.training.settings import Settings, load_settings
from labsupport.training.trainer import token_losses, train

__all__ = ["loader_and_padding", "cross_document_pairs", "tokenizer_mismatch", "small_domain_split",
           "overfit_small_domain", "memory_footprint", "memory_as_corpus_grows", "PAGE_BYTES",
           "ATTENTION_PATHS", "HEALTHY_RANGES", "HEALTHY", "SICK_RANGES", "CALM_LOG", "SICK_VALUES", "healthy_log",
           "symptom_log", "sick_log"]

PAGE_BYTES = 4096


def loader_and_padding(settings: Settings, steps: int, blend: Any = None) -> dict[str, dict[str, float]]:
    """The same model and blend order, ``steps`` steps each: the index + packed samples vs
    tokenize-every-step + one padded document per row.  Per pipeline: ``real_token_share``
    (tokens with loss / tokens computed; deterministic), ``tokenize_calls`` per step, and the
    timings ``tokens_per_s``, ``data_share`` (data time / step time) and ``data_ms_per_step``
    (median), and per step (after the first) ``step_tokens_per_s``/``step_useful_tokens_per_s``."""
    blend = build_blend(settings) if blend is None else blend
    tok = Tokenizer(settings.tokenizer_path)
    naive = NaiveTextDataset([read_documents(data_file(n)) for n in settings.names], tok,
                             settings.config.model.encoder_seq_length, blend)
    out = {}
    for name, ds in (("indexed + packed", blend), ("tokenize + pad", naive)):
        res = train(settings, dataset=ds, stop_after=steps, show_progress=False)
        log = res.log[1:] or res.log                      # step 1 pays one-off start-up costs
        step_t = sum(r["step_time"] for r in log)
        out[name] = {
            "real_token_share": sum(r["loss_tokens"] for r in res.log) / sum(r["tokens"] for r in res.log),
            "tokenize_calls": 0 if ds is blend else settings.config.model.global_batch_size,
            "tokens_per_s": sum(r["tokens"] for r in log) / step_t,
            "useful_tokens_per_s": sum(r["loss_tokens"] for r in log) / step_t,
            "data_share": sum(r["data_time"] for r in log) / step_t,
            "data_ms_per_step": 1e3 * sorted(r["data_time"] for r in log)[len(log) // 2],
            "step_tokens_per_s": [r["tokens"] / r["step_time"] for r in log],          # the spread, per step
            "step_useful_tokens_per_s": [r["loss_tokens"] / r["step_time"] for r in log],
        }
    return out


def _document_ids(tokens: torch.Tensor, eod: int) -> torch.Tensor:
    """Per token, which document it belongs to (the count of EODs before it)."""
    is_eod = (tokens == eod).long()
    return torch.cumsum(is_eod, -1) - is_eod


def cross_document_pairs(settings: Settings, indices: Sequence[int], eod: int) -> dict[str, float]:
    """Share of allowed (query, key) attention pairs that cross a document boundary in the
    samples ``indices``: with ``reset_attention_mask`` off (Megatron's default) and on."""
    out = {}
    for label, on in (("mask off", False), ("mask on", True)):
        flags = dict(settings.config.model.data.flags, reset_attention_mask=on)
        blend = build_blend(settings, flags=flags)
        batch = collate([blend[i] for i in indices], indices, dense_mask=True)
        allowed = ~batch.masked
        doc = _document_ids(batch.tokens, eod)
        cross = doc[:, :, None] != doc[:, None, :]
        out[label] = float((allowed & cross).sum()) / float(allowed.sum())
    return out


def tokenizer_mismatch(settings: Settings, other_model: str | os.PathLike, sample: dict[str, Any],
                       chars: int = 80) -> dict[str, Any]:
    """Decode one training sample's ids with the training tokenizer and with ``other_model``,
    and show what the config check says when the other model is named in the config."""
    good, bad = Tokenizer(settings.tokenizer_path), Tokenizer(other_model)
    ids = [int(i) for i in sample["tokens"][:40]]
    try:
        load_settings(overrides=[f"model.tokenizer.model={os.fspath(other_model)}"])
        refusal = None
    except ConfigError as exc:
        refusal = str(exc)
    return {"same": good.decode(ids)[:chars], "other": decode_lenient(bad, ids)[:chars], "refusal": refusal}


def small_domain_split(domain: str, train_docs: int, heldout_docs: int = 0) -> tuple[str, str | None]:
    """Prefixes of the first ``train_docs`` documents of ``domain`` and of the next
    ``heldout_docs`` (built once in ``work/ch06/``; None when 0), for the over-sampling row.
    Chapter 6 takes its held-out documents from the config's split instead
    (:func:`labsupport.training.data.split_dataset`)."""
    docs = read_documents(data_file(domain))
    if train_docs + heldout_docs > len(docs):
        raise ValueError(f"{domain} has {len(docs)} documents; asked for {train_docs} + {heldout_docs}")
    tok = Tokenizer(workbook_tokenizer())
    out = []
    for name, part in (("small", docs[:train_docs]), ("heldout", docs[train_docs:train_docs + heldout_docs])):
        if not part:
            out.append(None)
            continue
        base = work_dir("ch06") / f"{domain}_{name}{len(part)}_{tok.fingerprint[:8]}"
        prefix = f"{base}_text_document"
        if not IndexedDataset.exists(prefix):
            src = base.with_suffix(".jsonl")
            atomic_write(src, "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in part))
            preprocess([src], base, tok, append_eod=True, workers=1, strict=True, show_progress=False)
        out.append(prefix)
    return out[0], out[1]


def _mean_loss(model: torch.nn.Module, batch) -> float:
    with torch.no_grad():
        ce = token_losses(model, batch)
    return float((ce * batch.loss_mask).sum() / batch.loss_mask.sum())


def overfit_small_domain(settings: Settings, small: str, heldout: Any, weight: float, steps: int,
                         eval_every: int, eval_samples: int = 16) -> dict[str, list[float]]:
    """Blend ``small`` at ``weight`` with the config's domains; every ``eval_every`` steps record
    the loss on the small domain's own samples, on ``heldout`` samples of the same domain (a
    GPTDataset, e.g. a validation split, or a prefix), and the epochs of the small domain drawn
    so far."""
    others = [(w, p) for w, p in zip(settings.config.model.data.blend()[1], settings.prefixes)]
    rest = 1.0 - weight
    total_w = sum(w for w, _ in others)
    prefix_list = []
    for w, p in others:
        prefix_list += [round(rest * w / total_w, 6), p]
    prefix_list += [weight, small]
    cfg_overrides = [f"model.data.data_prefix=[{','.join(str(x) for x in prefix_list)}]", f"trainer.max_steps={steps}"]
    run = load_settings(overrides=_base_overrides(settings) + cfg_overrides)
    data = run.config.model.data
    dense = data.reset_attention_mask
    held = heldout if isinstance(heldout, GPTDataset) else \
        GPTDataset(IndexedDataset(heldout), None, None,
                   dataset_config(run, data.flags, Tokenizer(run.tokenizer_path).eod))
    held_ids = list(range(min(eval_samples, len(held))))
    held_batch = collate([{**held[i], "dataset_id": 0} for i in held_ids], held_ids, dense)
    blend = build_blend(run)
    d_small = len(run.names) - 1
    own = blend.datasets[d_small]
    own_ids = list(range(min(eval_samples, len(own))))
    own_batch = collate([{**own[i], "dataset_id": d_small} for i in own_ids], own_ids, dense)
    per_epoch = (own.tokens_per_epoch - own.extra) // own.seq_length
    curve: dict[str, list[float]] = {"step": [], "small_loss": [], "heldout_loss": [], "epochs": []}

    def record(rec: dict[str, Any], model: torch.nn.Module) -> None:
        if rec["step"] % eval_every and rec["step"] != steps:
            return
        drawn = int(np.count_nonzero(blend.dataset_index[: rec["consumed_samples"]] == d_small))
        curve["step"].append(rec["step"])
        curve["small_loss"].append(_mean_loss(model, own_batch))
        curve["heldout_loss"].append(_mean_loss(model, held_batch))
        curve["epochs"].append(drawn / per_epoch)

    train(run, dataset=blend, show_progress=False, on_step=record)
    curve["weight"] = [weight]
    curve["samples_per_epoch"] = [per_epoch]
    return curve


def _base_overrides(settings: Settings) -> list[str]:
    """The overrides that rebuild ``settings``' model and batch (for a derived run)."""
    keys = ["model.hidden_size", "model.ffn_hidden_size", "model.num_layers", "model.num_attention_heads",
            "model.encoder_seq_length", "model.micro_batch_size", "model.global_batch_size", "model.seed",
            "model.optim.lr"]

    def get(key: str) -> Any:
        return operator.attrgetter(key)(settings.config)

    return [f"{k}={get(k)}" for k in keys] + [f"trainer.precision={settings.config.trainer.precision}"]


def memory_footprint(settings: Settings, blend: Any, indices: Sequence[int]) -> dict[str, int]:
    """Bytes in RAM to serve the samples ``indices``: loading every ``.bin`` (the pitfall)
    vs mmap, which reads only the pages holding those samples' tokens (4 KiB pages)."""
    corpus = sum(os.path.getsize(get_bin_path(p)) for p in settings.prefixes)
    pages: set[tuple[int, int]] = set()
    for i in indices:
        d, s = int(blend.dataset_index[i]), int(blend.dataset_sample_index[i])
        gpt = blend.datasets[d]
        ds = gpt.dataset
        row = int(gpt.shuffle_index[s])
        (beg, beg_off), (end, end_off) = gpt.sample_index[row], gpt.sample_index[row + 1]
        item = np.dtype(ds.dtype).itemsize
        for p in range(int(beg), int(end) + 1):
            seq = int(gpt.document_index[p])
            first = int(beg_off) if p == beg else 0
            last = int(end_off) + gpt.extra if p == end else int(ds.sequence_lengths[seq])
            start = int(ds.sequence_pointers[seq]) + first * item
            stop = int(ds.sequence_pointers[seq]) + max(last, first + 1) * item
            pages.update((d, q) for q in range(start // PAGE_BYTES, (stop - 1) // PAGE_BYTES + 1))
    return {"corpus_bytes": corpus, "mmap_bytes": len(pages) * PAGE_BYTES, "samples": len(indices)}


def _repeated_corpus(prefix: str, copies: int, out_prefix: str) -> str:
    """``prefix``'s documents written ``copies`` times back to back as ``out_prefix`` (same
    dtype, same tokenizer metadata): a corpus ``copies`` times as large.  Returns ``out_prefix``."""
    with IndexedDataset(prefix) as ds:
        tokens = np.fromfile(get_bin_path(prefix), dtype=ds.dtype)
        docs = ds.document_indices
        lengths = np.add.reduceat(ds.sequence_lengths.astype(np.int64), docs[:-1]) if len(ds) else np.zeros(0, np.int64)
        meta = {k: v for k, v in (ds.metadata or {}).items() if k == "tokenizer"}
        builder = IndexedDatasetBuilder(get_bin_path(out_prefix), ds.dtype, metadata=meta)
    for _ in range(int(copies)):
        builder.add_documents(tokens, lengths)
    builder.finalize(get_idx_path(out_prefix))
    return out_prefix


def memory_as_corpus_grows(settings: Settings, copies: Sequence[int], folder: str | os.PathLike,
                           indices: Sequence[int] | None = None) -> list[dict[str, int]]:
    """:func:`memory_footprint` of the first global batch (or ``indices``) as the corpus grows:
    for each ``k`` in ``copies`` every dataset of ``settings`` is written ``k`` times over into
    ``folder`` and the run's blend rebuilt on it.  One dict per ``k``: ``copies``,
    ``corpus_bytes`` (loading every ``.bin``), ``mmap_bytes`` (the 4 KiB pages those samples
    touch), ``samples``."""
    indices = list(range(settings.config.model.global_batch_size)) if indices is None else list(indices)
    rows = []
    for k in copies:
        prefixes = [_repeated_corpus(p, k, os.path.join(os.fspath(folder), f"x{k}_{name}_text_document"))
                    for p, name in zip(settings.prefixes, settings.names)]
        grown = dataclasses.replace(settings, prefixes=prefixes)
        rows.append({"copies": int(k), **memory_footprint(grown, build_blend(grown), indices)})
    return rows


# ------------------------------------------------------------------ the table's rows as a log summary
#: where the boundary mask must act (chapter 4, "When reset_attention_mask takes effect"): an unfused
#: attention path applies the dataloader's dense mask; a fused/flash path (Transformer Engine's
#: attn_mask_type=causal) ignores it and needs THD cu_seqlens (PackedSeqParams, or megatron-core 0.19's
#: inter-document masking).
ATTENTION_PATHS = ("unfused", "fused")
#: the healthy ranges of the measured fields (as chapter 6's q3 table states them; a healthy log draws from
#: them), the ranges a sick field draws from, a calm log (in the logs' field order) and a sick value for each
HEALTHY_RANGES = {"data_share": (0.01, 0.15), "real_token_share": (0.93, 1.0), "small_domain_gap": (0.0, 0.8),
                  "rss_over_corpus": (0.001, 0.2)}
HEALTHY = {**{f: f"{lo} – {hi}" for f, (lo, hi) in HEALTHY_RANGES.items()}, "cross_document_attention": "0.0",
           "decode_roundtrip_ok": "True"}
SICK_RANGES = {"data_share": (0.5, 0.95), "real_token_share": (0.1, 0.6), "cross_document_attention": (0.01, 0.3),
               "small_domain_gap": (2.0, 6.0), "rss_over_corpus": (1.0, 1.5)}
CALM_LOG = {"data_share": 0.08, "real_token_share": 0.97, "cross_document_attention": 0.0,
            "decode_roundtrip_ok": True, "small_domain_gap": 0.4, "rss_over_corpus": 0.05, "attention_path": "unfused",
            "reset_attention_mask": True}
SICK_VALUES = {"data_share": 0.7, "real_token_share": 0.35, "cross_document_attention": 0.12,
               "decode_roundtrip_ok": False, "small_domain_gap": 4.0, "rss_over_corpus": 1.2}


def healthy_log(rng: np.random.Generator) -> dict[str, Any]:
    """A log summary with every field in its healthy range (drawn from :data:`HEALTHY_RANGES`), a random
    attention path, and ``reset_attention_mask`` on (on the fused path: either, it does not matter).
    Chapter 6's exercise notebook prints one in the cell before q3 (what a log looks like)."""
    path = str(rng.choice(ATTENTION_PATHS))
    drawn = {f: float(rng.uniform(lo, hi)) for f, (lo, hi) in HEALTHY_RANGES.items()}
    return {**CALM_LOG, **drawn, "attention_path": path,
            "reset_attention_mask": True if path == "unfused" else bool(rng.integers(2))}


def symptom_log(field: str, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A measured log summary with one field sick (``field``, drawn from :data:`SICK_RANGES`); fields:
    ``data_share`` (data-loader time / step time), ``real_token_share`` (tokens with loss / tokens
    computed), ``cross_document_attention`` (share of allowed attention pairs crossing documents),
    ``decode_roundtrip_ok`` (serving decode of training ids gives the text back),
    ``small_domain_gap`` (held-out loss minus the loss on its own training samples, in nats, for the
    most up-weighted domain: memorisation opens the gap), ``rss_over_corpus`` (resident memory / corpus bytes),
    ``attention_path`` ("unfused": applies the dataloader's mask; "fused": takes no mask) and the config's
    ``reset_attention_mask``.  Mixed documents on the unfused path come with the flag off; on the fused
    path the flag does not matter."""
    rng = np.random.default_rng() if rng is None else rng
    log = healthy_log(rng)
    sick = {f: float(rng.uniform(lo, hi)) for f, (lo, hi) in SICK_RANGES.items()}
    log[field] = sick.get(field, False)                       # decode_roundtrip_ok: False
    if field == "cross_document_attention":
        log["reset_attention_mask"] = False if log["attention_path"] == "unfused" else bool(rng.integers(2))
    return log


def sick_log(field: str, attention_path: str = "unfused", reset_attention_mask: bool = True) -> dict[str, Any]:
    """The hand-picked log of one row: :data:`CALM_LOG` with ``field`` at its :data:`SICK_VALUES` value; for
    ``cross_document_attention`` on ``attention_path`` with ``reset_attention_mask`` (off on the unfused
    path: the fix depends on both), other fields keep the calm path and flag."""
    log = {**CALM_LOG, field: SICK_VALUES[field]}
    if field == "cross_document_attention":
        log["attention_path"] = attention_path
        log["reset_attention_mask"] = False if attention_path == "unfused" else reset_attention_mask
    return log
