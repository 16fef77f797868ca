"""labsupport.datasets.sft_packing (chapter 4) against megatron-core 0.16.1: the sample index of the C++
helper, and GPTDataset — document, sample and shuffle indices, length, and every sample's
tokens / labels / loss_mask / position_ids, with the dense attention mask rebuilt from
cu_seqlens — over random corpora, seeds, sequence lengths and all eight reset/eod flag sets."""
from __future__ import annotations

import logging
import warnings
from collections import OrderedDict

import numpy as np
import pytest
import torch

from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import (GPTDataset, attention_mask_from_cu_seqlens, build_sample_idx,
                                             get_ltor_boundaries, get_ltor_masks_and_position_ids)

pytestmark = [pytest.mark.crosscheck,
              pytest.mark.filterwarnings("ignore:The pad token id in the tokenizer collides:UserWarning")]


@pytest.fixture(scope="module")
def mc(megatron):
    """megatron.core.datasets modules; the shared ``megatron`` fixture skips (or fails under
    LABSUPPORT_REQUIRE_CROSSCHECK=1) when megatron-core is missing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
        from megatron.core.datasets import gpt_dataset, helpers, indexed_dataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.utils import Split
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return {"gpt": gpt_dataset, "helpers": helpers, "indexed": indexed_dataset,
            "builder": BlendedMegatronDatasetBuilder, "Split": Split}


class _Tokenizer:
    """The part of a Megatron tokenizer that GPTDatasetConfig reads."""

    def __init__(self, vocab: int, eod: int, pad: int) -> None:
        self.vocab_size, self.eod, self.pad = vocab, eod, pad
        self.unique_identifiers = OrderedDict(cls="TestTokenizer", vocab=vocab, eod=eod, pad=pad)


FLAGS = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss")


def _config(mc, prefix, cache, seed, seq_length, flags, tok, **extra):
    return mc["gpt"].GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, blend=([prefix], None), split="1,0,0",
        path_to_cache=str(cache), reset_position_ids=flags[0], reset_attention_mask=flags[1],
        eod_mask_loss=flags[2], tokenizer=tok, mmap_bin_files=True, **extra)


def _write_corpus(writer, prefix, rng, eod, vocab):
    """Documents of 0..maxlen random ids, each ending with EOD (some are the EOD alone)."""
    b = writer(f"{prefix}.bin", np.uint16)
    maxlen = int(rng.integers(2, 120))
    for _ in range(int(rng.integers(1, 40))):
        doc = np.append(rng.integers(0, vocab, int(rng.integers(0, maxlen))), eod)
        b.add_document(doc, [doc.size])
    b.finalize(f"{prefix}.idx")


def _assert_same_samples(mine, theirs, where):
    np.testing.assert_array_equal(mine.document_index, theirs.document_index, err_msg=where)
    assert mine.sample_index.dtype == theirs.sample_index.dtype, where
    np.testing.assert_array_equal(mine.sample_index, theirs.sample_index, err_msg=where)
    assert mine.shuffle_index.dtype == theirs.shuffle_index.dtype, where
    np.testing.assert_array_equal(mine.shuffle_index, theirs.shuffle_index, err_msg=where)
    assert len(mine) == len(theirs), where
    for k in range(len(theirs)):
        a, b = theirs[k], mine[k]
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), f"{where} sample {k} {key}"
        if "attention_mask" in a:
            rebuilt = attention_mask_from_cu_seqlens(b["cu_seqlens"], a["tokens"].numel())
            assert torch.equal(rebuilt, a["attention_mask"]), f"{where} sample {k} attention_mask"
    return len(theirs)


def test_build_sample_idx_equals_the_cpp_helper(mc):
    helpers = mc["helpers"]
    rng = np.random.default_rng(2024)
    compared = 0
    for _ in range(500):
        n = int(rng.integers(1, 40))
        sizes = rng.integers(0, 60, n).astype(np.int32)
        if sizes.sum() < 2:
            continue
        epochs = int(rng.integers(1, 5))
        doc = np.tile(np.arange(n, dtype=np.int32), epochs)
        rng.shuffle(doc)
        seq = int(rng.integers(2, 80))
        for drop in (True, False):
            for extra in (True, False):
                try:
                    want = helpers.build_sample_idx(sizes, doc, seq, epochs, int(sizes.sum()), drop, extra)
                except AssertionError:  # a negative offset: megatron's own check fails
                    with pytest.raises(ValueError):
                        build_sample_idx(sizes, doc, seq, epochs, int(sizes.sum()), drop, int(extra))
                    continue
                got = build_sample_idx(sizes, doc, seq, epochs, int(sizes.sum()), drop, int(extra))
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
                compared += 1
    assert compared > 1500


def test_masks_equal_megatron_function(mc):
    fn = mc["gpt"]._get_ltor_masks_and_position_ids
    rng = np.random.default_rng(7)
    for _ in range(150):
        tokens = torch.from_numpy(rng.integers(0, 4, int(rng.integers(1, 70))))
        flags = tuple(bool(x) for x in rng.integers(0, 2, 3))
        want = fn(tokens, 0, *flags, True)
        got = get_ltor_masks_and_position_ids(tokens, 0, *flags)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and torch.equal(w, g)
        compact = get_ltor_boundaries(tokens, 0, *flags)
        assert torch.equal(attention_mask_from_cu_seqlens(compact.cu_seqlens), want[0])


@pytest.mark.parametrize("flags", [(a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)])
def test_gpt_dataset_equals_megatron(mc, tmp_path, flags):
    rng = np.random.default_rng(hash(flags) % 2**32)
    compared = 0
    for trial in range(6):
        vocab = int(rng.integers(8, 400))
        eod = int(rng.integers(0, vocab))
        pad = int(rng.choice([-1, eod, int(rng.integers(0, vocab))]))  # pad may collide with data
        prefix = tmp_path / f"c{trial}"
        writer = IndexedDatasetBuilder if trial % 2 else mc["indexed"].IndexedDatasetBuilder
        _write_corpus(writer, prefix, rng, eod, vocab)
        seq = int(rng.integers(2, 96))
        seed = int(rng.integers(0, 2**31))
        num_samples = int(rng.integers(1, 400))
        cfg = _config(mc, str(prefix), tmp_path / "cache", seed, seq, flags, _Tokenizer(vocab, eod, pad))
        ds_mc = mc["indexed"].IndexedDataset(str(prefix))
        theirs = mc["gpt"].GPTDataset(ds_mc, str(prefix), np.arange(len(ds_mc), dtype=np.int32),
                                      num_samples, mc["Split"].train, cfg)
        with IndexedDataset(prefix) as ds:
            mine = GPTDataset(ds, None, num_samples, GPTDatasetConfig(seq_length=seq, seed=seed,
                                                                      **dict(zip(FLAGS, flags)), eod_token=eod,
                                                                      pad_token=pad))
            compared += _assert_same_samples(mine, theirs, f"flags={flags} trial={trial} S={seq} seed={seed}")
    assert compared > 0, f"flags={flags}: no sample was compared"


def test_validation_split_options_equal_megatron(mc, tmp_path):
    """drop_last_partial_validation_sequence=False pads the last sample; add_extra_token=False rolls."""
    rng = np.random.default_rng(11)
    compared, padded = 0, 0
    for trial in range(12):
        vocab, eod = 300, 2
        prefix = tmp_path / f"v{trial}"
        _write_corpus(IndexedDatasetBuilder, prefix, rng, eod, vocab)
        seq = int(rng.integers(2, 64))
        flags = tuple(bool(x) for x in rng.integers(0, 2, 3))
        drop, extra = bool(trial % 2), bool(trial % 3)
        cfg = _config(mc, str(prefix), tmp_path / "cache", trial, seq, flags, _Tokenizer(vocab, eod, 7),
                      drop_last_partial_validation_sequence=drop, add_extra_token_to_sequence=extra)
        ds_mc = mc["indexed"].IndexedDataset(str(prefix))
        theirs = mc["gpt"].GPTDataset(ds_mc, str(prefix), np.arange(len(ds_mc), dtype=np.int32),
                                      None, mc["Split"].valid, cfg)
        with IndexedDataset(prefix) as ds:
            mine = GPTDataset(ds, None, None, GPTDatasetConfig(seq_length=seq, seed=trial, **dict(zip(FLAGS, flags)),
                                                               eod_token=eod, pad_token=7,
                                                               drop_last_partial_sequence=drop,
                                                               add_extra_token=extra))
            compared += _assert_same_samples(mine, theirs, f"valid trial={trial}")
            tokens = int(np.sum(ds.sequence_lengths))
        padded += not drop and len(theirs) * seq > tokens - extra   # the last sample runs past the data
    assert compared > 0, "no validation sample was compared"
    assert padded > 0, "no trial had a padded last validation sample: the test compared only full ones"


def test_equal_to_what_the_training_builder_returns(mc, tmp_path):
    """Through BlendedMegatronDatasetBuilder (the path Megatron's pretrain_gpt.py takes)."""
    rng = np.random.default_rng(3)
    prefix = tmp_path / "built"
    _write_corpus(IndexedDatasetBuilder, prefix, rng, 3, 500)
    cfg = _config(mc, str(prefix), tmp_path / "cache", 5, 32, (True, True, True), _Tokenizer(500, 3, 0))
    train, valid, test = mc["builder"](mc["gpt"].GPTDataset, [80, None, None], lambda: True, cfg).build()
    assert valid is None and test is None
    with IndexedDataset(prefix) as ds:
        mine = GPTDataset(ds, None, 80, GPTDatasetConfig(seq_length=32, seed=5, reset_position_ids=True,
                                                         reset_attention_mask=True, eod_mask_loss=True, eod_token=3,
                                                         pad_token=0))
        assert _assert_same_samples(mine, train, "builder") > 0, "the builder returned no sample to compare"


def test_epochs_repeat_documents_not_sample_windows(mc, tmp_path):
    """Chapter 3's "epochs": megatron-core's GPTDataset over several epochs holds every document
    once per epoch, all copies shuffled in one permutation, so the sample windows of later passes
    are new cuts of the same text; labsupport's token_reads counts the text read, per document."""
    rng = np.random.default_rng(7)
    prefix = tmp_path / "corpus"
    b = mc["indexed"].IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    for _ in range(30):
        doc = np.append(rng.integers(1, 500, int(rng.integers(20, 90))), 0)
        b.add_document(doc, [doc.size])
    b.finalize(f"{prefix}.idx")
    seq, seed = 32, 1234
    ds_mc = mc["indexed"].IndexedDataset(str(prefix))
    per_epoch = (int(ds_mc.sequence_lengths.sum()) - 1) // seq
    num_samples = 4 * per_epoch                                 # four epochs, the last one full
    cfg = _config(mc, str(prefix), tmp_path / "cache", seed, seq, (False, False, False), _Tokenizer(500, 0, -1))
    theirs = mc["gpt"].GPTDataset(ds_mc, str(prefix), np.arange(len(ds_mc), dtype=np.int32),
                                  num_samples, mc["Split"].train, cfg)
    epochs = theirs.num_epochs if hasattr(theirs, "num_epochs") else None
    # every document appears once per epoch in megatron's document index ...
    counts = np.bincount(theirs.document_index, minlength=len(ds_mc))
    assert counts.min() == counts.max() >= 4 and (epochs is None or counts.max() == epochs)
    # ... the copies in one shuffled order, so the windows cut from the stream are not repeated
    n_docs = len(ds_mc)
    orders = [theirs.document_index[e * n_docs:(e + 1) * n_docs].tolist() for e in range(counts.max())]
    assert len({tuple(o) for o in orders}) > 1
    windows = [theirs[k]["tokens"].numpy().tobytes() for k in range(num_samples)]
    assert len(set(windows)) > 0.95 * num_samples           # nearly every drawn window is new ...
    with IndexedDataset(prefix) as ds:
        mine = GPTDataset(ds, None, num_samples, GPTDatasetConfig(seq_length=seq, seed=seed, reset_position_ids=False,
                                                                  reset_attention_mask=False, eod_mask_loss=False,
                                                                  eod_token=0))
        _assert_same_samples(mine, theirs, "four epochs")
        reads = mine.token_reads(num_samples)
    # ... while the text is read four times: per document, the tokens read / its length
    assert reads.shape == (n_docs,)
    assert np.all(reads >= 3.0) and np.all(reads <= 5.0)
    assert abs(reads.mean() - 4.0) < 0.2
    total = sum(int(ds_mc.sequence_lengths[d]) * r for d, r in enumerate(reads))
    assert total == pytest.approx(num_samples * (seq + 1))    # S + 1 tokens per sample
