"""One indexing rule for every indexable class of labsupport.datasets (datasets/utils.py):
``-1`` is the last item, an index past either end raises IndexError with the same words."""
from __future__ import annotations

import numpy as np
import pytest

from labsupport.datasets.bin_packing import pack
from labsupport.datasets.blending import BlendedDataset
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder
from labsupport.datasets.sft_packing import pack_sft, tokenize_sft
from labsupport.datasets.utils import normalize_index

EOD = 3


class CharTokenizer:
    bos, eos, pad = 2, 3, 0

    def encode(self, text):
        return [ord(c) % 97 + 4 for c in text]


def _indexed(tmp_path, name="corpus", n=12):
    rng = np.random.default_rng(0)
    prefix = tmp_path / name
    b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    for _ in range(n):
        b.add_document(np.append(rng.integers(4, 90, int(rng.integers(3, 30))), EOD))
    b.finalize(f"{prefix}.idx")
    return prefix


def _accessors(tmp_path):
    """(name, length, accessor) for every indexable thing, each accessor taking one index."""
    prefix = _indexed(tmp_path)
    ds = IndexedDataset(prefix)
    gpt = GPTDataset(ds, None, 10, GPTDatasetConfig(seq_length=16, seed=0, reset_position_ids=True,
                                                    reset_attention_mask=True, eod_mask_loss=False, eod_token=EOD))
    blend = BlendedDataset([prefix, _indexed(tmp_path, "other", 8)], [0.6, 0.4], 16, seed=0)
    sft = tokenize_sft([{"input": "ab" * (k + 1), "output": "cd" * (k + 2)} for k in range(9)], CharTokenizer())
    packed = pack_sft(sft, 64)
    bins = pack(np.array([5, 7, 3, 9, 2]), 10)
    return [
        ("IndexedDataset[]", len(ds), ds.__getitem__),
        ("IndexedDataset.get", len(ds), ds.get),
        ("IndexedDataset.document", ds.num_documents, ds.document),
        ("IndexedDataset.document_byte_offset", ds.num_documents, ds.document_byte_offset),
        ("GPTDataset[]", len(gpt), gpt.__getitem__),
        ("GPTDataset.text", len(gpt), gpt.text),
        ("BlendedDataset[]", len(blend), blend.__getitem__),
        ("TokenizedSFT.example", len(sft), sft.example),
        ("PackedSFT[]", len(packed), packed.__getitem__),
        ("PackedSFT.seq_lengths", len(packed), packed.seq_lengths),
        ("PackedSFT.cu_seqlens", len(packed), packed.cu_seqlens),
        ("PackedSFT.training_view", len(packed), packed.training_view),
        ("Bins[]", len(bins), bins.__getitem__),
    ], ds


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "numpy"):
        a, b = a.numpy(), b.numpy()
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_minus_one_is_the_last_and_out_of_range_is_one_message(tmp_path):
    accessors, ds = _accessors(tmp_path)
    try:
        for name, n, get in accessors:
            assert n > 1, name
            assert _same(get(-1), get(n - 1)), name
            assert _same(get(-n), get(0)), name
            for bad in (n, -n - 1):
                with pytest.raises(IndexError, match=rf"^\w+ {bad} out of range: .+ has {n} \w+s$"):
                    get(bad)
            with pytest.raises(TypeError, match="index must be an integer, got float"):
                get(1.0)
            assert _same(get(np.int64(1)), get(1)), name
    finally:
        ds.close()


def test_normalize_index_rule():
    assert [normalize_index(i, 3, "x", "y") for i in (-3, -1, 0, 2)] == [0, 2, 0, 2]
    with pytest.raises(IndexError, match="^pack 3 out of range: this packing has 3 packs$"):
        normalize_index(3, 3, "pack", "this packing")
    with pytest.raises(IndexError, match="out of range"):
        normalize_index(0, 0, "sample", "an empty set")
