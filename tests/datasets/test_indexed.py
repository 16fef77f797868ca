"""Unit tests of labsupport.datasets.indexed (chapter 2): byte layout, reader, builder, every bad input."""
from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest

from labsupport.datasets.indexed import (
    HEADER_SIZE, MAGIC, BadMagicError, BinSizeMismatchError, CorruptIndexError, DType,
    IndexedDataset, IndexedDatasetBuilder, IndexedDatasetError, TruncatedIndexError,
    UnknownDTypeError, UnsupportedVersionError, get_bin_path, get_idx_path, get_sidecar_path,
    optimal_dtype, read_header,
)

GOLDEN_DOCS = [list(range(1, 6)), [6, 7], list(range(8, 15))]


def build(prefix, docs, dtype=np.uint16, **kw):
    b = IndexedDatasetBuilder(get_bin_path(prefix), dtype, **kw)
    for d in docs:
        b.add_document(d)
    return b.finalize(get_idx_path(prefix))


@pytest.fixture
def golden(tmp_path):
    prefix = str(tmp_path / "golden")
    build(prefix, GOLDEN_DOCS)
    return prefix


# ----------------------------------------------------------------------------- format
def test_golden_vector_sizes_and_bytes(golden):
    idx = open(get_idx_path(golden), "rb").read()
    binary = open(get_bin_path(golden), "rb").read()
    assert len(idx) == 102 and len(binary) == 28
    assert idx[:9] == MAGIC
    assert struct.unpack("<QBQQ", idx[9:34]) == (1, 8, 3, 4)
    n = 3
    assert np.frombuffer(idx, "<i4", n, 34).tolist() == [5, 2, 7]
    assert np.frombuffer(idx, "<i8", n, 34 + 4 * n).tolist() == [0, 10, 14]
    assert np.frombuffer(idx, "<i8", 4, 34 + 12 * n).tolist() == [0, 1, 2, 3]
    assert np.frombuffer(binary, "<u2").tolist() == list(range(1, 15))


def test_dtype_codes_match_megatron_numbers():
    assert {m.name: m.value for m in DType} == {
        "uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7,
        "uint16": 8}
    assert DType.code_from_dtype(np.uint16) == 8 and DType.dtype_from_code(4) is np.int32
    assert DType.size(8) == 2 and DType.size(np.int64) == 8
    with pytest.raises(ValueError, match="no MMIDIDX code"):
        DType.code_from_dtype(np.uint32)
    with pytest.raises(ValueError, match="unknown MMIDIDX dtype code 9"):
        DType.dtype_from_code(9)


@pytest.mark.parametrize("vocab, expected", [(1, np.uint16), (32000, np.uint16), (65499, np.uint16),
                                              (65500, np.int32), (128256, np.int32), (None, np.int32)])
def test_optimal_dtype(vocab, expected):
    assert optimal_dtype(vocab) is expected


def test_read_header(golden):
    h = read_header(get_idx_path(golden))
    assert (h.version, h.dtype_code, h.num_sequences, h.num_document_indices) == (1, 8, 3, 4)
    assert h.dtype == np.uint16 and h.expected_idx_size == 102


# ----------------------------------------------------------------------------- reader
def test_reader_access(golden):
    ds = IndexedDataset(golden)
    assert len(ds) == 3 and ds.num_documents == 3 and ds.num_tokens == 14
    assert ds.dtype == np.uint16
    assert ds[1].tolist() == [6, 7] and ds[-1].tolist() == list(range(8, 15))
    assert ds[np.int64(0)].tolist() == [1, 2, 3, 4, 5]
    assert [a.tolist() for a in ds[1:3]] == [[6, 7], list(range(8, 15))]
    assert ds[2:1] == []
    assert ds.get(2, 2, 3).tolist() == [10, 11, 12]
    assert ds.get(2, 5).tolist() == [13, 14]
    assert ds.get(0, 5).tolist() == []
    assert ds.document(2).tolist() == list(range(8, 15))
    assert ds.sequence_lengths.tolist() == [5, 2, 7]
    assert ds.sequence_pointers.tolist() == [0, 10, 14]
    assert ds.document_indices.tolist() == [0, 1, 2, 3]
    assert [a.tolist() for a in ds] == GOLDEN_DOCS
    assert not ds[0].flags.writeable  # a view of the read-only mmap
    assert ds.metadata["num_tokens"] == 14 and ds.metadata["dtype"] == "uint16"


