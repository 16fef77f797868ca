"""From config to batches — chapter 6 (end to end): chapter 3's blend over chapter 4's GPT
samples, read through Megatron's sampler, stacked into tensors.

* :func:`build_blend` — one ``GPTDataset`` per ``data_prefix`` entry (with the config's
  reset/eod-mask flags and seed), blended by weight into ``max_steps × global_batch_size``
  samples (Megatron's builder: ``sum(ceil(size × w))``);
* :func:`collate` — a list of samples → a :class:`Batch` of stacked tensors, with the dense
  block-diagonal mask only when ``reset_attention_mask`` is on;
* :class:`NaiveTextDataset` — the pipeline the book warns about (§6.2.3): the same blend order,
  but every sample tokenizes one raw document *now* and pads it to the sequence length.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from labsupport.datasets.blending import BlendedDataset, megatron_blend_size, samples_per_dataset
from labsupport.datasets.gpt_samples import GPTDataset, attention_mask_from_cu_seqlens, get_ltor_boundaries
from labsupport.datasets.indexed import IndexedDataset
from labsupport.training.settings import Settings

__all__ = ["Batch", "build_blend", "collate", "NaiveTextDataset"]


@dataclass
class Batch:
    """One micro-batch, B samples of S tokens.

    ``tokens``/``labels``/``position_ids`` int64 (B, S); ``loss_mask`` float32 (B, S);
    ``masked`` bool (B, S, S) True = masked (Megatron's convention) or None = plain causal;
    ``dataset_id`` int64 (B,) (which blend entry); ``index`` int64 (B,) (position in the blend).
    """

    tokens: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor
    masked: torch.Tensor | None
    dataset_id: torch.Tensor
    index: torch.Tensor

    def to(self, device: torch.device) -> "Batch":
        move = (lambda t: None if t is None else t.to(device, non_blocking=True))
        return Batch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


def build_blend(settings: Settings, *, flags: dict[str, bool] | None = None, eod_token: int | None = None,
                weights: Sequence[float] | None = None, size: int | None = None) -> BlendedDataset:
    """The training blend of ``settings`` (optionally with other flags, weights or size).

    Returns a ``BlendedDataset`` whose ``[i]`` is chapter 4's sample dict plus ``dataset_id``.
    """
    from labsupport.datasets.tokenizer import Tokenizer

    flags = dict(settings.flags if flags is None else flags)
    weights = list(settings.weights if weights is None else weights)
    size = settings.total_samples if size is None else int(size)
    eod = Tokenizer(settings.tokenizer_path).eod if eod_token is None else int(eod_token)
    requested = samples_per_dataset(weights, size)
    gpt = [GPTDataset(IndexedDataset(p), settings.seq_length, n, settings.seed, **flags, eod_token=eod)
           for p, n in zip(settings.prefixes, requested)]
    return BlendedDataset(gpt, weights, megatron_blend_size(weights, size), settings.seed, names=settings.names)


def collate(samples: Sequence[dict[str, Any]], indices: Sequence[int], dense_mask: bool) -> Batch:
    """Stack samples (dicts of chapter 4's GPT samples, with ``dataset_id``) into a Batch."""
    stack = (lambda key: torch.stack([s[key] for s in samples]))
    masked = None
    if dense_mask:
        s = samples[0]["tokens"].numel()
        masked = torch.cat([attention_mask_from_cu_seqlens(x["cu_seqlens"], s) for x in samples])
    return Batch(stack("tokens"), stack("labels"), stack("loss_mask").float(), stack("position_ids"), masked,
                 torch.tensor([int(x["dataset_id"]) for x in samples]), torch.tensor(list(indices)))


class NaiveTextDataset:
    """Tokenize-every-step + padding: the pipeline chapter 2 replaces (book §6.2.3).

    ``ds[i]`` takes the blend's choice for ``i`` (domain ``d``, sample ``s``), tokenizes raw
    document ``s mod n_d`` of domain ``d`` *at access time*, appends EOD, truncates to S + 1
    tokens and pads the rest (pad id 0, loss mask 0).  One document per row: no packing, so
    every row's tail is padding.  Same dict keys as ``BlendedDataset[i]``.
    """

    def __init__(self, texts: Sequence[Sequence[str]], tokenizer: Any, seq_length: int, blend: BlendedDataset) -> None:
        self.texts = [list(t) for t in texts]
        if any(not t for t in self.texts):
            raise ValueError("NaiveTextDataset: every domain needs at least one document")
        self.tokenizer = tokenizer
        self.seq_length = int(seq_length)
        self.dataset_index = blend.dataset_index
        self.dataset_sample_index = blend.dataset_sample_index

    def __len__(self) -> int:
        return int(self.dataset_index.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        d, s = int(self.dataset_index[i]), int(self.dataset_sample_index[i])
        docs = self.texts[d]
        ids = self.tokenizer.encode(docs[s % len(docs)])[: self.seq_length] + [self.tokenizer.eod]
        real = len(ids)
        text = np.zeros(self.seq_length + 1, dtype=np.int64)
        text[:real] = ids
        b = get_ltor_boundaries(text[:-1], self.tokenizer.eod, False, False, False)
        loss_mask = b.loss_mask.clone()
        loss_mask[real - 1:] = 0.0                      # no loss on predicting padding
        return {"dataset_id": d, "tokens": torch.from_numpy(text[:-1].copy()),
                "labels": torch.from_numpy(text[1:].copy()), "loss_mask": loss_mask,
                "position_ids": b.position_ids, "cu_seqlens": b.cu_seqlens, "max_seqlen": b.max_seqlen}
