"""Chapter 6's split and index cache through the config: model.data.splits_string picks each
prefix's train range (and the validation range the over-sampling row holds out),
model.data.index_mapping_dir holds the GPTDataset index cache, and only the keys in Megatron's
hash rebuild it."""
from __future__ import annotations

import os

import numpy as np
import pytest

from labsupport.config import ConfigError
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.splits import split_indices
from labsupport.training.data import build_blend, index_cache_for, split_dataset
from labsupport.training.settings import load_settings

SMALL = ["trainer.max_steps=4", "model.global_batch_size=8", "model.micro_batch_size=4"]


def test_the_blend_reads_each_prefix_train_range_and_valid_is_disjoint():
    s = load_settings(overrides=SMALL)
    assert s.config.model.data.splits_string == "900,50,50"
    blend = build_blend(s, cache=False)
    for k, (name, prefix) in enumerate(zip(s.names, s.prefixes)):
        n = len(IndexedDataset(prefix))
        train, valid, _ = split_indices(s.config.model.data.splits_string, n)
        assert np.array_equal(blend.datasets[k].indices, train)
        held = split_dataset(s, name, "valid")
        assert np.array_equal(held.indices, valid)
        assert not set(held.indices.tolist()) & set(train.tolist())
        assert set(np.unique(held.document_index).tolist()) <= set(valid.tolist())


def test_null_split_trains_on_every_document():
    s = load_settings(overrides=SMALL + ["model.data.splits_string=null"])
    blend = build_blend(s, cache=False)
    assert s.config.model.data.splits_string is None
    assert [g.indices.size for g in blend.datasets] == [len(IndexedDataset(p)) for p in s.prefixes]
    with pytest.raises(ValueError, match="no valid sequences"):
        split_dataset(s, s.names[0], "valid")


@pytest.mark.parametrize("bad", ["1,2,3,4", "0,0,0"])
def test_a_bad_split_string_names_the_field(bad):
    with pytest.raises(ConfigError, match=r"model\.data\.splits_string"):
        load_settings(overrides=SMALL + [f"model.data.splits_string='{bad}'"])


def test_the_index_cache_is_written_once_and_rebuilt_only_for_hashed_keys(tmp_path):
    cache = tmp_path / "idx"
    base = SMALL + [f"model.data.index_mapping_dir={cache}"]
    s = load_settings(overrides=base)
    first = build_blend(s)
    assert not any(g.cache_hit for g in first.datasets)
    files = sorted(os.listdir(cache))
    assert len(files) == 5 * len(s.names)             # Megatron's four and the workbook's record
    assert all(f.split("-")[1:3] == ["GPTDataset", "train"] for f in files if not f.endswith(".labsupport.json"))
    assert sum(f.endswith("-GPTDataset-train.labsupport.json") for f in files) == len(s.names)
    again = build_blend(load_settings(overrides=base + ["model.optim.lr=1e-4", "model.micro_batch_size=2"]))
    assert all(g.cache_hit for g in again.datasets) and sorted(os.listdir(cache)) == files
    for a, b in zip(first.datasets, again.datasets):
        assert np.array_equal(a.shuffle_index, b.shuffle_index)
    more = build_blend(load_settings(overrides=base + ["trainer.max_steps=40"]))
    assert not any(g.cache_hit for g in more.datasets)
    assert len(os.listdir(cache)) == 10 * len(s.names)
    entry = index_cache_for(s, 0, first.datasets[0].num_samples)
    assert entry.md5 == first.datasets[0].cache.md5 and entry.directory == str(cache)


def test_an_unwritable_cache_folder_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    s = load_settings(overrides=SMALL + [f"model.data.index_mapping_dir={blocker / 'idx'}"])
    with pytest.raises(OSError, match=r"index cache .*index_mapping_dir"):
        build_blend(s)
    assert blocker.read_text() == "not a folder"


def test_the_command_line_reports_an_unwritable_cache_in_one_line(tmp_path, capsys):
    from labsupport.training.cli import EXIT_ENV, main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["--no-progress", *SMALL, f"model.data.index_mapping_dir={blocker / 'idx'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_ENV == 1
    assert len(err) == 1 and err[0].startswith("error: index cache ") and "index_mapping_dir" in err[0]