def test_reader_bounds_checks(golden):
    ds = IndexedDataset(golden)
    with pytest.raises(IndexError, match="sequence 3 out of range.*3 sequences"):
        ds[3]
    with pytest.raises(IndexError, match="out of range"):
        ds[-4]
    with pytest.raises(IndexError, match="offset 6 out of range for sequence 0 of length 5"):
        ds.get(0, 6)
    with pytest.raises(IndexError, match="offset -1"):
        ds.get(0, -1)
    with pytest.raises(IndexError, match=r"length 3 at offset 4 runs past the end of sequence 0 \(length 5\)"):
        ds.get(0, 4, 3)
    with pytest.raises(IndexError, match="length -1"):
        ds.get(0, 0, -1)
    with pytest.raises(IndexError, match="document 3 out of range"):
        ds.document(3)
    with pytest.raises(TypeError, match="integer"):
        ds[1.0]
    with pytest.raises(ValueError, match="contiguous"):
        ds[0:3:2]


def test_views_survive_close_and_del(golden):
    ds = IndexedDataset(golden)
    view = ds[2]
    ds.close()
    del ds
    import gc
    gc.collect()
    assert view.tolist() == GOLDEN_DOCS[2]   # megatron-core unmaps here and the read segfaults


def test_pickle_reopens(golden):
    ds = pickle.loads(pickle.dumps(IndexedDataset(golden)))
    assert ds[2].tolist() == GOLDEN_DOCS[2]


def test_multi_sequence_and_empty_documents(tmp_path):
    prefix = str(tmp_path / "m")
    b = IndexedDatasetBuilder(get_bin_path(prefix), np.int32)
    b.add_document([1, 2, 3, 4], lengths=[1, 3])   # one document, two sequences
    b.add_document([])                              # one empty sequence
    b.add_document([], lengths=[])                  # a document without sequences (Megatron: empty text)
    b.add_item([9, 9])
    b.add_item([8])
    b.end_document()
    side = b.finalize(get_idx_path(prefix))
    ds = IndexedDataset(prefix)
    assert [a.tolist() for a in ds] == [[1], [2, 3, 4], [], [9, 9], [8]]
    assert ds.document_indices.tolist() == [0, 2, 3, 3, 5]
    assert ds.document(0).tolist() == [1, 2, 3, 4]
    assert ds.document(2).tolist() == [] and ds.document(3).tolist() == [9, 9, 8]
    assert (side["num_sequences"], side["num_documents"], side["num_tokens"]) == (5, 4, 7)
    assert [ds.document_byte_offset(k) for k in range(4)] == [0, 16, 16, 16]
    with pytest.raises(IndexError, match="document 4 out of range"):
        ds.document_byte_offset(4)


def test_document_byte_offset_of_trailing_empty_document(tmp_path):
    prefix = str(tmp_path / "t")
    b = IndexedDatasetBuilder(get_bin_path(prefix), np.uint16)
    b.add_document([1, 2, 3])
    b.add_document([], lengths=[])
    b.finalize(get_idx_path(prefix))
    ds = IndexedDataset(prefix)
    assert ds.document_byte_offset(1) == 6 == os.path.getsize(get_bin_path(prefix))


def test_zero_token_dataset_reads(tmp_path):
    prefix = str(tmp_path / "z")
    build(prefix, [[], []])
    ds = IndexedDataset(prefix)
    assert len(ds) == 2 and ds[1].size == 0 and os.path.getsize(get_bin_path(prefix)) == 0


def test_add_documents_bulk_matches_loop(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 60000, rng.integers(0, 50)).astype(np.int64) for _ in range(300)]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    build(a, docs)
    bb = IndexedDatasetBuilder(get_bin_path(b), np.uint16)
    bb.add_document(docs[0])
    bb.add_documents(np.concatenate(docs[1:200]), [len(d) for d in docs[1:200]])
    for d in docs[200:]:
        bb.add_document(d)
    bb.finalize(get_idx_path(b))
    for ext in (".bin", ".idx"):
        assert open(a + ext, "rb").read() == open(b + ext, "rb").read()


