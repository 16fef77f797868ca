"""A Hugging Face tokenizer through megatron-core (chapters 1 and 2): labsupport.datasets.hf_tokenizer against
megatron-core's ``HuggingFaceTokenizer`` (``transformers.AutoTokenizer`` inside), built as
``tools/preprocess_data.py --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR`` builds it, on
0.16.1 (Python 3.11) and 0.19.2 (Python 3.12): the same ids, vocabulary size and EOD, and the
preprocessing CLI's ``.bin``/``.idx`` byte-identical to Megatron's method with that tokenizer.

One default differs between the two versions and is pinned here: 0.19 turned
``include_special_tokens`` on (``--tokenizer-hf-no-include-special-tokens`` turns it off), so a
tokenizer whose post-processor adds a BOS gets that BOS at the start of every document in 0.19 and not
in 0.16; the workbook's byte-level BPE has no post-processor, so both versions give the same files.
"""
from __future__ import annotations

import json
import warnings

import pytest
from packaging.version import Version

from labsupport.datasets.hf_tokenizer import HFTokenizer, train_byte_level_bpe, workbook_hf_tokenizer
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.preprocess import main
from labsupport.datasets.tokenizer import read_documents
from labsupport.paths import DOMAINS, data_file

from tests.crosscheck.test_indexed import assert_reads_same, assert_same_bytes
from tests.datasets.test_tokenizer import EDGE_CASES, synthetic_docs

pytestmark = pytest.mark.crosscheck


@pytest.fixture(scope="module")
def build(megatron):
    """labsupport.datasets.preprocess_eod.megatron_tokenizer, once megatron-core and transformers import."""
    pytest.importorskip("transformers", reason="`make setup-crosscheck` installs transformers")
    from labsupport.datasets.preprocess_eod import megatron_tokenizer

    return lambda path: megatron_tokenizer(path, "HuggingFaceTokenizer")[0]


def _mcore_version() -> Version:
    import megatron.core

    return Version(megatron.core.__version__)


def test_same_ids_vocab_and_eod_on_every_shipped_document(build):
    folder = workbook_hf_tokenizer()
    ours, theirs = HFTokenizer(folder), build(folder)
    texts = [d for dom in DOMAINS for d in read_documents(data_file(dom))] + EDGE_CASES
    texts += ["<|endoftext|> inside", "<|im_start|>user\nhi<|im_end|>", "  two  spaces\t\ttab\n\n"]
    assert [theirs.tokenize(t) for t in texts] == [ours.encode(t) for t in texts]
    assert (theirs.vocab_size, theirs.eod) == (ours.vocab_size, ours.eod)


@pytest.mark.parametrize("append_eod", [True, False])
def test_cli_output_byte_identical_to_megatron_script(build, tmp_path, append_eod):
    from tests.crosscheck.test_indexed import megatron_preprocess

    folder = workbook_hf_tokenizer()
    lines = data_file("web").read_text(encoding="utf-8").splitlines()[:40]
    lines[3] = json.dumps({"text": ""})
    lines[17] = json.dumps({"text": "안녕 <|endoftext|> mixed 😀"})
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["--input", str(src), "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder),
            "--output-prefix", str(tmp_path / "ours"), "--workers", "2", "--no-progress"]
    assert main(argv + (["--append-eod"] if append_eod else [])) == 0
    megatron_preprocess(None, src, folder, tmp_path / "theirs", ["text"], append_eod,
                        tokenizer_type="HuggingFaceTokenizer")
    assert_same_bytes(str(tmp_path / "ours_text_document"), str(tmp_path / "theirs_text_document"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexed
    assert_reads_same(IndexedDataset(str(tmp_path / "theirs_text_document")),
                      MegatronIndexed(str(tmp_path / "ours_text_document")))


def test_a_bos_post_processor_is_where_the_versions_differ(build, tmp_path):
    from tokenizers import Tokenizer, processors

    folder = train_byte_level_bpe(synthetic_docs(seed=41), tmp_path / "bos", 600)
    model = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 1)])
    (folder / "tokenizer.json").write_text(model.to_str(), encoding="utf-8")
    ours, theirs = HFTokenizer(folder), build(folder)
    text = "hello world"
    plain = ours.encode(text)
    assert ours.encode(text, add_special_tokens=True) == [1] + plain
    # core_v0.16.1: --tokenizer-hf-include-special-tokens is off by default; core_v0.19.0 (training_config.py
    # tokenizer_hf_no_include_special_tokens = False) has it on: every document then starts with the BOS
    want = [1] + plain if _mcore_version() >= Version("0.17") else plain
    assert theirs.tokenize(text) == want


def test_the_benchmark_case_times_both_and_refuses_different_files(build, tmp_path, monkeypatch):
    import benchmarks.bench_indexed as bench

    corpus = tmp_path / "corpus.jsonl"
    bench.make_corpus(corpus, 1)
    folder = str(workbook_hf_tokenizer())
    result = bench.bench_preprocess_hf(corpus, folder, tmp_path, workers=2, repeats=1)
    assert result["byte_identical_output"] and result["ratio_labsupport_over_megatron"] > 0
    assert result["tokens"] == IndexedDataset(str(tmp_path / "hf_megatron_text_document")).sequence_lengths.sum()
    real = bench.preprocess

    def one_token_short(inputs, prefix, *args, **kwargs):    # a labsupport that drops a document's last id
        res = real(inputs, prefix, *args, **kwargs)
        path = tmp_path / "hf_labsupport_text_document.bin"
        path.write_bytes(path.read_bytes()[:-2] + b"\0\0")
        return res

    monkeypatch.setattr(bench, "preprocess", one_token_short)
    with pytest.raises(bench.Mismatch, match="different .bin files"):
        bench.bench_preprocess_hf(corpus, folder, tmp_path, workers=2, repeats=1)
