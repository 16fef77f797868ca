"""From config to batches — chapter 6 (end to end): chapter 3's blend over chapter 4's GPT
samples, read through Megatron's sampler, stacked into tensors.

* :func:`build_blend` — one ``GPTDataset`` per ``data_prefix`` entry (with the config's
  reset/eod-mask flags and seed) over the *train* range of ``splits_string``, blended by weight
  into ``max_steps × global_batch_size`` samples (Megatron's builder: ``sum(ceil(size × w))``);
  its indices are cached as Megatron caches them (:mod:`labsupport.datasets.index_cache`):
  global rank 0 builds, a barrier, the other ranks load (``index_split="valid"``: the same over
  the validation ranges, for the trainer's validation);
* :func:`split_dataset` — one prefix's validation or test range as a GPTDataset (one epoch);
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
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset, attention_mask_from_cu_seqlens, get_ltor_boundaries
from labsupport.datasets.index_cache import IndexCache, default_cache_dir, unique_description
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.splits import SPLITS, split_indices, split_matrix
from labsupport.datasets.tokenizer import Tokenizer
from labsupport.training.settings import Settings

__all__ = ["Batch", "build_blend", "split_dataset", "index_cache_for", "dataset_config", "collate", "NaiveTextDataset"]


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
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


_NO_SPLIT = "1,0,0"   # splits_string null: every sequence is train


def index_cache_for(settings: Settings, k: int, num_samples: int | None, index_split: str = "train") -> IndexCache:
    """The index-cache entry of blend entry ``k``: Megatron's description (the prefix as the
    config writes it, the tokenizer as ``{"class", "model", "fingerprint"}``) in
    ``model.data.index_mapping_dir`` or, when that is null, Megatron's default beside the prefix."""
    m = settings.config.model
    split = m.data.splits_string or _NO_SPLIT
    tokenizer = {"class": "labsupport.datasets.tokenizer.Tokenizer", "tokenizer_model": m.tokenizer.model,
                 "fingerprint": settings.tokenizer_fingerprint}
    desc = unique_description(m.data.blend()[0][k], num_samples, index_split, m.seed,
                              m.encoder_seq_length, split, split_matrix(split), tokenizer)
    folder = settings.index_mapping_dir or default_cache_dir(settings.prefixes[k])
    return IndexCache(folder, desc, index_split)


def _rank() -> tuple[int, bool]:
    """(global rank, whether a process group of more than one rank is up)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), True
    return 0, False


def dataset_config(settings: Settings, flags: dict[str, bool], eod: int) -> GPTDatasetConfig:
    """The GPTDatasetConfig of the run (``model.encoder_seq_length``, ``model.seed``) with ``flags``."""
    m = settings.config.model
    return GPTDatasetConfig(seq_length=m.encoder_seq_length, seed=m.seed, eod_token=eod, **flags)


def _split_gpt(settings: Settings, k: int, num_samples: int | None, index_split: str, config: GPTDatasetConfig,
               cache: bool) -> GPTDataset:
    ds = IndexedDataset(settings.prefixes[k])
    split = settings.config.model.data.splits_string
    indices = split_indices(split or _NO_SPLIT, len(ds))[SPLITS.index(index_split)]
    if indices is None or indices.size == 0:
        raise ValueError(f"model.data.splits_string={split!r} gives {settings.names[k]} no {index_split} "
                         f"sequences (it has {len(ds)}); give that split more weight")
    entry = index_cache_for(settings, k, num_samples, index_split) if cache else None
    return GPTDataset(ds, indices, num_samples, config, cache=entry)


def build_blend(settings: Settings, *, flags: dict[str, bool] | None = None, eod_token: int | None = None,
                weights: Sequence[float] | None = None, size: int | None = None,
                cache: bool | None = None, index_split: str = "train") -> BlendedDataset:
    """The training blend of ``settings`` (optionally with other flags, weights or size).

    Each dataset takes the train range of ``model.data.splits_string`` (``index_split="valid"``: the
    validation range, as Megatron's builder blends every split's datasets with the same weights,
    ``blended_megatron_dataset_builder.py:_build_blended_dataset_splits`` at core_v0.16.1; chapter 6's
    validation, :mod:`~labsupport.training.validation`, passes its own ``size``).  ``cache`` (default:
    only for the config's own flags, weights and size — the indices the run itself uses) reads and writes the
    index cache; in a process group rank 0 builds it, then all ranks pass a barrier, then the
    others load it, so ``index_mapping_dir`` must be shared by every node.
    Returns a ``BlendedDataset`` whose ``[i]`` is chapter 4's sample dict plus ``dataset_id``.
    """
    if cache is None:
        cache = flags is None and weights is None and size is None
    data = settings.config.model.data
    eod = Tokenizer(settings.tokenizer_path).eod if eod_token is None else int(eod_token)
    config = dataset_config(settings, data.flags if flags is None else flags, eod)
    weights = list(data.blend()[1] if weights is None else weights)
    size = settings.total_samples if size is None else int(size)
    requested = samples_per_dataset(weights, size)
    rank, group = _rank()

    def build() -> list:
        return [_split_gpt(settings, k, n, index_split, config, cache) for k, n in enumerate(requested)]

    if cache and group:
        gpt = build() if rank == 0 else None
        torch.distributed.barrier()                      # rank 0 has written the cache
        gpt = build() if gpt is None else gpt            # the others load it
    else:
        gpt = build()
    return BlendedDataset(gpt, weights, megatron_blend_size(weights, size), settings.config.model.seed,
                          names=settings.names)


def split_dataset(settings: Settings, name: str, index_split: str = "valid") -> GPTDataset:
    """Blend entry ``name``'s ``valid`` or ``test`` range of ``splits_string`` as a GPTDataset of
    one epoch (Megatron builds those from the same prefix; not cached here)."""
    if name not in settings.names:
        raise ValueError(f"{name!r} is not in the blend ({', '.join(settings.names)})")
    config = dataset_config(settings, settings.config.model.data.flags, Tokenizer(settings.tokenizer_path).eod)
    return _split_gpt(settings, settings.names.index(name), None, index_split, config, cache=False)


def collate(samples: Sequence[dict[str, Any]], indices: Sequence[int], dense_mask: bool) -> Batch:
    """Stack samples (dicts of chapter 4's GPT samples, with ``dataset_id``) into a Batch."""
    def stack(key: str) -> torch.Tensor:
        return torch.stack([s[key] for s in samples])

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
