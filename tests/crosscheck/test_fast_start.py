"""Chapter 6's fast start against megatron-core (0.16.1 on 3.11, 0.19.2 on 3.12): each flag of
labsupport.datasets.fast_start.FLAGS is the config field it names, with its default (and, where
``megatron.training`` ships, the flag Megatron-LM's parser spells); the sequences-per-dataset JSON
holds megatron-core's own counts; megatron-core with ``defer_npy_index_mmap`` reads the workbook's
cache with the length and samples of the workbook's deferred GPTDataset."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import warnings
from collections import OrderedDict

import numpy as np
import pytest

from labsupport.datasets.fast_start import FLAGS, build_gpt_datasets
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.sequences_per_dataset import sequences_per_dataset
from labsupport.datasets.startup_timing import make_prefixes

pytestmark = [pytest.mark.crosscheck,
              pytest.mark.filterwarnings("ignore:The pad token id in the tokenizer collides:UserWarning")]
_MODULES = ("blended_megatron_dataset_config", "gpt_dataset", "indexed_dataset", "blended_megatron_dataset_builder")


@pytest.fixture(scope="module")
def mc(megatron):
    """megatron-core's dataset modules by short name, and the two config classes FLAGS names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mods = {name: importlib.import_module(f"megatron.core.datasets.{name}") for name in _MODULES}
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return {"BlendedMegatronDatasetConfig": mods["blended_megatron_dataset_config"].BlendedMegatronDatasetConfig,
            "GPTDatasetConfig": mods["gpt_dataset"].GPTDatasetConfig, "gpt": mods["gpt_dataset"],
            "indexed": mods["indexed_dataset"],
            "builder": mods["blended_megatron_dataset_builder"].BlendedMegatronDatasetBuilder}


class _Tokenizer:
    def __init__(self) -> None:
        self.vocab_size, self.eod, self.pad = 32000, 0, 1
        self.unique_identifiers = OrderedDict(cls="TestTokenizer", vocab=32000)


def test_each_flag_is_the_field_it_names_with_its_default(mc):
    for flag in FLAGS:
        cls, name = flag.field.split(".")
        fields = {f.name: f for f in dataclasses.fields(mc[cls])}
        assert name in fields, flag
        assert fields[name].default == flag.default, flag


def test_megatron_lms_parser_spells_each_flag(megatron):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.training.arguments import _add_data_args
    except ImportError:
        pytest.skip("megatron.training ships from megatron-core 0.19 (Python 3.12); the flags are checked there")
    parser = argparse.ArgumentParser()
    _add_data_args(parser)
    dests = {a.dest: a for a in parser._actions for s in a.option_strings if s in {f.flag for f in FLAGS}}
    for flag in FLAGS:
        action = next(a for a in dests.values() if flag.flag in a.option_strings)
        default = action.default if not isinstance(action, argparse._StoreTrueAction) else False
        assert default == flag.default, flag


def test_the_json_holds_megatron_cores_counts(mc, tmp_path):
    prefixes = make_prefixes(str(tmp_path), count=4, docs=15, mean_tokens=30, seed=2)
    mine = sequences_per_dataset(prefixes)
    theirs = {}
    for p in prefixes:
        reader = mc["indexed"]._IndexReader(p + ".idx", False)
        theirs[p] = (reader.sequence_count, reader.document_count)
    assert json.dumps(mine) == json.dumps(theirs)          # what tools/build_sequences_per_dataset.py dumps


def test_megatron_defers_onto_the_workbooks_cache(mc, tmp_path):
    prefix = make_prefixes(str(tmp_path), count=1, docs=40, mean_tokens=50, seed=9)[0]
    cache, num, seq, seed = str(tmp_path / "cache"), 300, 32, 5
    tok = {"cls": "TestTokenizer", "vocab": 32000}

    def config(**kw):
        return GPTDatasetConfig(seq_length=seq, seed=seed, eod_token=0, pad_token=1, reset_position_ids=False,
                                reset_attention_mask=False, eod_mask_loss=False, **kw)

    build_gpt_datasets([prefix], [num], config(), cache_folder=cache, tokenizer=tok)      # the workbook writes
    mine = build_gpt_datasets([prefix], [num], config(defer_npy_index_mmap=True), cache_folder=cache, tokenizer=tok)[0]
    cfg = mc["GPTDatasetConfig"](
        random_seed=seed, sequence_length=seq, blend=([prefix], None), split="1,0,0", path_to_cache=cache,
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, tokenizer=_Tokenizer(),
        mmap_bin_files=True, defer_npy_index_mmap=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train = mc["builder"](mc["gpt"].GPTDataset, [num, None, None], lambda: True, cfg).build()[0]
    assert train.document_index is None                    # megatron deferred too: nothing mapped yet
    assert len(train) == len(mine) and mine._index_arrays is None
    for k in (0, 1, len(mine) // 2, len(mine) - 1):
        text = train._query_document_sample_shuffle_indices(k)[0]     # 0.19 returns more than (text, ids)
        assert np.array_equal(text, mine.text(k)[0]), k
