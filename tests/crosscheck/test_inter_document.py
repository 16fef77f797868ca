"""labsupport's inter-document masking (chapter 4) against megatron-core ≥ 0.19's
``GPTDatasetConfig(inter_document_masking=True)``: for every sample, the same ``cu_seqlens`` (padded
to S + 1 as megatron-core returns it), ``max_seqlen``, position ids, tokens, labels and loss mask —
over random corpora (with and without EOD at the documents' ends), seeds, lengths, all eight flag
sets, and the padded last validation sample.

megatron-core 0.16.1 (the Python 3.11 pin) has no such field: these tests skip there.  With
megatron-core ≥ 0.19 installed they run, and a comparison that cannot run is a failure (also under
``LABSUPPORT_REQUIRE_CROSSCHECK=1``: the shared ``megatron`` fixture fails when the package is missing).
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset, document_boundaries, pad_cu_seqlens
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder

from tests.crosscheck.test_packing import FLAGS, _Tokenizer, _config

pytestmark = [pytest.mark.crosscheck,
              pytest.mark.filterwarnings("ignore:The pad token id in the tokenizer collides:UserWarning")]


@pytest.fixture(scope="module")
def mc19(megatron):
    """megatron.core.datasets modules of a megatron-core that has inter_document_masking (≥ 0.19)."""
    import logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import megatron.core
        from megatron.core.datasets import gpt_dataset, indexed_dataset
        from megatron.core.datasets.utils import Split
    version = tuple(int(x) for x in megatron.core.__version__.split(".")[:2])
    has_field = "inter_document_masking" in {f.name for f in dataclasses.fields(gpt_dataset.GPTDatasetConfig)}
    if version < (0, 19):
        assert not has_field
        pytest.skip(f"megatron-core {megatron.core.__version__} has no inter_document_masking (added in 0.19)")
    assert has_field, (f"megatron-core {megatron.core.__version__} ≥ 0.19 but GPTDatasetConfig lacks "
                       "inter_document_masking")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return {"gpt": gpt_dataset, "indexed": indexed_dataset, "Split": Split}


def _corpus(prefix, rng, eod, vocab, with_eod: bool):
    b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    maxlen = int(rng.integers(2, 120))
    for _ in range(int(rng.integers(1, 40))):
        doc = rng.integers(0, vocab, int(rng.integers(1, maxlen)))
        doc = np.append(doc, eod) if with_eod else np.where(doc == eod, (eod + 1) % vocab, doc)
        b.add_document(doc, [doc.size])
    b.finalize(f"{prefix}.idx")


def _compare(mine: GPTDataset, theirs, where: str) -> int:
    assert len(mine) == len(theirs), where
    s = mine.seq_length
    for k in range(len(theirs)):
        a, b = theirs[k], mine[k]
        assert "attention_mask" not in a and "attention_mask" not in b, where
        assert torch.equal(a["cu_seqlens"], pad_cu_seqlens(b["cu_seqlens"], s + 1)), f"{where} sample {k} cu_seqlens"
        assert int(a["max_seqlen"]) == b["max_seqlen"], f"{where} sample {k} max_seqlen"
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), f"{where} sample {k} {key}"
    return len(theirs)


@pytest.mark.parametrize("flags", [(a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)])
def test_inter_document_samples_equal_megatron(mc19, tmp_path, flags):
    rng = np.random.default_rng(sum(f << i for i, f in enumerate(flags)) + 90)
    compared = 0
    for trial in range(4):
        vocab = int(rng.integers(8, 400))
        eod = int(rng.integers(0, vocab))
        prefix = tmp_path / f"c{trial}"
        _corpus(prefix, rng, eod, vocab, with_eod=trial != 2)
        seq, seed, num = int(rng.integers(2, 96)), int(rng.integers(0, 2**31)), int(rng.integers(1, 300))
        cfg = _config(mc19, str(prefix), tmp_path / "cache", seed, seq, flags, _Tokenizer(vocab, eod, -1),
                      inter_document_masking=True)
        ds_mc = mc19["indexed"].IndexedDataset(str(prefix))
        theirs = mc19["gpt"].GPTDataset(ds_mc, str(prefix), np.arange(len(ds_mc), dtype=np.int32), num,
                                        mc19["Split"].train, cfg)
        with IndexedDataset(prefix) as ds:
            mine = GPTDataset(ds, None, num, GPTDatasetConfig(seq_length=seq, seed=seed, **dict(zip(FLAGS, flags)),
                                                              eod_token=eod, inter_document_masking=True))
            compared += _compare(mine, theirs, f"flags={flags} trial={trial} S={seq}")
    assert compared > 0


def test_padded_last_validation_sample_equals_megatron(mc19, tmp_path):
    rng = np.random.default_rng(5)
    compared = padded = 0
    for trial in range(8):
        prefix = tmp_path / f"v{trial}"
        _corpus(prefix, rng, 2, 300, with_eod=True)
        seq = int(rng.integers(2, 64))
        cfg = _config(mc19, str(prefix), tmp_path / "cache", trial, seq, (True, True, False), _Tokenizer(300, 2, 7),
                      inter_document_masking=True, drop_last_partial_validation_sequence=False)
        ds_mc = mc19["indexed"].IndexedDataset(str(prefix))
        theirs = mc19["gpt"].GPTDataset(ds_mc, str(prefix), np.arange(len(ds_mc), dtype=np.int32), None,
                                        mc19["Split"].valid, cfg)
        with IndexedDataset(prefix) as ds:
            mine = GPTDataset(ds, None, None, GPTDatasetConfig(seq_length=seq, seed=trial, reset_position_ids=True,
                                                               reset_attention_mask=True, eod_mask_loss=False,
                                                               eod_token=2, pad_token=7,
                                                               drop_last_partial_sequence=False,
                                                               inter_document_masking=True))
            compared += _compare(mine, theirs, f"valid trial={trial}")
            tokens = int(np.sum(ds.sequence_lengths))
        padded += len(theirs) * seq > tokens - 1   # the last sample runs past the data (+1 for labels)
    assert compared > 0, "no validation sample was compared"
    assert padded > 0, "no trial had a padded last validation sample: the test compared only full ones"


def test_document_boundaries_equal_the_eod_boundaries_when_every_document_ends_with_eod():
    """Without megatron-core: the index-based boundaries of 0.19 equal 0.16's EOD-based ones
    (reset_attention_mask + reset_position_ids) exactly when each document ends with one EOD."""
    from labsupport.datasets.gpt_samples import get_ltor_boundaries

    rng = np.random.default_rng(1)

    class Docs:
        def __init__(self, docs):
            self.docs = docs
            self.sequence_lengths = np.array([d.size for d in docs], np.int32)

        def get(self, i, offset=0, length=None):
            d = self.docs[i]
            return d[offset:] if length is None else d[offset:offset + length]

    for trial in range(40):
        eod = 0
        docs = [np.append(rng.integers(1, 50, int(rng.integers(0, 30))), eod) for _ in range(int(rng.integers(1, 20)))]
        seq = int(rng.integers(2, 40))
        ds = GPTDataset(Docs(docs), None, None, GPTDatasetConfig(seq_length=seq, seed=trial, reset_position_ids=True,
                                                                 reset_attention_mask=True, eod_mask_loss=False,
                                                                 eod_token=eod))
        for k in range(len(ds)):
            tokens = ds[k]["tokens"]
            cu, _, pos = document_boundaries(ds.piece_lengths(k), seq)
            b = get_ltor_boundaries(tokens, eod, True, True, False)
            assert torch.equal(cu, b.cu_seqlens) and torch.equal(pos, b.position_ids), (trial, k)


def test_document_boundaries_rules():
    cu, longest, pos = document_boundaries([3, 4, 1], 7)           # the extra token opened a third document
    assert cu.tolist() == [0, 3, 7] and longest == 4 and pos.tolist() == [0, 1, 2, 0, 1, 2, 3]
    cu, _, _ = document_boundaries([2, 3], 8)                       # a padded sample: padding joins the last
    assert cu.tolist() == [0, 2, 8]
    assert pad_cu_seqlens(torch.tensor([0, 2, 8], dtype=torch.int32), 5).tolist() == [0, 2, 8, 8, 8]
    with pytest.raises(ValueError, match="more than seq_length"):
        document_boundaries([5, 6], 4)


def test_what_changed_between_0_16_and_0_19(megatron):
    """Chapter 4's table, the rows the installed package can show: Requires-Python, the THD merge of a
    micro-batch, the inter-document field (0.16.1 on Python 3.11, 0.19.2 on 3.12)."""
    import importlib.metadata

    import megatron.core
    from megatron.core import utils
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    version = tuple(int(x) for x in megatron.core.__version__.split(".")[:2])
    requires = importlib.metadata.metadata("megatron-core")["Requires-Python"]
    fields = {f.name for f in dataclasses.fields(GPTDatasetConfig)}
    if version == (0, 16):
        assert requires == ">=3.10" and "inter_document_masking" not in fields
        assert not hasattr(utils, "flatten_batch_for_packed_sequences")
    elif version >= (0, 19):
        assert requires == ">=3.12" and "inter_document_masking" in fields
        assert hasattr(utils, "flatten_batch_for_packed_sequences")
    else:
        pytest.skip(f"the table covers 0.16 and 0.19, not {megatron.core.__version__}")
