"""Faults injected into the GPTDataset index cache (issue #32, items 1–2): a prefix preprocessed
again under a cache built for its old files, and cache files damaged — a flipped bit, 0 bytes,
garbage, a bad ``.npy`` header, a pickle, a wrong shape.  Each is rebuilt with one line on stderr
naming the file, never a traceback and never the old indices; a pickle is never unpickled."""
from __future__ import annotations

import json
import hashlib
import os

import numpy as np
import pytest

from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset
from labsupport.datasets.index_cache import ARRAYS, IndexCache, unique_description
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder
from labsupport.datasets.splits import split_matrix

SEQ, SEED = 16, 7


def write_corpus(prefix, docs: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    for _ in range(docs):
        doc = np.append(rng.integers(4, 500, int(rng.integers(5, 60))), 3)
        b.add_document(doc, [doc.size])
    b.finalize(f"{prefix}.idx")


def entry_for(prefix, cache, num) -> IndexCache:
    desc = unique_description(str(prefix), num, "train", SEED, SEQ, "1,0,0", split_matrix("1,0,0"), {"class": "T"})
    return IndexCache(str(cache), desc, "train")


def gpt(prefix, num, cache=None) -> GPTDataset:
    config = GPTDatasetConfig(seq_length=SEQ, seed=SEED, eod_token=3, reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False)
    return GPTDataset(IndexedDataset(prefix), None, num, config, cache=cache)


def same(a: GPTDataset, b: GPTDataset) -> bool:
    return all(np.array_equal(getattr(a, n), getattr(b, n)) for n in ARRAYS)


def err_lines(capsys) -> list[str]:
    return [x for x in capsys.readouterr().err.splitlines() if x.strip()]


@pytest.fixture
def built(tmp_path, capsys):
    prefix, cache, num = tmp_path / "web", tmp_path / "cache", 150
    write_corpus(prefix, 60)
    first = gpt(prefix, num, entry_for(prefix, cache, num))
    assert not first.cache_hit and os.path.isfile(first.cache.record_path)
    again = gpt(prefix, num, entry_for(prefix, cache, num))
    assert again.cache_hit and same(first, again)
    assert err_lines(capsys) == []
    return prefix, cache, num


def test_a_prefix_preprocessed_again_rebuilds_its_stale_cache(built, capsys):
    prefix, cache, num = built
    old = gpt(prefix, num)
    write_corpus(prefix, 75, seed=1)                 # documents appended: the same prefix, the same md5
    entry = entry_for(prefix, cache, num)
    new = gpt(prefix, num, entry)
    assert not new.cache_hit and same(new, gpt(prefix, num)) and not same(new, old)
    lines = err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(f"index cache {entry.record_path}: built from another "), lines
    assert "preprocessed again" in lines[0] and lines[0].endswith("; rebuilt it")
    record = json.loads(open(entry.record_path).read())
    assert record["corpus"] == IndexedDataset(prefix).identity()
    assert gpt(prefix, num, entry_for(prefix, cache, num)).cache_hit and err_lines(capsys) == []


def test_the_tokens_changing_with_the_lengths_kept_is_noticed_too(built, capsys):
    prefix, cache, num = built
    data = bytearray(open(f"{prefix}.bin", "rb").read())
    data[10] ^= 0x01                                 # another token, same lengths: the indices stay right
    open(f"{prefix}.bin", "wb").write(bytes(data))
    ds = gpt(prefix, num, entry_for(prefix, cache, num))
    assert not ds.cache_hit and same(ds, gpt(prefix, num))
    assert len(err_lines(capsys)) == 1


def flip_bit(path) -> None:
    """Flip the lowest bit of an odd element (value − 1: still in range, so only the digest sees it)."""
    array = np.load(path)
    data = bytearray(open(path, "rb").read())
    start = len(data) - array.nbytes                 # past the .npy header
    i = int(np.flatnonzero(array.reshape(-1) % 2 == 1)[len(array) // 3])
    data[start + i * array.itemsize] ^= 0x01         # little-endian: the element's lowest byte
    open(path, "wb").write(bytes(data))


def bad_header(path) -> None:
    data = bytearray(open(path, "rb").read())
    data[10:20] = b"{'descr': "[:10].replace(b"'", b"?")
    open(path, "wb").write(bytes(data))


class _Marker:
    """Unpickling this would create a file: proof the cache was unpickled."""

    target = ""

    def __reduce__(self):
        return (open, (self.target, "w"))


def pickled(path) -> None:
    _Marker.target = str(path) + ".UNPICKLED"
    with open(path, "wb") as fh:
        np.save(fh, np.array([_Marker()], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("array", ARRAYS)
@pytest.mark.parametrize("damage, says", [
    (flip_bit, "damaged (its sha256 differs"),
    (lambda p: open(p, "wb").close(), "an empty file"),
    (lambda p: open(p, "wb").write(b"not numpy at all\n" * 4), "not a readable .npy array"),
    (bad_header, "not a readable .npy array"),
    (pickled, "not a readable .npy array"),
    (lambda p: np.save(p, np.zeros((3, 3), np.int64)), "dtype int64, expected"),
])
def test_a_damaged_cache_file_is_named_and_rebuilt(built, capsys, array, damage, says):
    prefix, cache, num = built
    entry = entry_for(prefix, cache, num)
    path = entry.path(f"{array}.npy")
    damage(path)
    ds = gpt(prefix, num, entry)
    assert not ds.cache_hit and same(ds, gpt(prefix, num))
    lines = err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(f"index cache {path}: ") and says in lines[0], lines
    assert not os.path.exists(path + ".UNPICKLED")
    assert gpt(prefix, num, entry_for(prefix, cache, num)).cache_hit          # and intact again


def test_a_consistently_tampered_array_is_refused_by_its_shape(built, capsys):
    """A wrong array whose record was rewritten to match still has to have the shape and range the
    description implies."""
    prefix, cache, num = built
    entry = entry_for(prefix, cache, num)
    shuffle = np.load(entry.path("shuffle_index.npy"))
    np.save(entry.path("shuffle_index.npy"), shuffle[:-1])
    record = json.loads(open(entry.record_path).read())
    record["arrays"]["shuffle_index"]["sha256"] = hashlib.sha256(shuffle[:-1].tobytes()).hexdigest()
    open(entry.record_path, "w").write(json.dumps(record))
    ds = gpt(prefix, num, entry)
    assert not ds.cache_hit and same(ds, gpt(prefix, num))
    lines = err_lines(capsys)
    assert len(lines) == 1 and "shuffle_index.npy: shape" in lines[0], lines


def test_a_damaged_record_is_rebuilt(built, capsys):
    prefix, cache, num = built
    entry = entry_for(prefix, cache, num)
    open(entry.record_path, "w").write("{not json")
    ds = gpt(prefix, num, entry)
    assert not ds.cache_hit and same(ds, gpt(prefix, num))
    lines = err_lines(capsys)
    assert len(lines) == 1 and entry.record_path in lines[0] and "not a readable record" in lines[0], lines


def test_a_cache_without_record_is_adopted_when_right_and_rebuilt_when_stale(built, capsys):
    """Megatron's own cache (and an older workbook's) has no record: it is used once its arrays
    equal the indices of the corpus as it is now, else rebuilt."""
    prefix, cache, num = built
    entry = entry_for(prefix, cache, num)
    os.unlink(entry.record_path)
    stamps = {f: os.stat(f).st_mtime_ns for f in entry.files()}
    ds = gpt(prefix, num, entry)
    assert ds.cache_hit and os.path.isfile(entry.record_path) and err_lines(capsys) == []
    assert {f: os.stat(f).st_mtime_ns for f in entry.files()} == stamps          # Megatron's files untouched
    os.unlink(entry.record_path)
    write_corpus(prefix, 75, seed=1)
    ds = gpt(prefix, num, entry_for(prefix, cache, num))
    assert not ds.cache_hit and same(ds, gpt(prefix, num))
    lines = err_lines(capsys)
    assert len(lines) == 1 and "without a record" in lines[0] and lines[0].endswith("rebuilt it"), lines


def test_the_cache_files_are_plain_npy_megatron_reads(built):
    prefix, cache, num = built
    entry = entry_for(prefix, cache, num)
    for name in ARRAYS:
        array = np.load(entry.path(f"{name}.npy"), allow_pickle=False)
        assert array.dtype != object and array.dtype.kind in "iu"
