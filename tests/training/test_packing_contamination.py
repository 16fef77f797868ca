"""The contamination proof of chapter 4 as assertions (labsupport.models.tiny_lm): a packed
sequence with the boundary mask and restarted positions computes exactly what each document
computes alone; without the mask (or without the position reset) it does not."""
from __future__ import annotations

import pytest
import torch

from labsupport.datasets.gpt_samples import attention_mask_from_cu_seqlens
from labsupport.models import tiny_lm as pm
from labsupport.models.tiny_lm import (
    TinyCausalLM, apply_rotary, causal_attention, dense_block_attention, leakage, pack_documents, run_packed,
    run_separately, sdpa_mask, varlen_attention,
)


def _docs(gen, lengths, vocab=256):
    return [torch.randint(0, vocab, (n,), generator=gen) for n in lengths]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_with_boundary_mask_equals_documents_alone(seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TinyCausalLM().eval()
    docs = _docs(gen, torch.randint(1, 40, (5,), generator=gen).tolist())
    first = docs[0].numel()
    with torch.no_grad():
        alone = run_separately(model, docs)
        packed = run_packed(model, docs)
        no_mask = run_packed(model, docs, boundary_mask=False, reset_position_ids=False)
        no_reset = run_packed(model, docs, boundary_mask=True, reset_position_ids=False)
        no_block = run_packed(model, docs, boundary_mask=False, reset_position_ids=True)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    for contaminated in (no_mask, no_reset, no_block):
        assert (contaminated[first:] - alone[first:]).abs().max() > 1e-2
        torch.testing.assert_close(contaminated[:first], alone[:first], rtol=1e-5, atol=1e-5)


def test_attention_weights_leak_only_without_the_mask():
    gen = torch.Generator().manual_seed(3)
    tokens, cu = pack_documents(_docs(gen, [6, 9, 4, 11]))
    x = torch.randn(tokens.numel(), 16, generator=gen)
    wq, wk, wv = (torch.randn(16, 8, generator=gen) for _ in range(3))
    _, w_masked = causal_attention(x, wq, wk, wv, attention_mask_from_cu_seqlens(cu)[0])
    _, w_causal = causal_attention(x, wq, wk, wv)
    torch.testing.assert_close(w_masked.sum(-1), torch.ones(tokens.numel()))
    assert leakage(w_masked, cu).max() == 0
    assert leakage(w_causal, cu)[:6].max() == 0               # the first document has nothing before it
    assert leakage(w_causal, cu)[6:].min() > 0


def test_no_gradient_crosses_the_boundary():
    torch.manual_seed(4)
    model = TinyCausalLM()
    gen = torch.Generator().manual_seed(4)
    docs = _docs(gen, [10, 12])
    tokens, cu = pack_documents(docs)
    for boundary, expect_zero in ((True, True), (False, False)):
        emb = model.tok(tokens.reshape(1, -1)).detach().requires_grad_(True)
        pos = torch.cat([torch.arange(10), torch.arange(12)]).reshape(1, -1)
        masked = attention_mask_from_cu_seqlens(cu) if boundary else ~torch.ones(1, 22, 22, dtype=torch.bool).tril()
        x = emb + model.pos(pos)
        allowed = sdpa_mask(masked).unsqueeze(1)
        for block in model.blocks:
            x = block(x, allowed)
        model.head(model.ln(x))[0, 10:].sum().backward()     # the second document's outputs
        grad_into_first = emb.grad[0, :10].abs().max().item()
        assert (grad_into_first == 0) == expect_zero


def test_varlen_path_equals_dense_and_per_document():
    gen = torch.Generator().manual_seed(5)
    _, cu = pack_documents(_docs(gen, [7, 12, 5, 9]))
    q, k, v = (torch.randn(33, 2, 8, generator=gen) for _ in range(3))
    out, path = varlen_attention(q, k, v, cu, 12)
    assert path.startswith(("varlen_attn", "flex_attention"))
    dense = dense_block_attention(q, k, v, cu)
    torch.testing.assert_close(out, dense, rtol=1e-5, atol=1e-5)
    bounds = cu.tolist()
    alone = torch.cat([
        torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), is_causal=True
        ).transpose(0, 1) for a, b in zip(bounds[:-1], bounds[1:])])
    torch.testing.assert_close(dense, alone, rtol=1e-5, atol=1e-5)


