"""Chapter 6's fast start: labsupport.datasets.fast_start, sequences_per_dataset, blend_files and
startup_timing — the fast paths give the samples of the checked path, and still refuse what is stale."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from labsupport.datasets import blend_files
from labsupport.datasets.blending import BlendError
from labsupport.datasets.fast_start import FLAGS, build_gpt_datasets
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.indexed import DType, IndexedDataset, IndexedDatasetBuilder, IndexedDatasetError
from labsupport.datasets.sequences_per_dataset import (header_for, read_sequences_per_dataset, sequences_per_dataset,
                                                       token_dtype_code)
from labsupport.datasets.startup_timing import MODES, make_prefixes, time_startup
from labsupport.datasets.utils import DataError
from labsupport.paths import REPO_ROOT

TOK = {"class": "test", "vocab_size": 32000}


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    return make_prefixes(str(tmp_path_factory.mktemp("many")), count=6, docs=20, mean_tokens=40, seed=3)


def _config(**kw):
    return GPTDatasetConfig(seq_length=32, seed=7, eod_token=0, reset_position_ids=True, reset_attention_mask=True,
                            eod_mask_loss=True, **kw)


def _samples(datasets):
    return [[ds.text(k)[0] for k in range(len(ds))] for ds in datasets]


def test_every_fast_path_gives_the_checked_paths_samples(prefixes, tmp_path):
    n = [50, 80, 20, 64, 33, 100]
    plain = build_gpt_datasets(prefixes, n, _config())
    build_gpt_datasets(prefixes, n, _config(), cache_folder=str(tmp_path), tokenizer=TOK)   # writes the cache
    counts = sequences_per_dataset(prefixes)
    for kw, threads, seq in (({}, 1, None), ({"fast_cache_load": True}, 1, None),
                             ({"fast_cache_load": True, "defer_npy_index_mmap": True}, 2, counts),
                             ({"defer_npy_index_mmap": True}, 1, counts)):
        got = build_gpt_datasets(prefixes, n, _config(**kw), cache_folder=str(tmp_path), tokenizer=TOK,
                                 threads=threads, sequences=seq, dtype_code=int(DType.uint16))
        assert [len(d) for d in got] == [len(d) for d in plain], kw
        if kw.get("defer_npy_index_mmap"):
            assert all(d._index_arrays is None for d in got), "deferred: no .npy opened before the first sample"
        for a, b in zip(_samples(got), _samples(plain)):
            assert all(np.array_equal(x, y) for x, y in zip(a, b)), kw
        assert all(d.cache_hit for d in got), kw


def test_fast_cache_load_rebuilds_an_entry_of_another_corpus(tmp_path):
    prefix = str(tmp_path / "one")
    docs = [np.arange(1, 30), np.arange(5, 70)]

    def write(extra):
        b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
        for d in docs + extra:
            b.add_document(np.append(d, 0), [d.size + 1])
        b.finalize(f"{prefix}.idx")

    write([])
    cache = str(tmp_path / "cache")
    build_gpt_datasets([prefix], [10], _config(), cache_folder=cache, tokenizer=TOK)
    write([np.arange(2, 40)])                        # preprocessed again: other sizes, same name
    fast = build_gpt_datasets([prefix], [10], _config(fast_cache_load=True), cache_folder=cache, tokenizer=TOK)[0]
    fresh = build_gpt_datasets([prefix], [10], _config())[0]
    assert not fast.cache_hit and np.array_equal(fast.document_index, fresh.document_index)


def test_fast_options_need_a_cache(prefixes):
    with pytest.raises(ValueError, match="cache"):
        build_gpt_datasets(prefixes[:1], [5], _config(defer_npy_index_mmap=True))


def test_the_json_is_megatrons_and_a_stale_one_is_refused(prefixes, tmp_path):
    out = tmp_path / "seq.json"
    cmd = [sys.executable, "-m", "labsupport", "build-sequences-per-dataset", "--data-path", *prefixes[:3],
           "--per-dataset-sequences-path", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert r.returncode == 0, r.stderr
    counts = json.loads(out.read_text())
    for p in prefixes[:3]:
        ds = IndexedDataset(p)
        assert counts[p] == [len(ds), ds.num_documents + 1]
    assert out.read_text() == json.dumps(counts)                      # json.dump's own spelling
    back = read_sequences_per_dataset(out)
    stale = header_for((back[prefixes[0]][0] + 1, back[prefixes[0]][1]), int(DType.uint16))
    with pytest.raises(IndexedDatasetError, match="stale"):
        IndexedDataset(prefixes[0], header=stale)
    wrong_dtype = header_for(back[prefixes[0]], int(DType.int32))   # Megatron's dtype rule misses 65500–65536
    with pytest.raises(IndexedDatasetError):
        IndexedDataset(prefixes[0], header=wrong_dtype)
    out.write_text(json.dumps({prefixes[0]: [3]}))
    with pytest.raises(DataError, match="build the file again"):
        read_sequences_per_dataset(out)


def test_megatrons_dtype_rule_and_its_gap():
    assert token_dtype_code(32000) == int(DType.uint16) and token_dtype_code(70000) == int(DType.int32)
    assert token_dtype_code(65536) == int(DType.uint16)      # preprocessing writes int32 from 65500 on


def test_the_command_refuses_in_one_line(tmp_path, prefixes):
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"train": [1, prefixes[0]], "valid": "", "test": None}))
    base = [sys.executable, "-m", "labsupport", "build-sequences-per-dataset"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for args, code, words in (
            (["--per-split-data-args-path", str(blend)], 1, "valid is empty"),
            (["--data-path", "nowhere/x"], 1, "index file not found"),
            ([], 2, "per-dataset-sequences-path"),
            (["--data-path", prefixes[0], "--data-args-path", str(blend)], 2, "give one of")):
        r = subprocess.run(base + args + (["--per-dataset-sequences-path", str(tmp_path / "o.json")] if args else []),
                           capture_output=True, text=True, cwd=REPO_ROOT, env=env)
        assert r.returncode == code and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "o.json").exists()


def test_per_split_files_read_as_megatron_reads_them(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"train": "0.7 a 0.3 b", "valid": ["c"], "test": None}))
    got = blend_files.read_per_split_data_args(f)
    assert got == {"train": (["a", "b"], [0.7, 0.3]), "valid": (["c"], None), "test": None}
    f.write_text(json.dumps({"train": ["a"], "valid": ["c"]}))
    with pytest.raises(BlendError, match="missing: test"):
        blend_files.read_per_split_data_args(f)
    f.write_text("0.5 a 0.5")
    with pytest.raises(BlendError, match="--data-args-path"):
        blend_files.read_data_args(f)


def test_time_startup_measures_every_mode_on_the_same_samples(prefixes):
    rows = time_startup(prefixes, samples_per_prefix=40, seq_length=32, repeats=1)
    assert [r["mode"] for r in rows] == [m.name for m in MODES]
    assert all(r["startup_s"] > 0 and r["first_samples_s"] > 0 for r in rows)


def test_the_flag_table_names_five_flags_with_fields():
    assert [f.flag for f in FLAGS] == ["--data-cache-path", "--dataloader-fast-cache-load",
                                       "--dataloader-defer-npy-index-mmap", "--num-dataset-builder-threads",
                                       "--per-dataset-sequences-path"]
    assert all("." in f.field and f.does for f in FLAGS)
