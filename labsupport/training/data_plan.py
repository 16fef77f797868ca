"""The data plan a checkpoint records, and the guard that checks it on resume — chapter 6.

What fixes the order of the samples a run reads: the seed, the sequence length, the reset/eod
flags, each dataset's index (built for ``num_samples`` — Megatron's GPT index depends on it once
a dataset needs a second epoch, because the last epoch is shuffled on its own) and the blend
(weights, size).  Raising ``trainer.max_steps`` raises every ``num_samples``; when that adds an
epoch, the samples *already trained on* come in another order and a resumed run would read some
twice and skip others.  Megatron behaves the same way (its index cache is keyed by a hash that
covers ``num_samples``), without saying so.

:func:`plan_of` describes a run's plan plus ``consumed_sha256``: a digest of *which* samples
positions ``0 … consumed − 1`` of the blend are (dataset, shuffled row, document ids, offsets —
not their tokens) — plus each corpus's ``.bin``/``.idx`` sha256.  :func:`check_plan` recomputes that
digest under the resuming run's plan: equal, over the same corpora, means the trained-on samples are
the same, in the same order (the resume is exact); different — or a prefix preprocessed again — is
a :class:`DataPlanError` naming what changed and how to accept it (``allow_new_data_plan=true``).
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

import numpy as np

from labsupport.datasets.blending import sidecar_of
from labsupport.training.checkpoint import ResumeError

__all__ = ["DataPlanError", "plan_of", "check_plan", "consumed_digest", "ALLOW_KEY"]

#: The top-level config key that accepts a changed plan (``allow_new_data_plan=true``).
ALLOW_KEY = "allow_new_data_plan"


class DataPlanError(ResumeError):
    """Resuming would reorder the samples already trained on."""


def _gpt_parts(ds: Any) -> bool:
    return all(hasattr(ds, a) for a in ("shuffle_index", "sample_index", "document_index"))


def consumed_digest(blend: Any, consumed: int, hasher: Any = None, start: int = 0,
                    known: Mapping[int, Any] | None = None) -> Any:
    """sha256 over the identity of blend samples ``start … consumed − 1`` (fed to ``hasher``).

    For a blend of GPT datasets a sample is (dataset id, document ids, first and last offset);
    for any other dataset its ``tokens`` (S,): taken from ``known`` (blend index → the tokens a
    step has already read) where given, else read again — a dataset such as
    :class:`~labsupport.training.data.NaiveTextDataset` tokenizes on every read, so the trainer
    passes what it read instead of paying that twice per step.  Returns the hasher (call
    ``.hexdigest()``).
    """
    h = hashlib.sha256() if hasher is None else hasher
    dsi = getattr(blend, "dataset_index", None)
    datasets = getattr(blend, "datasets", None)
    if dsi is None or datasets is None or not all(_gpt_parts(d) for d in datasets):
        known = {} if known is None else known
        for i in range(start, consumed):
            tokens = known[i] if i in known else blend[i]["tokens"]
            h.update(np.asarray(tokens).astype(np.int64).tobytes())
        return h
    sample = blend.dataset_sample_index
    for i in range(start, consumed):
        d = int(dsi[i])
        ds = datasets[d]
        row = int(ds.shuffle_index[int(sample[i])])
        (beg, beg_off), (end, end_off) = ds.sample_index[row], ds.sample_index[row + 1]
        h.update(np.array([d, beg_off, end_off, end - beg], dtype=np.int64).tobytes())
        h.update(np.asarray(ds.document_index[int(beg):int(end) + 1], dtype=np.int64).tobytes())
    return h


def _sources(ds: Any) -> list[str] | None:
    meta = sidecar_of(getattr(ds, "dataset", ds)) or {}
    src = meta.get("sources")
    return [s.get("sha256") for s in src] if isinstance(src, list) else None


def _corpus(ds: Any) -> dict[str, str] | None:
    """The sha256 of the ``.bin`` and ``.idx`` a GPT dataset reads (None for other datasets)."""
    identity = getattr(getattr(ds, "dataset", None), "identity", None)
    if not callable(identity):
        return None
    ident = identity()
    return {"idx_sha256": ident["idx_sha256"], "bin_sha256": ident["bin_sha256"]}


def plan_of(settings: Any, blend: Any, consumed: int, digest: str) -> dict[str, Any]:
    """The plan to store in a checkpoint (plain JSON-able values)."""
    datasets = []
    for name, ds in zip(getattr(blend, "names", settings.names), getattr(blend, "datasets", [])):
        datasets.append({"name": name, "num_samples": getattr(ds, "num_samples", None),
                         "index_samples": len(ds) if hasattr(ds, "__len__") else None,
                         "epochs": getattr(ds, "num_epochs", None), "sources": _sources(ds),
                         "corpus": _corpus(ds)})
    m = settings.config.model
    return {"seed": m.seed, "seq_length": m.encoder_seq_length, "flags": m.data.flags,
            "max_steps": settings.config.trainer.max_steps, "global_batch_size": m.global_batch_size,
            "weights": [float(w) for w in getattr(blend, "weights", m.data.blend()[1])],
            "blend_size": len(blend), "datasets": datasets,
            "consumed_samples": int(consumed), "consumed_sha256": digest}


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    if old.get("max_steps") != new["max_steps"]:
        out.append(f"trainer.max_steps {old.get('max_steps')} → {new['max_steps']}")
    for key in ("seed", "seq_length", "flags", "weights", "blend_size"):
        if old.get(key) != new[key]:
            out.append(f"{key} {old.get(key)} → {new[key]}")
    before = {d["name"]: d for d in old.get("datasets", [])}
    for d in new["datasets"]:
        o = before.get(d["name"])
        if o is None:
            out.append(f"dataset {d['name']} is new")
        elif o.get("index_samples") != d["index_samples"] or o.get("epochs") != d["epochs"]:
            out.append(f"the {d['name']} index holds {d['index_samples']} samples in {d['epochs']} epoch(s), "
                       f"was {o.get('index_samples')} in {o.get('epochs')}")
        elif o.get("sources") != d["sources"]:
            out.append(f"the {d['name']} corpus was preprocessed again from other files")
        elif _corpus_changed(o, d):
            out.append(f"the {d['name']} corpus was preprocessed again (its .bin/.idx differ)")
    return out


def _corpus_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Both recorded (a checkpoint from before the corpus digest records none) and different."""
    return bool(old.get("corpus")) and bool(new.get("corpus")) and old["corpus"] != new["corpus"]


