"""A tiny causal transformer for chapter 4's contamination proof (book §6.2.6, pitfall §6.2.9).

Packing several documents into one sequence is only safe when the model computes, for each
document, exactly what it would compute for that document alone.  This module gives the pieces
to *test* that claim rather than draw it:

* :func:`causal_attention` — one attention head with an explicit mask, returning its weights
  (for heatmaps) and output;
* :func:`apply_rotary` — rotary position embeddings (RoPE) of queries or keys: with them a score
  depends only on the *distance* between two positions, so the position reset changes nothing
  once the boundary mask keeps every query inside its own document;
* :class:`TinyCausalLM` — 2 layers, learned absolute position embeddings (so position ids
  matter), PyTorch ``scaled_dot_product_attention`` with a dense mask on CPU;
* :func:`run_separately` / :func:`run_packed` — the same documents one by one, and packed with
  or without the boundary mask and position reset;
* :func:`varlen_attention` — the GPU path that takes ``cu_seqlens`` instead of a dense mask
  (``torch.nn.attention.varlen.varlen_attn``, else FlexAttention with a document mask).

Mask conventions: Megatron's masks are True = *masked*; PyTorch SDPA's boolean ``attn_mask``
is True = *may attend*.  :func:`sdpa_mask` converts, and every function here documents which
one it takes.
"""
from __future__ import annotations

import copy
import inspect
import math
import warnings
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from labsupport.datasets.gpt_samples import (attention_mask_from_cu_seqlens, position_ids_from_cu_seqlens,
                          segment_ids_from_cu_seqlens)

__all__ = ["sdpa_mask", "causal_attention", "apply_rotary", "TinyCausalLM", "pack_documents", "run_separately",
           "run_packed", "leakage", "varlen_attention", "dense_block_attention", "ATTENTION_PATHS",
           "with_attention", "cross_document_change"]

#: The attention paths of :class:`TinyCausalLM`: ``"mask"`` applies the mask it is given (megatron-core's
#: unfused ``DotProductAttention`` on its PyTorch softmax path); ``"causal"`` takes no mask at all —
#: ``scaled_dot_product_attention(is_causal=True)``, like a fused or flash kernel called with
#: ``attn_mask_type=causal`` (Transformer Engine's default in Megatron's GPT layer spec): a
#: dataloader's block mask is silently ignored.
ATTENTION_PATHS = ("mask", "causal")


def sdpa_mask(megatron_mask: torch.Tensor) -> torch.Tensor:
    """Megatron's mask (True = masked) → SDPA's boolean mask (True = may attend)."""
    return ~megatron_mask.bool()


