"""Per-token SFT losses of a pack, and of its sequences run alone — chapter 4's packing proof.

:func:`packed_token_losses` runs pack k of a :class:`~labsupport.datasets.sft_packing.PackedSFT`
through a model in one row, as training does (``training_view``: block-diagonal causal mask,
positions restarted per sequence).  :func:`separate_token_losses` takes the same sequences from
the *unpacked* examples and runs each alone (plain causal mask, positions from 0).  Packing is
correct when the two agree on every position that carries loss.

``model(tokens, position_ids, masked)`` is :class:`labsupport.models.tiny_lm.TinyCausalLM`'s
signature: ``tokens``/``position_ids`` int64 (1, T), ``masked`` bool (1, T, T) with True = masked.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from labsupport.datasets.gpt_samples import attention_mask_from_cu_seqlens
from labsupport.datasets.sft_packing import PackedSFT

__all__ = ["packed_token_losses", "separate_token_losses"]


def packed_token_losses(model: nn.Module, packed: PackedSFT, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack k in one forward pass: (cross-entropy per label (T,), in the model's dtype; loss mask float32 (T,))."""
    view = packed.training_view(k)
    masked = attention_mask_from_cu_seqlens(view["cu_seqlens"])
    logits = model(view["tokens"].reshape(1, -1), view["position_ids"].reshape(1, -1), masked)[0]
    return F.cross_entropy(logits, view["labels"], reduction="none"), view["loss_mask"]


def separate_token_losses(model: nn.Module, data: Any, packed: PackedSFT, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequences of pack k, each cut from its example in ``data`` (``example(i) -> (ids, mask)``,
    e.g. ``TokenizedSFT``/``TokenizedChat``) and run alone; same layout as :func:`packed_token_losses`.

    A sequence is tokens ``[c·pack_size, c·pack_size + L)`` of its example (c = ``seq_chunk``, L its
    length in the pack): the whole example, its truncated head, or one chunk of a split.
    """
    losses, masks = [], []
    seqs = range(int(packed.seq_offsets[k]), int(packed.seq_offsets[k + 1]))
    for j, length in zip(seqs, packed.seq_lengths(k).tolist()):
        ids, mask = data.example(int(packed.seq_example[j]))
        start = int(packed.seq_chunk[j]) * packed.pack_size
        ids = torch.as_tensor(ids[start:start + length], dtype=torch.int64)
        logits = model(ids[:-1].reshape(1, -1))[0]
        losses.append(F.cross_entropy(logits, ids[1:], reduction="none"))
        masks.append(torch.as_tensor(mask[start + 1:start + length], dtype=torch.float32))
    return torch.cat(losses), torch.cat(masks)