def check_plan(saved: dict[str, Any] | None, settings: Any, blend: Any, consumed: int, name: str,
               allow: bool) -> tuple[Any, str | None]:
    """Recompute the digest of the ``consumed`` trained-on samples under the new plan.

    Returns ``(hasher, warning)``: the running digest to continue from, and a line to print
    when a changed plan was accepted (``allow``).  Raises DataPlanError when it changed and
    ``allow`` is False.  A checkpoint without a plan (older format) is not checked.
    """
    hasher = consumed_digest(blend, consumed)
    if not saved:
        return hasher, None
    new = plan_of(settings, blend, consumed, "")
    # the digest covers which documents and offsets were read, not their tokens: a corpus
    # preprocessed again with the same lengths keeps it, so its .bin/.idx digests are compared too
    before = {d.get("name"): d for d in saved.get("datasets", [])}
    corpus_same = not any(_corpus_changed(before.get(d["name"], {}), d) for d in new["datasets"])
    if saved.get("consumed_sha256") == hasher.hexdigest() and corpus_same:
        return hasher, None
    changes = _changes(saved, new) or ["the corpora's contents"]
    what = "; ".join(changes[:3]) + ("; …" if len(changes) > 3 else "")
    if not allow:
        raise DataPlanError(
            f"{name}: resuming would change the {consumed} samples already trained on (they would come in "
            f"another order): {what}; keep the values the checkpoint was planned with (trainer.max_steps="
            f"{saved.get('max_steps')}; plan a longer run from the start to train further), or accept the new "
            f"order with {ALLOW_KEY}=true")
    return hasher, (f"warning: {name}: new data plan accepted ({what}); the {consumed} samples already "
                    "trained on are not those this plan puts first, so the run is no longer an exact resume")
