"""labsupport.datasets.splits and index_cache (chapter 6) against megatron-core 0.16.1: the split
string's parsing and book-ends, the contiguous sequence ranges each split takes from every
dataset of a blend, and the GPTDataset index cache — file names, description, md5, arrays, the
default folder, and that each side loads the other's cache instead of rebuilding it."""
from __future__ import annotations

import logging
import os
import warnings
from collections import OrderedDict

import numpy as np
import pytest

from labsupport.datasets import splits as sp
from labsupport.datasets.blending import samples_per_dataset
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset
from labsupport.datasets.index_cache import ARRAYS, IndexCache, default_cache_dir, unique_description
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder

pytestmark = [pytest.mark.crosscheck,
              pytest.mark.filterwarnings("ignore:The pad token id in the tokenizer collides:UserWarning")]


@pytest.fixture(scope="module")
def mc(megatron):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import blended_megatron_dataset_config as bcfg
        from megatron.core.datasets import gpt_dataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return {"cfg": bcfg, "gpt": gpt_dataset, "builder": BlendedMegatronDatasetBuilder}


class _Tokenizer:
    def __init__(self) -> None:
        self.vocab_size, self.eod, self.pad = 500, 3, 0
        self.unique_identifiers = OrderedDict(cls="TestTokenizer", vocab=500)


@pytest.mark.parametrize("text", ["969, 30, 1", "900,50,50", "99,1", "1", "1,0,1", "0,1,0", "3.5, 0.5 ,1",
                                  "98,2,0", "1,1,1", "7 2 1"])
def test_split_string_parses_as_megatron(mc, text):
    vector = mc["cfg"].parse_and_normalize_split(text)
    assert sp.parse_and_normalize_split(text) == vector
    assert sp.split_matrix(text) == mc["cfg"].convert_split_vector_to_split_matrix(vector)


def test_bad_split_strings_are_refused():
    for bad in ("1,2,3,4", "0,0,0", "none"):
        with pytest.raises(ValueError, match="split"):
            sp.parse_and_normalize_split(bad)


def _corpus(prefix, rng, docs):
    b = IndexedDatasetBuilder(f"{prefix}.bin", np.uint16)
    for _ in range(docs):
        doc = np.append(rng.integers(4, 500, int(rng.integers(5, 60))), 3)
        b.add_document(doc, [doc.size])
    b.finalize(f"{prefix}.idx")