def causal_attention(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                     masked: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention head written out: ``softmax(QKᵀ/√d + mask) V``.

    ``x``: (T, d_model); ``wq``/``wk``/``wv``: (d_model, d_head); ``masked``: bool (T, T) with
    True = masked (Megatron's convention); None = plain causal.  Returns (output (T, d_head),
    weights (T, T), rows summing to 1).
    """
    t = x.shape[0]
    if masked is None:
        masked = ~torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = (q @ k.T) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(masked.reshape(t, t), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al., RoFormer) of ``x`` at ``positions``.

    x: (T, d) queries or keys, d even; positions: (T,) integer position ids.  Pairs of features
    (i, i + d/2) are rotated by the angle ``position × base^(−2i/d)`` (the "rotate half" layout
    of Megatron-Core and Hugging Face Llama).  A rotation by angle a·θ of q and b·θ of k leaves
    q·k depending on a − b only: shift every position of a document by the same offset and its
    scores do not change.

    >>> q = torch.randn(4, 8); k = torch.randn(4, 8); p = torch.arange(4)
    >>> s0 = apply_rotary(q, p) @ apply_rotary(k, p).T
    >>> torch.allclose(s0, apply_rotary(q, p + 100) @ apply_rotary(k, p + 100).T, atol=1e-4)
    True
    """
    t, d = x.shape
    if d % 2:
        raise ValueError(f"apply_rotary: the feature size must be even, got x of shape {tuple(x.shape)}")
    if positions.shape != (t,):
        raise ValueError(f"apply_rotary: positions must have shape ({t},), got {tuple(positions.shape)}")
    inv_freq = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]           # (T, d/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    x1, x2 = x[:, : d // 2], x[:, d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=1)


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, ffn_hidden: int | None = None, attention: str = "mask") -> None:
        super().__init__()
        self.attention = attention
        ffn_hidden = 4 * d_model if ffn_hidden is None else ffn_hidden
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, ffn_hidden), nn.GELU(), nn.Linear(ffn_hidden, d_model))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        if self.attention == "causal":      # no mask input: a later document sees the earlier ones
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """A 2-layer causal transformer LM with learned absolute position embeddings.

    ``ffn_hidden_size`` is the MLP width (NeMo's ``model.ffn_hidden_size``; default 4 × d_model).
    ``attention``: one of :data:`ATTENTION_PATHS` (default ``"mask"``: the given mask is applied).
    Chapter 6 trains it on the blend (``labsupport.training.trainer``).

    ``forward(tokens, position_ids=None, masked=None)``: ``tokens`` int64 (B, T);
    ``position_ids`` int64 (B, T) (default 0…T-1); ``masked`` bool (B or 1, T, T) or (T, T) in
    Megatron's convention, True = masked (default: causal).  Returns logits float32 (B, T, vocab).
    """

    def __init__(self, vocab_size: int = 256, d_model: int = 32, n_heads: int = 2, n_layers: int = 2,
                 max_positions: int = 4096, ffn_hidden_size: int | None = None, attention: str = "mask") -> None:
        super().__init__()
        if attention not in ATTENTION_PATHS:
            raise ValueError(f"attention={attention!r}: use one of {ATTENTION_PATHS}")
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, ffn_hidden_size, attention) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor | None = None,
                masked: torch.Tensor | None = None) -> torch.Tensor:
        b, t = tokens.shape
        if position_ids is None:
            position_ids = torch.arange(t, device=tokens.device).expand(b, t)
        if masked is None:
            masked = ~torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        allowed = sdpa_mask(masked)
        if allowed.dim() == 3:
            allowed = allowed.unsqueeze(1)           # (B, 1, T, T): same mask for every head
        x = self.tok(tokens) + self.pos(position_ids)
        for block in self.blocks:
            x = block(x, allowed)
        return self.head(self.ln(x))


def with_attention(model: TinyCausalLM, attention: str) -> TinyCausalLM:
    """A copy of ``model`` (same weights, eval mode) whose blocks take the attention path ``attention``."""
    if attention not in ATTENTION_PATHS:
        raise ValueError(f"attention={attention!r}: use one of {ATTENTION_PATHS}")
    other = copy.deepcopy(model).eval()
    for block in other.blocks:
        block.attention = attention
    return other


