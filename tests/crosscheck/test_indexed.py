"""labsupport.datasets.indexed against megatron-core 0.16.1 (chapter 2): byte-identical files, reading
in both directions, and the two places where labsupport deliberately differs (it refuses ids
that do not fit the dtype, and bounds-checks ``get``)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from labsupport.datasets.indexed import (
    IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path, optimal_dtype,
)

pytestmark = pytest.mark.crosscheck


@pytest.fixture(scope="module")
def mcore(megatron):
    """megatron.core.datasets.indexed_dataset (via the shared ``megatron`` fixture in conftest.py)."""
    from megatron.core.datasets import indexed_dataset

    return indexed_dataset


def _torch():
    import torch
    return torch


# each "op" is ("doc", ids, lengths-or-None) or ("item", ids) or ("end",)
def write_megatron(mc, prefix, dtype, ops):
    torch = _torch()
    b = mc.IndexedDatasetBuilder(get_bin_path(prefix), dtype=dtype)
    for op in ops:
        if op[0] == "doc":
            ids, lengths = op[1], op[2]
            # a list, as Megatron's tools/preprocess_data.py passes it
            b.add_document(list(ids), [len(ids)] if lengths is None else lengths)
        elif op[0] == "item":
            b.add_item(torch.tensor(op[1], dtype=torch.int64))
        else:
            b.end_document()
    b.finalize(get_idx_path(prefix))


def write_labsupport(prefix, dtype, ops):
    b = IndexedDatasetBuilder(get_bin_path(prefix), dtype)
    for op in ops:
        if op[0] == "doc":
            b.add_document(np.asarray(op[1], dtype=np.int64), op[2])
        elif op[0] == "item":
            b.add_item(op[1])
        else:
            b.end_document()
    b.finalize(get_idx_path(prefix))


def random_ops(rng, n_docs, vocab, max_len=300, p_empty=0.05, p_multi=0.2):
    ops = []
    for _ in range(n_docs):
        r = rng.random()
        if r < p_empty:
            ops.append(("doc", [], [0]) if rng.random() < 0.5 else ("doc", [], []))
            continue
        ids = rng.integers(0, vocab, rng.integers(1, max_len)).tolist()
        if r < p_empty + p_multi and len(ids) > 2:
            cuts = sorted(rng.choice(np.arange(1, len(ids)), size=2, replace=False).tolist())
            ops.append(("doc", ids, [cuts[0], cuts[1] - cuts[0], len(ids) - cuts[1]]))
        else:
            ops.append(("doc", ids, None))
    return ops


def assert_same_bytes(a, b):
    for ext in (".bin", ".idx"):
        assert open(a + ext, "rb").read() == open(b + ext, "rb").read(), f"{ext} differs"


def assert_reads_same(ours, theirs):
    assert len(ours) == len(theirs)
    np.testing.assert_array_equal(ours.sequence_lengths, theirs.sequence_lengths)
    np.testing.assert_array_equal(ours.sequence_pointers, theirs.index.sequence_pointers)
    np.testing.assert_array_equal(ours.document_indices, theirs.document_indices)
    assert ours.dtype == theirs.index.dtype
    for i in range(len(ours)):
        a, b = ours[i], theirs[i]
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
        n = int(ours.sequence_lengths[i])
        if n >= 3:
            np.testing.assert_array_equal(ours.get(i, 1, n - 2), theirs.get(i, 1, n - 2))
            np.testing.assert_array_equal(ours.get(i, 2), theirs.get(i, 2))
    if len(ours) >= 3:
        for x, y in zip(ours[1:3], theirs[1:3]):
            np.testing.assert_array_equal(x, y)


GOLDEN = [("doc", list(range(1, 6)), None), ("doc", [6, 7], None), ("doc", list(range(8, 15)), None)]


def test_golden_vector_byte_identical(mcore, tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_labsupport(ours, np.uint16, GOLDEN)
    write_megatron(mcore, theirs, np.uint16, GOLDEN)
    assert os.path.getsize(ours + ".idx") == 102 and os.path.getsize(ours + ".bin") == 28
    assert_same_bytes(ours, theirs)
    assert_reads_same(IndexedDataset(theirs), mcore.IndexedDataset(ours))
    assert_reads_same(IndexedDataset(ours), mcore.IndexedDataset(theirs))
    assert [a.tolist() for a in IndexedDataset(theirs)] == [list(range(1, 6)), [6, 7], list(range(8, 15))]


@pytest.mark.parametrize("vocab", [65499, 128_256], ids=["uint16", "int32"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_corpora_byte_identical_and_read_both_ways(mcore, tmp_path, vocab, seed):
    dtype = optimal_dtype(vocab)
    assert mcore.DType.optimal_dtype(vocab) is dtype
    ops = random_ops(np.random.default_rng(seed), 400, vocab)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_labsupport(ours, dtype, ops)
    write_megatron(mcore, theirs, dtype, ops)
    assert_same_bytes(ours, theirs)
    # Megatron reads what labsupport wrote, labsupport reads what Megatron wrote
    assert_reads_same(IndexedDataset(theirs), mcore.IndexedDataset(ours))
    assert_reads_same(IndexedDataset(ours), mcore.IndexedDataset(theirs))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_empty_documents_both_kinds(mcore, tmp_path, dtype):
    # an empty one-sequence document, a document without sequences (Megatron's script for empty
    # text), empty ones first and last
    ops = [("doc", [], [0]), ("doc", [3, 4], None), ("doc", [], []), ("doc", [5], None),
           ("doc", [], [0]), ("doc", [], [])]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_labsupport(ours, dtype, ops)
    write_megatron(mcore, theirs, dtype, ops)
    assert_same_bytes(ours, theirs)
    ds, md = IndexedDataset(theirs), mcore.IndexedDataset(ours)
    assert_reads_same(ds, md)
    assert ds.document_indices.tolist() == [0, 1, 2, 2, 3, 4, 4]


def test_item_and_end_document_api(mcore, tmp_path):
    ops = [("item", [1, 2]), ("item", [3]), ("end",), ("doc", [4, 5, 6], [2, 1]), ("item", [7]),
           ("end",)]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_labsupport(ours, np.int32, ops)
    write_megatron(mcore, theirs, np.int32, ops)
    assert_same_bytes(ours, theirs)
    assert_reads_same(IndexedDataset(theirs), mcore.IndexedDataset(ours))


def test_bulk_add_documents_matches_megatron(mcore, tmp_path):
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 50000, rng.integers(0, 120)) for _ in range(500)]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    b = IndexedDatasetBuilder(get_bin_path(ours), np.uint16)
    b.add_documents(np.concatenate(docs), [len(d) for d in docs])
    b.finalize(get_idx_path(ours))
    write_megatron(mcore, theirs, np.uint16, [("doc", d.tolist(), None) for d in docs])
    assert_same_bytes(ours, theirs)


def test_megatron_wraps_large_ids_labsupport_refuses(mcore, tmp_path):
    theirs = str(tmp_path / "theirs")
    mb = mcore.IndexedDatasetBuilder(get_bin_path(theirs), dtype=np.uint16)
    # ids as an int64 array (a tokenizer's numpy output): numpy's cast wraps without a word;
    # (a Python list would raise OverflowError in numpy >= 2)
    mb.add_document(np.array([5, 70000], dtype=np.int64), [2])
    mb.finalize(get_idx_path(theirs))
    assert IndexedDataset(theirs)[0].tolist() == [5, 4464]   # silently wrapped: 70000 - 65536
    if int(np.__version__.split(".")[0]) >= 2:               # a Python list (what tools/preprocess_data.py passes)
        with pytest.raises(OverflowError):
            mcore.IndexedDatasetBuilder(str(tmp_path / "list.bin"), dtype=np.uint16).add_document([5, 70000], [2])
    b = IndexedDatasetBuilder(str(tmp_path / "ours.bin"), np.uint16)
    with pytest.raises(ValueError, match="token id 70000 .* silently store 4464"):
        b.add_document([5, 70000])
    b.abort()


def test_megatron_get_reads_past_the_sequence_labsupport_raises(mcore, tmp_path):
    prefix = str(tmp_path / "g")
    write_labsupport(prefix, np.uint16, GOLDEN)
    theirs = mcore.IndexedDataset(prefix)   # keep it alive: its __del__ unmaps the views' memory
    leaked = theirs.get(1, 0, 4)            # sequence 1 has 2 tokens ...
    assert leaked.tolist() == [6, 7, 8, 9]  # ... Megatron returns the next one's too
    with pytest.raises(IndexError, match="runs past the end of sequence 1"):
        IndexedDataset(prefix).get(1, 0, 4)


# ----------------------------------------------------------------------------- the preprocessing CLI
def megatron_preprocess(mc, src, model, prefix, keys, append_eod, workers=2, tokenizer_type="SentencePieceTokenizer"):
    """Megatron's own method (Pool.imap of its Encoder + megatron-core's builder), as benchmarked."""
    from benchmarks.bench_indexed import megatron_preprocess as run

    run(str(src), str(model), str(prefix), workers, json_keys=tuple(keys), append_eod=append_eod,
        tokenizer_type=tokenizer_type)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from labsupport.paths import data_file
    from labsupport.datasets.tokenizer import train_sentencepiece

    return str(train_sentencepiece([data_file("code")], tmp_path_factory.mktemp("tok") / "t", 400))


@pytest.mark.parametrize("append_eod", [True, False])
def test_cli_output_byte_identical_to_megatron_script(mcore, tmp_path, small_model, append_eod):
    import json
    from labsupport.paths import data_file
    from labsupport.datasets.preprocess import main

    lines = data_file("web").read_text(encoding="utf-8").splitlines()[:40]
    lines[3] = json.dumps({"text": ""})          # empty text: a document without sequences
    lines[17] = json.dumps({"text": "안녕 ▁ mixed"})
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["--input", str(src), "--json-keys", "text", "--tokenizer-library", "sentencepiece",
            "--tokenizer-model", small_model, "--output-prefix", str(tmp_path / "ours"),
            "--workers", "2", "--no-progress"] + (["--append-eod"] if append_eod else [])
    assert main(argv) == 0
    megatron_preprocess(mcore, src, small_model, tmp_path / "theirs", ["text"], append_eod)
    assert_same_bytes(str(tmp_path / "ours_text_document"), str(tmp_path / "theirs_text_document"))
    assert_reads_same(IndexedDataset(str(tmp_path / "theirs_text_document")),
                      mcore.IndexedDataset(str(tmp_path / "ours_text_document")))


def test_cli_two_keys_byte_identical_to_megatron_script(mcore, tmp_path, small_model):
    import json
    from labsupport.paths import data_file
    from labsupport.datasets.preprocess import preprocess

    rows = [json.loads(l) for l in data_file("sft").read_text(encoding="utf-8").splitlines()[:60]]
    src = tmp_path / "sft.jsonl"
    src.write_text("".join(json.dumps({"input": r["input"], "output": r["output"]},
                                      ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    preprocess([src], tmp_path / "ours", small_model, json_keys=["input", "output"],
               append_eod=True, workers=2, show_progress=False)
    megatron_preprocess(mcore, src, small_model, tmp_path / "theirs", ["input", "output"], True)
    for k in ("input", "output"):
        assert_same_bytes(str(tmp_path / f"ours_{k}_document"), str(tmp_path / f"theirs_{k}_document"))
