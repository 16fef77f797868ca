"""The per-token cross-entropy of a batch — chapter 6's trainer, its validation and the symptom rows."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from labsupport.training.data import Batch

__all__ = ["token_losses"]


def token_losses(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Cross-entropy per token, float32 (B, S) (masked positions included; multiply by loss_mask).

    The logits are flattened to (B·S, V) rather than transposed to (B, V, S): the class axis stays
    the contiguous last one, which PyTorch's CPU kernel reads about 3× faster (forward + backward,
    measured at B·S = 256, V = 8000, one thread).
    """
    logits = model(batch.tokens, batch.position_ids, batch.masked)
    b, s, v = logits.shape
    return F.cross_entropy(logits.float().reshape(b * s, v), batch.labels.reshape(b * s), reduction="none").view(b, s)