# ----------------------------------------------------------------------------- builder refusals
def test_builder_refuses_ids_that_do_not_fit(tmp_path):
    b = IndexedDatasetBuilder(str(tmp_path / "w.bin"), np.uint16)
    b.add_document([1, 2])
    with pytest.raises(ValueError, match=r"document 1: token id 70000 at position 1 does not fit "
                                         r"uint16.*silently store 4464"):
        b.add_document([5, 70000, 3])
    with pytest.raises(ValueError, match="token id -1 at position 0 does not fit uint16"):
        b.add_document([-1])
    b.abort()


def test_builder_refuses_ids_outside_vocab(tmp_path):
    b = IndexedDatasetBuilder(str(tmp_path / "v.bin"), np.uint16, vocab_size=100)
    with pytest.raises(ValueError, match="document 0: token id 100 .*vocab_size 100"):
        b.add_document(np.array([3, 100], dtype=np.uint16))
    b.abort()


def test_builder_refuses_bad_shapes_and_types(tmp_path):
    b = IndexedDatasetBuilder(str(tmp_path / "s.bin"), np.int32)
    with pytest.raises(TypeError, match="document 0: token ids must be integers, got dtype float64"):
        b.add_document([1.5, 2.0])
    with pytest.raises(ValueError, match="one-dimensional"):
        b.add_document([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="sum to the 3 ids"):
        b.add_document([1, 2, 3], lengths=[1, 1])
    with pytest.raises(ValueError, match="sum to the 2 ids"):
        b.add_documents([1, 2], [1, 2])
    b.abort()


def test_builder_writes_nothing_until_finalize_and_cleans_up(tmp_path):
    prefix = str(tmp_path / "out" / "t")
    b = IndexedDatasetBuilder(get_bin_path(prefix), np.uint16)
    b.add_document([1, 2, 3])
    names = os.listdir(tmp_path / "out")
    assert all(".tmp-" in n for n in names) and len(names) == 1   # only the temp .bin
    b.finalize(get_idx_path(prefix))
    assert sorted(os.listdir(tmp_path / "out")) == ["t.bin", "t.idx", "t.json"]
    with pytest.raises(RuntimeError, match="already finalized"):
        b.add_document([1])

    with pytest.raises(KeyError):
        with IndexedDatasetBuilder(str(tmp_path / "out" / "crash.bin"), np.uint16) as c:
            c.add_document([4, 5])
            raise KeyError("simulated crash")
    assert sorted(os.listdir(tmp_path / "out")) == ["t.bin", "t.idx", "t.json"]


def test_sidecar_metadata(tmp_path):
    prefix = str(tmp_path / "s")
    side = build(prefix, GOLDEN_DOCS, vocab_size=32, metadata={"tokenizer": {"fingerprint": "abc"}})
    on_disk = IndexedDataset(prefix).metadata
    assert on_disk == side
    assert on_disk["tokenizer"] == {"fingerprint": "abc"} and on_disk["vocab_size"] == 32
    assert on_disk["num_documents"] == 3 and on_disk["bin_bytes"] == 28 and on_disk["idx_bytes"] == 102


def test_finalize_replaces_an_existing_dataset(tmp_path):
    prefix = str(tmp_path / "r")
    build(prefix, GOLDEN_DOCS)
    build(prefix, [[42]])
    ds = IndexedDataset(prefix)
    assert len(ds) == 1 and ds[0].tolist() == [42]


# ----------------------------------------------------------------------------- bad files
def _corrupt(prefix, ext, fn):
    path = prefix + ext
    data = bytearray(open(path, "rb").read())
    data = fn(data)
    open(path, "wb").write(bytes(data))
    return path


def test_missing_files(tmp_path, golden):
    with pytest.raises(FileNotFoundError, match=r"nope\.bin: data file not found"):
        IndexedDataset(str(tmp_path / "nope"))
    os.unlink(get_idx_path(golden))
    with pytest.raises(FileNotFoundError, match=r"golden\.idx: index file not found"):
        IndexedDataset(golden)


def test_bad_magic(golden):
    path = _corrupt(golden, ".idx", lambda d: b"TNTIDX\x00\x00\x00" + d[9:])
    with pytest.raises(BadMagicError, match=r"golden\.idx: bad magic.*not a Megatron MMIDIDX") as e:
        IndexedDataset(golden)
    assert e.value.path == path


def test_unknown_version(golden):
    _corrupt(golden, ".idx", lambda d: d[:9] + struct.pack("<Q", 2) + d[17:])
    with pytest.raises(UnsupportedVersionError, match=r"golden\.idx: index version 2 is not supported"):
        IndexedDataset(golden)


@pytest.mark.parametrize("code", [0, 9, 255])
def test_unknown_dtype_code(golden, code):
    _corrupt(golden, ".idx", lambda d: d[:17] + bytes([code]) + d[18:])
    with pytest.raises(UnknownDTypeError, match=rf"golden\.idx: unknown dtype code {code} at byte 17"):
        IndexedDataset(golden)


def test_truncated_header(golden):
    _corrupt(golden, ".idx", lambda d: d[:20])
    with pytest.raises(TruncatedIndexError, match=r"golden\.idx: truncated header: 20 bytes"):
        IndexedDataset(golden)


def test_truncated_index(golden):
    _corrupt(golden, ".idx", lambda d: d[:-8])
    with pytest.raises(TruncatedIndexError,
                       match=r"golden\.idx: truncated: .*3 sequences and 4 document indices = 102 "
                             r"bytes, the file has 94"):
        IndexedDataset(golden)


def test_index_with_trailing_garbage(golden):
    _corrupt(golden, ".idx", lambda d: d + b"\x00" * 5)
    with pytest.raises(TruncatedIndexError, match=r"golden\.idx: size 107 bytes.*damaged"):
        IndexedDataset(golden)


def test_multimodal_index_is_named(golden):
    _corrupt(golden, ".idx", lambda d: d + b"\x00" * 3)
    with pytest.raises(IndexedDatasetError, match="multimodal"):
        IndexedDataset(golden)


@pytest.mark.parametrize("change", [lambda d: d[:-2], lambda d: d + b"\x00\x00"])
def test_bin_size_disagrees_with_pointers(golden, change):
    _corrupt(golden, ".bin", change)
    with pytest.raises(BinSizeMismatchError, match=r"golden\.bin: (26|30) bytes, but golden\.idx "
                                                   r"points to 28 bytes"):
        IndexedDataset(golden)


def test_pointer_inconsistent_with_lengths(golden):
    off = HEADER_SIZE + 4 * 3 + 8  # pointer of sequence 1
    _corrupt(golden, ".idx", lambda d: d[:off] + struct.pack("<q", 12) + d[off + 8:])
    with pytest.raises(CorruptIndexError, match=r"golden\.idx: sequence pointer 1 is 12"):
        IndexedDataset(golden)
    # verify=False skips the O(N) check, the O(1) size checks still hold
    assert IndexedDataset(golden, verify=False)[0].tolist() == [1, 2, 3, 4, 5]


def test_document_indices_must_end_at_n(golden):
    off = HEADER_SIZE + 12 * 3 + 8 * 3  # last document index
    _corrupt(golden, ".idx", lambda d: d[:off] + struct.pack("<q", 2) + d[off + 8:])
    with pytest.raises(CorruptIndexError, match=r"golden\.idx: document indices must start at 0 and "
                                                r"end at N=3"):
        IndexedDataset(golden)


def test_negative_length(golden):
    _corrupt(golden, ".idx", lambda d: d[:HEADER_SIZE + 4] + struct.pack("<i", -2) + d[HEADER_SIZE + 8:])
    with pytest.raises(CorruptIndexError, match="sequence 1 has negative length -2"):
        IndexedDataset(golden)


def test_sidecar_path_helper():
    assert get_sidecar_path("a/b_text_document") == "a/b_text_document.json"