def _build(mc, prefixes, weights, split, sizes, seed, seq, cache):
    cfg = mc["gpt"].GPTDatasetConfig(
        random_seed=seed, sequence_length=seq, blend=(prefixes, weights), split=split,
        path_to_cache=None if cache is None else str(cache), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, tokenizer=_Tokenizer(), mmap_bin_files=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mc["builder"](mc["gpt"].GPTDataset, sizes, lambda: True, cfg).build(), cfg


@pytest.fixture
def one_rank_group(tmp_path):
    """A world of one gloo process: megatron-core's BlendedDataset calls get_rank() once a cache
    path is set, which fails without a process group."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_each_dataset_is_cut_into_contiguous_ranges_and_cached_under_megatrons_names(mc, tmp_path, one_rank_group):
    rng = np.random.default_rng(5)
    prefixes = [str(tmp_path / f"d{k}") for k in range(2)]
    for p, n in zip(prefixes, (137, 61)):
        _corpus(p, rng, n)
    weights, split, sizes, seed, seq = [0.7, 0.3], "900,50,50", [120, 12, 6], 11, 16
    cache = tmp_path / "cache"
    (train, valid, test), cfg = _build(mc, prefixes, weights, split, sizes, seed, seq, cache)
    theirs_files = sorted(os.listdir(cache))
    mine_files = []
    for k, prefix in enumerate(prefixes):
        n = len(IndexedDataset(prefix))
        ranges = sp.split_ranges(split, n)
        for s, (name, blended) in enumerate(zip(sp.SPLITS, (train, valid, test))):
            theirs = blended.datasets[k]
            assert np.array_equal(theirs.indices, sp.split_indices(split, n)[s])
            assert (int(theirs.indices[0]), int(theirs.indices[-1]) + 1) == ranges[s]
            num = samples_per_dataset(weights, sizes[s])[k]
            assert theirs.num_samples == num
            desc = unique_description(prefix, num, name, seed, seq, split, sp.split_matrix(split), _Tokenizer())
            assert desc == theirs.unique_description
            entry = IndexCache(str(cache), desc, name)
            assert entry.md5 == theirs.unique_description_hash and entry.hit()
            assert open(entry.path("description.txt")).read() == desc
            mine_files += [os.path.basename(f) for f in entry.files()]
            with IndexedDataset(prefix) as ds:
                config = GPTDatasetConfig(seq_length=seq, seed=seed, reset_position_ids=False,
                                          reset_attention_mask=False, eod_mask_loss=False, eod_token=3, pad_token=0)
                fresh = GPTDataset(ds, sp.split_indices(split, n)[s], num, config)
                loaded = GPTDataset(ds, sp.split_indices(split, n)[s], num, config, cache=entry)
                assert loaded.cache_hit and not fresh.cache_hit
                for a in ARRAYS:
                    assert np.array_equal(getattr(fresh, a), getattr(theirs, a)), (name, a)
                    assert np.array_equal(getattr(loaded, a), getattr(theirs, a)), (name, a)
    # with a cache path set, megatron also caches each split's blend index (3 files per split)
    blend_files = [f for f in theirs_files if "-BlendedDataset-" in f]
    assert sorted(f for f in theirs_files if "-GPTDataset-" in f) == sorted(mine_files)
    assert len(blend_files) == 3 * 3


def test_megatron_loads_the_workbooks_cache_and_the_default_folder(mc, tmp_path):
    rng = np.random.default_rng(8)
    prefix = str(tmp_path / "one")
    _corpus(prefix, rng, 80)
    split, seed, seq, num = "969, 30, 1", 3, 16, 90
    cache = tmp_path / "mine"
    n = len(IndexedDataset(prefix))
    entry = IndexCache(str(cache), unique_description(prefix, num, "train", seed, seq, split, sp.split_matrix(split),
                                                      _Tokenizer()), "train")
    with IndexedDataset(prefix) as ds:
        config = GPTDatasetConfig(seq_length=seq, seed=seed, reset_position_ids=False, reset_attention_mask=False,
                                  eod_mask_loss=False, eod_token=3, pad_token=0)
        mine = GPTDataset(ds, sp.split_indices(split, n)[0], num, config, cache=entry)
    assert not mine.cache_hit and entry.hit()
    stamps = {f: os.stat(f).st_mtime_ns for f in entry.files()}
    # poison our shuffle index: if megatron rebuilt instead of loading, it would not see this
    poisoned = np.array(mine.shuffle_index[::-1])
    np.save(entry.path("shuffle_index.npy"), poisoned)
    (train, _, _), _ = _build(mc, [prefix], None, split, [num, None, None], seed, seq, cache)
    assert np.array_equal(train.shuffle_index, poisoned)       # megatron read our file
    train_files = sorted(f for f in os.listdir(cache) if "-GPTDataset-train-" in f)
    assert train_files == sorted(os.path.basename(f) for f in entry.files())     # nothing rebuilt beside ours
    assert all(os.stat(f).st_mtime_ns == t for f, t in stamps.items() if not f.endswith("shuffle_index.npy"))
    # path_to_cache None: megatron writes under <prefix>/cache/GPTDataset_indices
    (train, _, _), _ = _build(mc, [prefix], None, split, [num, None, None], seed, seq, None)
    default = IndexCache(default_cache_dir(prefix), train.unique_description, "train")
    assert default.hit() and os.path.isdir(os.path.join(prefix, "cache"))


def test_the_hash_changes_with_num_samples_seed_split_and_length_only():
    tok = {"class": "T"}
    base = dict(dataset_path="p", num_samples=100, index_split="train", random_seed=1, sequence_length=64,
                split="900,50,50", split_matrix=sp.split_matrix("900,50,50"), tokenizer=tok)
    md5 = IndexCache("c", unique_description(**base)).md5
    for key, value in (("num_samples", 101), ("random_seed", 2), ("sequence_length", 65),
                       ("split", "969,30,1"), ("index_split", "valid")):
        changed = dict(base, **{key: value})
        if key == "split":
            changed["split_matrix"] = sp.split_matrix(value)
        assert IndexCache("c", unique_description(**changed)).md5 != md5, key
    assert IndexCache("elsewhere", unique_description(**base)).md5 == md5
