"""labsupport.datasets.gpt_samples (chapter 4): Megatron GPT sample index, masks, position ids and the
compact cu_seqlens form, checked against literal transcriptions of Megatron's loops and against
the token stream itself (the comparison with the real megatron-core is in
tests/crosscheck/test_packing.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import (
    GPTDataset, attention_mask_from_cu_seqlens, build_sample_idx, get_ltor_boundaries,
    get_ltor_masks_and_position_ids, num_epochs_for, position_ids_from_cu_seqlens,
    segment_ids_from_cu_seqlens,
)
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder


# ----------------------------------------------------------------- literal transcriptions
def loop_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, drop_last=True, extra=1):
    """helpers.cpp build_sample_idx, statement by statement (test oracle)."""
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    else:
        num_samples = int(np.ceil(np.float32(num_epochs * tokens_per_epoch - extra) / np.float32(seq_length)))
    out = [(0, 0)]
    d, off = 0, 0
    while len(out) <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            doc_len = int(sizes[doc_idx[d]]) - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - extra
                remaining = 0
            else:
                if d == len(doc_idx) - 1:
                    off = int(sizes[doc_idx[d]]) - extra
                    break
                d += 1
                off = 0
        out.append((d, off))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def loop_masks(tokens, eod, reset_pos, reset_attn, eod_mask):
    """gpt_dataset._get_ltor_masks_and_position_ids, loop for loop (test oracle)."""
    s = tokens.numel()
    att = torch.tril(torch.ones((s, s))).unsqueeze(0)
    loss = torch.ones(s, dtype=torch.float)
    if eod_mask:
        loss[tokens == eod] = 0.0
    pos = torch.arange(s, dtype=torch.long)
    if reset_pos or reset_attn:
        eods = pos[tokens == eod].clone()
        prev = 0
        for j in range(eods.numel()):
            i = int(eods[j])
            if reset_attn:
                att[0, i + 1:, :i + 1] = 0
            if reset_pos:
                pos[i + 1:] -= i + 1 - prev
                prev = i + 1
    return att < 0.5, loss, pos


# ---------------------------------------------------------------------------- sample index
def test_golden_sample_index():
    got = build_sample_idx(np.array([5, 2, 7], np.int32), np.array([0, 1, 2], np.int32), 4, 1, 14)
    assert got.tolist() == [[0, 0], [0, 4], [2, 1], [2, 5]]
    assert got.dtype == np.int32


def test_sample_index_matches_the_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    cases = 0
    for _ in range(400):
        n = int(rng.integers(1, 25))
        sizes = rng.integers(0, 30, n).astype(np.int32)
        if sizes.sum() < 3:
            continue
        epochs = int(rng.integers(1, 4))
        doc = np.tile(np.arange(n, dtype=np.int32), epochs)
        rng.shuffle(doc)
        s = int(rng.integers(2, 40))
        for drop in (True, False):
            for extra in (0, 1):
                want = loop_sample_idx(sizes, doc, s, epochs, int(sizes.sum()), drop, extra)
                if (want < 0).any():  # Megatron's wrapper asserts here; labsupport refuses
                    with pytest.raises(ValueError, match="negative offset"):
                        build_sample_idx(sizes, doc, s, epochs, int(sizes.sum()), drop, extra)
                    continue
                got = build_sample_idx(sizes, doc, s, epochs, int(sizes.sum()), drop, extra)
                np.testing.assert_array_equal(got, want)
                cases += 1
    assert cases > 1000


def test_sample_index_covers_the_stream_in_steps_of_seq_length():
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 50, 60).astype(np.int32)
    doc = rng.permutation(60).astype(np.int32)
    idx = build_sample_idx(sizes, doc, 16, 1, int(sizes.sum()))
    starts = np.concatenate([[0], np.cumsum(sizes[doc])])
    glob = starts[idx[:, 0]] + idx[:, 1]
    np.testing.assert_array_equal(glob, np.arange(idx.shape[0]) * 16)
    assert idx.shape[0] - 1 == (int(sizes.sum()) - 1) // 16


@pytest.mark.parametrize("kwargs, match", [
    (dict(seq_length=1), "seq_length must be > 1"),
    (dict(num_epochs=0), "num_epochs must be > 0"),
    (dict(tokens_per_epoch=99), "sizes\\[doc_idx\\] holds 14 tokens"),
    (dict(doc_idx=np.array([0, 3], np.int32)), "doc_idx\\[1\\] = 3"),
    (dict(add_extra_token=2), "add_extra_token must be 0 or 1"),
])
def test_sample_index_refuses_bad_input(kwargs, match):
    args = dict(sizes=np.array([5, 2, 7], np.int32), doc_idx=np.array([0, 1, 2], np.int32),
                seq_length=4, num_epochs=1, tokens_per_epoch=14)
    args.update(kwargs)
    with pytest.raises((ValueError, IndexError), match=match):
        build_sample_idx(**args)


def test_num_epochs():
    assert num_epochs_for(None, 100, 10) == 1
    assert num_epochs_for(9, 100, 11) == 1     # 9·11+1 = 100 tokens fit one epoch
    assert num_epochs_for(10, 100, 10) == 2    # 101 tokens need two
    assert num_epochs_for(0, 100, 10) == 1


# ---------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("flags", [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)])
def test_masks_match_the_loop(flags):
    rng = np.random.default_rng(sum(f << i for i, f in enumerate(flags)))
    for _ in range(40):
        s = int(rng.integers(1, 40))
        tokens = torch.from_numpy(rng.integers(0, 4, s))   # eod = 0 is frequent, also adjacent
        want = loop_masks(tokens, 0, *map(bool, flags))
        got = get_ltor_masks_and_position_ids(tokens, 0, *map(bool, flags))
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and torch.equal(w, g)


def test_compact_form_rebuilds_the_dense_mask_exactly():
    rng = np.random.default_rng(3)
    for _ in range(200):
        s = int(rng.integers(1, 64))
        tokens = rng.integers(0, 5, s)
        reset_pos, reset_attn, eod_mask = (bool(x) for x in rng.integers(0, 2, 3))
        b = get_ltor_boundaries(tokens, 0, reset_pos, reset_attn, eod_mask)
        dense, loss, pos = loop_masks(torch.from_numpy(tokens), 0, reset_pos, reset_attn, eod_mask)
        assert torch.equal(attention_mask_from_cu_seqlens(b.cu_seqlens, s), dense)
        assert torch.equal(b.position_ids, pos) and torch.equal(b.loss_mask, loss)
        assert b.cu_seqlens.dtype == torch.int32 and int(b.cu_seqlens[-1]) == s
        assert b.max_seqlen == int(torch.diff(b.cu_seqlens).max())
        if reset_pos and reset_attn:  # THD layout: positions follow from cu_seqlens alone
            assert torch.equal(position_ids_from_cu_seqlens(b.cu_seqlens), b.position_ids)


def test_segments_end_after_each_eod():
    tokens = np.array([7, 0, 0, 5, 6, 0, 9, 0])  # EOD = 0; the last EOD opens no new segment
    b = get_ltor_boundaries(tokens, 0, True, True, True)
    assert b.cu_seqlens.tolist() == [0, 2, 3, 6, 8]
    assert b.position_ids.tolist() == [0, 1, 0, 0, 1, 2, 0, 1]
    assert b.loss_mask.tolist() == [1, 0, 0, 1, 1, 0, 1, 0]
    assert segment_ids_from_cu_seqlens(b.cu_seqlens).tolist() == [0, 0, 1, 2, 2, 2, 3, 3]
    # without reset_attention_mask there is one causal segment
    assert get_ltor_boundaries(tokens, 0, True, False, False).cu_seqlens.tolist() == [0, 8]


def test_cu_seqlens_validation():
    with pytest.raises(ValueError, match="start at 0"):
        attention_mask_from_cu_seqlens([1, 4])
    with pytest.raises(ValueError, match="expected seq_length 5"):
        attention_mask_from_cu_seqlens([0, 4], 5)
    with pytest.raises(ValueError, match="1-D"):
        get_ltor_boundaries(np.zeros((2, 2)), 0, True, True, True)


# -------------------------------------------------------------------------------- dataset
EOD = 3


@pytest.fixture()
def corpus(tmp_path):
    rng = np.random.default_rng(5)
    prefix = tmp_path / "corpus"
    docs = []
    b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    for _ in range(40):
        doc = np.append(rng.integers(4, 500, int(rng.integers(0, 90))), EOD)
        docs.append(doc)
        b.add_document(doc)
    b.finalize(f"{prefix}.idx")
    ds = IndexedDataset(prefix)
    yield ds, docs
    ds.close()


def test_dataset_samples_are_the_concatenated_stream(corpus):
    ds, docs = corpus
    g = GPTDataset(ds, None, 50, GPTDatasetConfig(seq_length=32, seed=1234, reset_position_ids=True,
                                                  reset_attention_mask=True, eod_mask_loss=True, eod_token=EOD))
    assert len(g) == g.sample_index.shape[0] - 1 >= 50
    stream = np.concatenate([docs[d] for d in g.document_index])
    inverse = np.argsort(g.shuffle_index)  # sample row r is dataset item inverse[r]
    for row in range(len(g)):
        item = g[int(inverse[row])]
        text = stream[row * 32: row * 32 + 33]
        np.testing.assert_array_equal(item["tokens"].numpy(), text[:-1])
        np.testing.assert_array_equal(item["labels"].numpy(), text[1:])
        cu = item["cu_seqlens"].numpy()
        ends = cu[1:-1] - 1                       # every segment but the last ends with EOD
        assert (text[:-1][ends] == EOD).all()
        assert item["position_ids"][0] == 0 and item["loss_mask"].dtype == torch.float32
        assert "attention_mask" not in item


def test_dataset_is_deterministic_per_seed(corpus):
    ds, _ = corpus
    a = GPTDataset(ds, None, 100, GPTDatasetConfig(seq_length=16, seed=7, reset_position_ids=False,
                                                   reset_attention_mask=False, eod_mask_loss=False, eod_token=EOD))
    b = GPTDataset(ds, None, 100, GPTDatasetConfig(seq_length=16, seed=7, reset_position_ids=False,
                                                   reset_attention_mask=False, eod_mask_loss=False, eod_token=EOD))
    c = GPTDataset(ds, None, 100, GPTDatasetConfig(seq_length=16, seed=8, reset_position_ids=False,
                                                   reset_attention_mask=False, eod_mask_loss=False, eod_token=EOD))
    assert np.array_equal(a.shuffle_index, b.shuffle_index)
    assert torch.equal(a[5]["tokens"], b[5]["tokens"])
    assert not np.array_equal(a.document_index, c.document_index)


def test_dataset_separate_final_epoch(corpus):
    ds, _ = corpus
    total = int(ds.sequence_lengths.sum())
    per_epoch = (total - 1) // 16
    g = GPTDataset(ds, None, per_epoch + 3, GPTDatasetConfig(seq_length=16, seed=0, reset_position_ids=False,
                                                             reset_attention_mask=False, eod_mask_loss=False,
                                                             eod_token=EOD))  # 2 epochs, 2nd barely used
    assert g.num_epochs == 2 and g.separate_final_epoch
    sans = (total - 1) // 16
    assert sorted(g.shuffle_index[:sans].tolist()) == list(range(sans))   # shuffled apart
    g2 = GPTDataset(ds, None, 2 * per_epoch, GPTDatasetConfig(seq_length=16, seed=0, reset_position_ids=False,
                                                              reset_attention_mask=False, eod_mask_loss=False,
                                                              eod_token=EOD))
    assert g2.num_epochs == 2 and not g2.separate_final_epoch


def test_crossing_the_80_percent_threshold_moves_trained_samples_at_the_same_epoch_count(corpus):
    """Issue #30: with 2 epochs both times, a run built for a last epoch under 80 % of an epoch
    (separate_final_epoch, Megatron's gpt_dataset.py) reads other samples first than one built above it."""
    ds, _ = corpus
    per_epoch = (int(ds.sequence_lengths.sum()) - 1) // 16
    cfg = GPTDatasetConfig(seq_length=16, seed=0, reset_position_ids=False, reset_attention_mask=False,
                           eod_mask_loss=False, eod_token=EOD)
    under, over = GPTDataset(ds, None, per_epoch + 3, cfg), GPTDataset(ds, None, 2 * per_epoch, cfg)
    assert under.num_epochs == over.num_epochs == 2
    assert under.separate_final_epoch and not over.separate_final_epoch
    assert not all(torch.equal(under[i]["tokens"], over[i]["tokens"]) for i in range(8))


def test_dataset_dense_mask_option_and_bounds(corpus):
    ds, _ = corpus
    g = GPTDataset(ds, None, 10, GPTDatasetConfig(seq_length=24, seed=0, reset_position_ids=True,
                                                  reset_attention_mask=True, eod_mask_loss=False, eod_token=EOD,
                                                  create_attention_mask=True))
    item = g[0]
    assert torch.equal(item["attention_mask"], attention_mask_from_cu_seqlens(item["cu_seqlens"]))
    assert item["attention_mask"].shape == (1, 24, 24)
    assert torch.equal(g[-1]["tokens"], g[len(g) - 1]["tokens"])
    with pytest.raises(IndexError, match="out of range"):
        g[len(g)]
    with pytest.raises(ValueError, match="seq_length must be > 1"):
        GPTDataset(ds, None, 10, GPTDatasetConfig(seq_length=1, seed=0, reset_position_ids=True,
                                                  reset_attention_mask=True, eod_mask_loss=False, eod_token=EOD))


def test_dataset_config_is_one_frozen_keyword_only_object(corpus):
    import dataclasses

    ds, _ = corpus
    config = GPTDatasetConfig(seq_length=16, seed=0, reset_position_ids=True, reset_attention_mask=False,
                              eod_mask_loss=False, eod_token=EOD)
    with pytest.raises(TypeError):
        GPTDatasetConfig(16, 0, EOD, True, False, False)           # three booleans in a row: keywords only
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1
    with pytest.raises(TypeError, match="config must be a GPTDatasetConfig"):
        GPTDataset(ds, None, 10, {"seq_length": 16})
    g = GPTDataset(ds, np.arange(3), 10, config)                   # one config, shared by several datasets
    h = GPTDataset(ds, None, 10, dataclasses.replace(config, pad_token=EOD))   # pad = eod counts as no pad
    assert g.config is config and g.indices.tolist() == [0, 1, 2] and h.pad_token == -1


def test_token_reads_counts_the_text_each_sample_reads(corpus):
    """token_reads = tokens of each document in the drawn samples / its length, from the stream."""
    ds, docs = corpus
    g = GPTDataset(ds, None, 300, GPTDatasetConfig(seq_length=32, seed=1234, reset_position_ids=False,
                                                   reset_attention_mask=False, eod_mask_loss=False, eod_token=EOD))
    assert g.num_epochs > 1
    for n in (0, 1, 17, len(g)):
        want = np.zeros(len(docs))
        owner = np.concatenate([np.full(len(docs[d]), d) for d in g.document_index])   # document of each stream token
        for row in g.shuffle_index[:n]:
            np.add.at(want, owner[row * 32: row * 32 + 33], 1)
        lengths = np.array([len(d) for d in docs], dtype=float)
        np.testing.assert_allclose(g.token_reads(n), want / lengths)
    with pytest.raises(ValueError, match="num_samples must be in 0"):
        g.token_reads(len(g) + 1)


def test_sample_segments_are_the_stream_slice():
    """sample_segments (exercise 04 q5's reference) = stream tokens k·S … k·S + S, document by document."""
    from labsupport.datasets.gpt_samples import build_sample_idx, sample_segments

    rng = np.random.default_rng(11)
    for _ in range(200):
        sizes = rng.integers(1, 12, int(rng.integers(1, 8))).astype(np.int32)
        epochs = int(rng.integers(1, 4))
        doc_idx = rng.permutation(np.tile(np.arange(sizes.size, dtype=np.int32), epochs))
        seq = int(rng.integers(2, 9))
        tpe = int(sizes.sum())
        if epochs * tpe - 1 < seq:
            continue
        si = build_sample_idx(sizes, doc_idx, seq, epochs, tpe)
        owner = np.concatenate([np.full(sizes[d], d) for d in doc_idx])
        offset = np.concatenate([np.arange(sizes[d]) for d in doc_idx])
        for k in range(len(si) - 1):
            segs = sample_segments(sizes, doc_idx, si, k)
            lo = k * seq
            got = [(d, t) for d, a, b in segs for t in range(a, b)]
            want = list(zip(owner[lo:lo + seq + 1].tolist(), offset[lo:lo + seq + 1].tolist()))
            assert got == want, (sizes.tolist(), doc_idx.tolist(), seq, k, segs)
    with pytest.raises(ValueError, match="the last row only marks"):
        sample_segments(np.array([5, 2, 7]), np.array([0, 1, 2]), np.array([[0, 0], [0, 4], [2, 1], [2, 5]]), 3)