def test_mask_conventions():
    megatron = attention_mask_from_cu_seqlens(torch.tensor([0, 2, 3], dtype=torch.int32))
    assert megatron[0].tolist() == [[False, True, True], [False, False, True], [True, True, False]]
    assert torch.equal(sdpa_mask(megatron), ~megatron)


def _rope_head(x, wq, wk, wv, positions, mask):
    q, k, v = x @ wq, x @ wk, x @ wv
    q, k = apply_rotary(q, positions), apply_rotary(k, positions)
    scores = (q @ k.T) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("seed", [0, 1])
def test_with_rotary_embeddings_the_mask_alone_suffices(seed):
    """Chapter 4 and exercise 04 q4: RoPE scores depend on relative positions only, so with the
    boundary mask the position reset changes nothing; without the mask documents still leak."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 30, (4,), generator=gen).tolist()
    tokens, cu = pack_documents(_docs(gen, lengths))
    emb = torch.randn(256, 32, generator=gen)
    wq, wk, wv = (torch.randn(32, 16, generator=gen) / 32 ** 0.5 for _ in range(3))
    x = emb[tokens]
    t = tokens.numel()
    block = attention_mask_from_cu_seqlens(cu)[0]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    plain, reset = torch.arange(t), torch.cat([torch.arange(n) for n in lengths])
    bounds = cu.tolist()
    alone = torch.cat([_rope_head(x[a:b], wq, wk, wv, torch.arange(b - a), causal[: b - a, : b - a])
                       for a, b in zip(bounds[:-1], bounds[1:])])
    torch.testing.assert_close(_rope_head(x, wq, wk, wv, reset, block), alone, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(_rope_head(x, wq, wk, wv, plain, block), alone, rtol=1e-4, atol=1e-4)
    leaked = _rope_head(x, wq, wk, wv, reset, causal)
    assert (leaked[bounds[1]:] - alone[bounds[1]:]).abs().max() > 1e-2
    with pytest.raises(ValueError, match="must be even"):
        apply_rotary(torch.zeros(3, 5), torch.arange(3))


def test_an_attention_path_without_a_mask_input_mixes_documents_silently():
    """Chapter 4/6: the block mask protects a later document only on a path that applies it; a
    fused-style path (``is_causal=True``, no mask input) lets the first document change it."""
    torch.manual_seed(3)
    model = pm.TinyCausalLM(vocab_size=50, d_model=16, n_heads=2, n_layers=2).eval()
    docs = [torch.randint(0, 50, (n,)) for n in (7, 5, 9)]
    tokens, cu = pm.pack_documents(docs)
    from labsupport.datasets.gpt_samples import attention_mask_from_cu_seqlens, position_ids_from_cu_seqlens

    masked, pos = attention_mask_from_cu_seqlens(cu), position_ids_from_cu_seqlens(cu)
    kept = pm.cross_document_change(model, tokens, cu, pos, masked)
    mixed = pm.cross_document_change(pm.with_attention(model, "causal"), tokens, cu, pos, masked)
    assert kept.shape == mixed.shape == (tokens.numel() - 7,)
    assert float(kept.max()) == 0.0                              # the mask applied: exactly no influence
    assert bool((mixed > 1e-4).all())                             # no mask input: every later token moves
    same = pm.with_attention(model, "causal")(tokens.reshape(1, -1))   # without documents both paths agree
    assert torch.allclose(same, model(tokens.reshape(1, -1)), atol=1e-5)
    with pytest.raises(ValueError, match="attention='flash'"):
        pm.TinyCausalLM(attention="flash")
