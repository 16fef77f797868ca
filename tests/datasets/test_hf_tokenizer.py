"""labsupport.datasets.hf_tokenizer (chapter 1) and chapter 2's preprocessing with a Hugging Face tokenizer:
deterministic training, a lossless round trip, the special ids, the fingerprint guard, and the CLI's
``--tokenizer-library huggingface`` / ``--tokenizer-type HuggingFaceTokenizer`` spellings."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from labsupport.datasets.hf_tokenizer import (
    HF_SPECIAL_TOKENS, HFTokenizer, is_hf_tokenizer_path, train_byte_level_bpe, workbook_hf_tokenizer,
)
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.utils import DataError
from labsupport.datasets.preprocess import PreprocessError, load_tokenizer, main, preprocess
from labsupport.datasets.tokenizer import Tokenizer, TokenizerMismatchError, workbook_tokenizer

from tests.datasets.test_tokenizer import EDGE_CASES, synthetic_docs, write_jsonl


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return train_byte_level_bpe(synthetic_docs(seed=31), tmp_path_factory.mktemp("hf") / "tok", 600)


def test_training_is_deterministic_and_writes_a_hugging_face_folder(folder, tmp_path):
    again = train_byte_level_bpe(synthetic_docs(seed=31), tmp_path / "again", 600)
    assert (again / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    assert HFTokenizer(again).fingerprint == HFTokenizer(folder).fingerprint
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == HF_SPECIAL_TOKENS["eos_token"]
    assert is_hf_tokenizer_path(folder) and is_hf_tokenizer_path(folder / "tokenizer.json")
    assert not is_hf_tokenizer_path(workbook_tokenizer())


def test_round_trip_is_lossless_and_nothing_is_unknown(folder):
    tok = HFTokenizer(folder)
    texts = [t for t in EDGE_CASES] + synthetic_docs(seed=32, n=20) + ["\x00 control \x7f", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃"]
    for text in texts:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_special_ids_eod_and_the_special_token_text_pitfall(folder):
    tok = HFTokenizer(folder)
    assert tok.special_ids == {"pad_token": 0, "bos_token": 1, "eos_token": 2}
    assert tok.eod == 2 and tok.vocab_size == 600 and tok.dtype == np.uint16
    # the text of a special token inside a document is read as that token (as Megatron's HF path does)
    assert tok.encode("a<|endoftext|>b")[1] == tok.eod
    assert tok.pieces(" hello")[0].startswith("Ġ")        # byte-level: a leading space is part of the piece


def test_no_eos_token_means_no_eod(folder, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
    tok = HFTokenizer(tmp_path)
    with pytest.raises(ValueError, match="no eos_token"):
        tok.eod


def test_fingerprint_guard_and_pickling(folder, tmp_path):
    tok = HFTokenizer(folder)
    other = HFTokenizer(train_byte_level_bpe(synthetic_docs(seed=33), tmp_path / "other", 600))
    tok.assert_same(HFTokenizer(folder / "tokenizer.json"))
    tok.assert_same("sha256:" + tok.fingerprint.upper())
    with pytest.raises(TokenizerMismatchError, match="tokenizer mismatch"):
        tok.assert_same(other)
    with pytest.raises(TokenizerMismatchError):
        tok.assert_same(Tokenizer(workbook_tokenizer()))
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.fingerprint == tok.fingerprint and copy.encode("héllo 안녕") == tok.encode("héllo 안녕")


def test_bad_folders_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        HFTokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a Hugging Face tokenizer"):
        HFTokenizer(tmp_path)
    with pytest.raises(ValueError, match="at least"):
        train_byte_level_bpe(["a"], tmp_path / "small", 100)


def test_load_tokenizer_tells_the_families_apart_and_refuses_the_wrong_one(folder):
    assert isinstance(load_tokenizer(folder), HFTokenizer)
    assert isinstance(load_tokenizer(workbook_tokenizer()), Tokenizer)
    with pytest.raises(PreprocessError, match="--tokenizer-model"):
        load_tokenizer(workbook_tokenizer(), "huggingface")
    with pytest.raises(PreprocessError, match="--tokenizer-model"):
        load_tokenizer(folder / "tokenizer.json", "sentencepiece")


@pytest.mark.parametrize("flags", [["--tokenizer-library", "huggingface"], ["--tokenizer-type", "HuggingFaceTokenizer"],
                                   []])
def test_the_cli_writes_each_document_as_encode_plus_eod(folder, tmp_path, flags, capsys):
    docs = synthetic_docs(seed=34, n=30) + [""]
    src = write_jsonl(tmp_path / "in.jsonl", docs)
    argv = ["--input", str(src), "--tokenizer-model", str(folder), "--output-prefix", str(tmp_path / "o"),
            "--append-eod", "--workers", "2", "--no-progress", *flags]
    assert main(argv) == 0
    assert "no word cache: a Hugging Face tokenizer" in capsys.readouterr().out
    tok, ds = HFTokenizer(folder), IndexedDataset(str(tmp_path / "o_text_document"))
    assert [ds[i].tolist() for i in range(len(ds))] == [tok.encode(d) + [tok.eod] for d in docs if d]
    side = json.loads((tmp_path / "o_text_document.json").read_text())
    assert side["tokenizer"]["library"] == "huggingface" and side["tokenizer"]["fingerprint"] == tok.fingerprint


def test_one_worker_and_two_write_the_same_bytes(folder, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", synthetic_docs(seed=35, n=60))
    for w in (1, 2):
        preprocess([src], tmp_path / f"w{w}", folder, append_eod=True, workers=w, show_progress=False,
                   chunk_bytes=4096)
    for ext in ("bin", "idx"):
        one, two = (tmp_path / f"w{w}_text_document.{ext}" for w in (1, 2))
        assert one.read_bytes() == two.read_bytes()


def test_conflicting_spellings_are_a_usage_error(folder, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", ["a b c"])
    rc = main(["--input", str(src), "--tokenizer-model", str(folder), "--output-prefix", str(tmp_path / "o"),
               "--tokenizer-library", "sentencepiece", "--tokenizer-type", "HuggingFaceTokenizer"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "give one of them" in err
    assert not list(tmp_path.glob("o_*"))


def test_the_workbook_model_is_cached_and_reused():
    first = workbook_hf_tokenizer()
    assert workbook_hf_tokenizer() == first and HFTokenizer(first).vocab_size == 4000


def test_a_damaged_folder_is_one_data_error_naming_the_file(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(b"\x80\x81 not text")
    with pytest.raises(DataError, match="tokenizer.json is not UTF-8 text"):
        HFTokenizer(folder)
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match="tokenizer_config.json holds a JSON list, not an object"):
        HFTokenizer(folder)