@torch.no_grad()
def cross_document_change(model: nn.Module, tokens: torch.Tensor, cu_seqlens: torch.Tensor,
                          position_ids: torch.Tensor, masked: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """How much the logits of the *later* documents of one packed row move when the first changes.

    ``tokens``/``position_ids``: int64 (T,); ``cu_seqlens``: int32 (n+1,) with n ≥ 2; ``masked``:
    bool (1, T, T), True = masked (the dataloader's mask).  The first document's tokens are replaced
    by other random ids (``seed``); returns float32 (T − cu[1],): max |Δ logit| of every later token.
    All zeros when the attention path keeps documents apart.
    """
    first = int(cu_seqlens[1])
    if first >= tokens.numel():
        raise ValueError("cross_document_change needs a row with at least two documents")
    vocab = model.head.out_features
    gen = torch.Generator().manual_seed(seed)
    other = tokens.clone()
    other[:first] = (tokens[:first] + torch.randint(1, vocab, (first,), generator=gen)) % vocab
    run = lambda t: model(t.reshape(1, -1), position_ids.reshape(1, -1), masked)[0]  # noqa: E731
    return (run(other)[first:] - run(tokens)[first:]).abs().amax(-1)


def pack_documents(docs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate 1-D token tensors; returns (tokens (T,), cu_seqlens int32 (n+1,))."""
    lengths = torch.tensor([int(d.numel()) for d in docs])
    cu = torch.zeros(len(docs) + 1, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    return torch.cat([d.reshape(-1) for d in docs]), cu


def run_separately(model: nn.Module, docs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each document through ``model`` on its own (causal, positions from 0); outputs concatenated (T, …)."""
    outs = [model(d.reshape(1, -1))[0] for d in docs]
    return torch.cat(outs)


def run_packed(model: nn.Module, docs: Sequence[torch.Tensor], boundary_mask: bool = True,
               reset_position_ids: bool = True) -> torch.Tensor:
    """All documents in one packed row (T,): block-diagonal causal mask and restarted positions
    when asked, else Megatron's defaults (one causal sequence, positions 0…T-1)."""
    tokens, cu = pack_documents(docs)
    t = tokens.numel()
    masked = (attention_mask_from_cu_seqlens(cu) if boundary_mask
              else ~torch.ones(1, t, t, dtype=torch.bool).tril())
    pos = position_ids_from_cu_seqlens(cu) if reset_position_ids else torch.arange(t)
    return model(tokens.reshape(1, -1), pos.reshape(1, -1), masked)[0]


def leakage(weights: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Per query: the attention weight (0…1) placed on keys of *other* documents.

    ``weights``: (T, T) softmax rows; ``cu_seqlens``: the documents' boundaries.  Returns (T,).
    """
    seg = segment_ids_from_cu_seqlens(cu_seqlens, weights.shape[-1]).to(weights.device)
    other = seg[:, None] != seg[None, :]
    return (weights * other).sum(-1)


def dense_block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`varlen_attention`: SDPA with the dense block-diagonal causal mask.

    ``q``/``k``/``v``: (T, H, D) in the varlen (THD) layout; returns (T, H, D).
    """
    allowed = sdpa_mask(attention_mask_from_cu_seqlens(cu_seqlens.cpu())).to(q.device)
    out = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                         v.transpose(0, 1).unsqueeze(0), attn_mask=allowed.unsqueeze(1))
    return out[0].transpose(0, 1)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int) -> tuple[torch.Tensor, str]:
    """Causal attention inside each ``cu_seqlens`` segment, without a dense mask (GPU).

    ``q``/``k``/``v``: (T, H, D) on CUDA (half precision for the flash kernel).  Tries
    ``torch.nn.attention.varlen.varlen_attn`` (PyTorch ≥ 2.9), then FlexAttention with a
    document mask built from ``cu_seqlens``.  Returns (output (T, H, D), name of the path used).
    """
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    errors = []
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: PLC0415 - optional torch feature (newer torch versions only)
        params = inspect.signature(varlen_attn).parameters
        kwargs = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        return varlen_attn(q, k, v, cu, cu, int(max_seqlen), int(max_seqlen), **kwargs), "varlen_attn"
    except Exception as exc:  # noqa: BLE001 - fall through to the next kernel, report at the end
        errors.append(f"varlen_attn: {type(exc).__name__}: {exc}")
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: PLC0415 - optional torch feature (newer torch versions only)
        t = q.shape[0]
        doc = torch.repeat_interleave(torch.arange(cu.numel() - 1, device=q.device), torch.diff(cu.long()))

        def document_causal(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

        block = create_block_mask(document_causal, None, None, t, t, device=q.device)
        args = (q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0))
        if q.is_cuda:  # the fused kernel needs torch.compile
            out = torch.compile(flex_attention)(*args, block_mask=block)
            return out[0].transpose(0, 1), "flex_attention (compiled)"
        with warnings.catch_warnings():  # eager flex on CPU: correct, unfused ("materializes the scores")
            warnings.simplefilter("ignore", UserWarning)
            out = flex_attention(*args, block_mask=block)
        return out[0].transpose(0, 1), "flex_attention (eager)"
    except Exception as exc:  # noqa: BLE001
        errors.append(f"flex_attention: {type(exc).__name__}: {exc}")
    raise RuntimeError("no varlen attention kernel worked here: " + "; ".join(errors))
