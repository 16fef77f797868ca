"""labsupport.datasets.tokenizer against megatron-core 0.16.1 (chapter 1).

Megatron's own SentencePiece wrapper, loading the same ``.model`` file, must produce the same
ids, decode them to the same text, report the same vocabulary size and use the same id for
EOD (what ``--append-eod`` appends); its dtype rule must match :func:`labsupport.datasets.indexed.optimal_dtype`.
The one deliberate difference: a literal "▁" (U+2581) in the text, which SentencePiece turns
into a space; labsupport encodes it as its three UTF-8 bytes so the round trip stays exact.
"""
from __future__ import annotations

import warnings

import pytest

from labsupport.datasets.indexed import optimal_dtype
from labsupport.datasets.tokenizer import Tokenizer, train_sentencepiece

from tests.datasets.test_tokenizer import EDGE_CASES, synthetic_docs, write_jsonl

pytestmark = pytest.mark.crosscheck


@pytest.fixture(scope="module")
def mcore_sp(megatron):
    """Megatron-Core's SentencePieceTokenizer class (via the shared ``megatron`` fixture in conftest.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
        from megatron.core.tokenizers.text.libraries.sentencepiece_tokenizer import SentencePieceTokenizer
        from megatron.core.datasets.indexed_dataset import DType
    return SentencePieceTokenizer, DType


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def model_path(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"xc_{request.param}")
    corpus = write_jsonl(d / "c.jsonl", synthetic_docs(seed=21))
    return train_sentencepiece(corpus, d / "m", 700, model_type=request.param)


def test_same_ids_text_vocab_and_eod(mcore_sp, model_path):
    SentencePieceTokenizer, _ = mcore_sp
    ours = Tokenizer(model_path)
    theirs = SentencePieceTokenizer(str(model_path))
    texts = [t for t in EDGE_CASES + synthetic_docs(seed=22, n=30) if "\u2581" not in t]
    for text in texts:
        ids = ours.encode(text)
        assert theirs.text_to_ids(text) == ids
        assert theirs.ids_to_text(ids) == ours.decode(ids) == text
    assert theirs.vocab_size == ours.vocab_size
    assert (theirs.eod, theirs.bos_id, theirs.eos_id, theirs.pad_id) == (ours.eod, ours.bos, ours.eos, ours.pad)
    # Megatron's wrapper sees that these models keep runs of spaces (no extra-space workaround)
    assert theirs.removed_extra_spaces is False


def test_literal_meta_symbol_is_the_one_difference(mcore_sp, model_path):
    SentencePieceTokenizer, _ = mcore_sp
    ours, theirs = Tokenizer(model_path), SentencePieceTokenizer(str(model_path))
    text = "a▁b"
    assert theirs.ids_to_text(theirs.text_to_ids(text)) == "a b"  # SentencePiece: ▁ becomes a space
    assert ours.decode(ours.encode(text)) == text
    assert theirs.ids_to_text(ours.encode(text)) == text  # and Megatron decodes our ids correctly


@pytest.mark.parametrize("vocab", [256, 8000, 32000, 65499, 65500, 65536, 128256])
def test_dtype_rule_matches_megatron(mcore_sp, vocab):
    _, DType = mcore_sp
    assert DType.optimal_dtype(vocab) is optimal_dtype(vocab)


@pytest.mark.parametrize("tokenizer_type", ["SentencePieceTokenizer", "GPTSentencePieceTokenizer"])
def test_preprocess_data_appends_eos(megatron, model_path, tokenizer_type):
    """tools/preprocess_data.py's default tokenizer (megatron.core.tokenizers, 0.15+; the only one from
    0.17) appends the model's EOS with --append-eod, for both SentencePiece types: no new <EOD> id."""
    from labsupport.datasets.preprocess_eod import preprocess_tokenizer

    got = preprocess_tokenizer(model_path, tokenizer_type)
    ours = Tokenizer(model_path)
    assert got.eod == ours.eos == ours.eod and got.vocab_size == ours.vocab_size
    major_minor = tuple(int(x) for x in got.megatron_core.split(".")[:2])
    assert got.module.endswith("tokenizers.utils.build_tokenizer" if major_minor >= (0, 17)
                               else "tokenizers.text.utils.build_tokenizer")
