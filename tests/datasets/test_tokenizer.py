"""labsupport.datasets.tokenizer (chapter 1): losslessness, determinism, special ids, fingerprints, bad input.

Models are trained on a small synthetic multi-domain corpus (English prose, Python code with
indentation and tabs, Korean, numbers) written to a temporary folder, so these tests do not
depend on the shipped corpora and each training takes a fraction of a second.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from labsupport.datasets import tokenizer as T
from labsupport.datasets.tokenizer import (
    CorpusError, Tokenizer, TokenizerMismatchError, compare_tokenizers, read_documents,
    tokens_per_byte, tokens_per_character, train_sentencepiece,
)

EN = ("the of and to in is that for it as with was on be by this are from at or an which data "
      "model token training text document corpus batch sequence vocabulary language large binary "
      "index memory shuffle blend weight pack mask boundary example python function value").split()
KO = ("데이터 모델 학습 토크나이저 문서 경계 어휘 특수 토큰 전처리 추론 배치 시퀀스 패킹 마스크 "
      "메모리 인덱스 바이너리 한국어 영어 코드 책 웹 가중치 블렌딩 는 을 를 이 가 에서 으로 합니다 입니다").split()


def _word(rng: random.Random) -> str:
    if rng.random() < 0.7:
        return rng.choice(EN)
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 4)))


def _english(rng: random.Random) -> str:
    sents = []
    for _ in range(rng.randint(2, 6)):
        words = [_word(rng) for _ in range(rng.randint(4, 14))]
        sents.append(" ".join(words).capitalize() + rng.choice([".", ".", "?", "!"]))
    return " ".join(sents)


def _code(rng: random.Random) -> str:
    name = rng.choice(EN)
    lines = [f"def {name}_{rng.randint(0, 99)}(x, y={rng.randint(0, 9999)}):"]
    for _ in range(rng.randint(2, 6)):
        indent = rng.choice(["    ", "        ", "\t", "\t\t"])
        lines.append(f"{indent}{rng.choice(EN)} = x + {rng.randint(0, 999)}  # {rng.choice(EN)}")
    lines.append("    return x\n")
    return "\n".join(lines)


def _korean(rng: random.Random) -> str:
    def word() -> str:
        if rng.random() < 0.8:
            return "".join(rng.choice(KO) for _ in range(rng.randint(1, 2)))
        return "".join(chr(0xAC00 + 28 * rng.randrange(0, 399, 10)) for _ in range(rng.randint(1, 3)))
    return " ".join(word() for _ in range(rng.randint(5, 20))) + "."


def synthetic_docs(seed: int = 0, n: int = 240) -> list[str]:
    """A deterministic mixed-domain corpus (~60 KB)."""
    rng = random.Random(seed)
    makers = [_english, _code, _korean]
    return [makers[i % 3](rng) for i in range(n)]


def write_jsonl(path: Path, docs, key: str = "text") -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({key: d}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "mixed.jsonl", synthetic_docs())


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def model(request, corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"model_{request.param}")
    return train_sentencepiece(corpus, out / "m", 800, model_type=request.param)


@pytest.fixture(scope="module")
def tok(model) -> Tokenizer:
    return Tokenizer(model)


# ---------------------------------------------------------------------------------------------
# losslessness
# ---------------------------------------------------------------------------------------------
EDGE_CASES = [
    "",
    "def f(x):\n    if x:\n        return x\n\treturn  None\n",
    "\t\tdeeply\t\ttabbed\t",
    "many      spaces   between    words",
    "  leading and trailing  ",
    " ",
    "\n\n\nblank lines\n\n",
    "windows\r\nline\r\nendings\r\n",
    "한국어 토크나이저는 어휘와 특수 토큰을 다룬다.",
    "이모지 😀 👨‍👩‍👧 🇰🇷 and ZWJ sequences",
    "combining e\u0301 vs é, fullwidth ｆｕｌｌ, ligature ﬁ, circled ① — NFKC would change these",
    "literal meta symbol ▁ and ▁▁ inside text",
    "▁starts with meta",
    "NUL \x00 and controls \x01\x1b\x7f",
    "numbers 1234567890 3.14159 -42",
    "<s> </s> <pad> <unk> <eod> look like special tokens but are text",
    "\u00a0nbsp\u3000ideographic space\u200bzero width",
    "\U0010ffff\ue000 private use and the last code point",
]


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_decode_encode_is_identity_on_edge_cases(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.unk not in ids  # byte fallback: nothing is ever <unk>


def _random_text(rng: random.Random) -> str:
    pools = [
        lambda: rng.choice(" \t\n\r▁"),
        lambda: chr(rng.randint(0x20, 0x7e)),
        lambda: chr(rng.randint(0xAC00, 0xD7A3)),  # Hangul syllables
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),  # emoji
        lambda: chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])),  # any scalar
    ]
    return "".join(rng.choice(pools)() for _ in range(rng.randint(0, 60)))


def test_decode_encode_is_identity_on_random_strings(tok):
    rng = random.Random(1234)
    texts = [_random_text(rng) for _ in range(1500)]
    bad = [t for t in texts if tok.decode(tok.encode(t)) != t]
    assert not bad, f"{len(bad)} strings do not round-trip, e.g. {bad[0]!r}"
    batch = tok.encode_batch(texts, num_threads=2)
    assert [tok.decode(ids) for ids in batch] == texts


def test_round_trip_on_real_documents(tok, corpus):
    docs = read_documents(corpus)
    assert [tok.decode(ids) for ids in tok.encode_batch(docs)] == docs


def test_default_sentencepiece_options_are_lossy(corpus, tmp_path):
    """Why LOSSLESS_OPTIONS exist: SentencePiece's defaults (NFKC, squeezed spaces) destroy code."""
    proto = io_train_with_defaults(read_documents(corpus))
    sp = spm.SentencePieceProcessor(model_proto=proto)
    code = "def f(x):\n    return  x\n"
    assert sp.decode(sp.encode(code)) != code
    assert sp.decode(sp.encode("ｆｕｌｌ")) == "full"  # NFKC folded the characters


def io_train_with_defaults(docs) -> bytes:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(docs), model_writer=buf, vocab_size=800,
                                   minloglevel=2)
    return buf.getvalue()


def test_encode_adds_no_bos_eos_and_specials_decode_to_nothing(tok):
    ids = tok.encode("hello")
    assert tok.bos not in ids and tok.eos not in ids
    assert tok.decode([tok.bos] + ids + [tok.eos, tok.pad]) == "hello"


def test_byte_fallback_for_unseen_characters(tok):
    ids = tok.encode("😀")  # never in the training corpus
    assert len(ids) == 4 and all(tok.is_byte(i) for i in ids)
    assert [tok.id_to_piece(i) for i in ids] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]


def test_encode_batch_matches_encode_for_any_thread_count(tok):
    texts = synthetic_docs(seed=7, n=60) + EDGE_CASES
    single = [tok.encode(t) for t in texts]
    for n in (1, 2, 3):
        assert tok.encode_batch(texts, num_threads=n) == single
    assert tok.encode_batch([]) == []


# ---------------------------------------------------------------------------------------------
# determinism and fingerprints
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_training_is_deterministic_and_path_independent(corpus, tmp_path, model_type):
    a = train_sentencepiece(corpus, tmp_path / "a", 700, model_type=model_type, seed=3)
    b = train_sentencepiece([corpus], tmp_path / "sub" / "other_name", 700, model_type=model_type, seed=3)
    assert a.read_bytes() == b.read_bytes()
    assert Tokenizer(a).fingerprint == Tokenizer(b).fingerprint


def test_fingerprint_is_sha256_of_the_model_proto(model, tmp_path):
    tok = Tokenizer(model)
    assert tok.fingerprint == hashlib.sha256(model.read_bytes()).hexdigest()
    copy = shutil.copy(model, tmp_path / "renamed.model")
    same = Tokenizer(copy)
    assert same.fingerprint == tok.fingerprint
    tok.assert_same(same)  # a copy under another name is the same tokenizer
    tok.assert_same(tok.fingerprint)
    tok.assert_same("sha256:" + tok.fingerprint.upper())


def test_assert_same_names_both_fingerprints(corpus, tmp_path):
    a = Tokenizer(train_sentencepiece(corpus, tmp_path / "a", 700))
    b = Tokenizer(train_sentencepiece(corpus, tmp_path / "b", 700, model_type="unigram"))
    assert a.vocab_size == b.vocab_size and a.fingerprint != b.fingerprint
    with pytest.raises(TokenizerMismatchError) as err:
        a.assert_same(b)
    msg = str(err.value)
    assert a.fingerprint in msg and b.fingerprint in msg and "a.model" in msg
    with pytest.raises(TokenizerMismatchError, match="the tokenizer of web_text_document"):
        a.assert_same(b.fingerprint, what="the tokenizer of web_text_document")
    with pytest.raises(TypeError):
        a.assert_same(42)


def test_different_settings_give_different_fingerprints(corpus, tmp_path):
    fps = {Tokenizer(train_sentencepiece(corpus, tmp_path / f"m{k}", v, **o)).fingerprint
           for k, (v, o) in enumerate([(700, {}), (701, {}), (700, {"split_digits": False})])}
    assert len(fps) == 3


def test_pickle_round_trip_keeps_the_model(tok):
    other = pickle.loads(pickle.dumps(tok))
    assert other.fingerprint == tok.fingerprint
    assert other.encode("def f():\n\treturn 1") == tok.encode("def f():\n\treturn 1")


def test_from_bytes_equals_file(model):
    assert Tokenizer.from_bytes(model.read_bytes()).fingerprint == Tokenizer(model).fingerprint


# ---------------------------------------------------------------------------------------------
# special ids
# ---------------------------------------------------------------------------------------------
def test_special_ids_of_workbook_models(tok):
    assert tok.special_ids() == {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "eod": 3}
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_dedicated_eod_piece_is_used(corpus, tmp_path):
    t = Tokenizer(train_sentencepiece(corpus, tmp_path / "e", 700, control_symbols=["<eod>"]))
    assert t.eod == t.piece_to_id("<eod>") and t.eod not in (t.eos, t.unk)
    assert t.decode(t.encode("x") + [t.eod]) == "x"


def test_foreign_model_defaults_eod_to_eos(corpus, tmp_path):
    """A model trained with SentencePiece's own defaults (unk 0, bos 1, eos 2, no pad)."""
    path = tmp_path / "foreign.model"
    path.write_bytes(io_train_with_defaults(read_documents(corpus)))
    t = Tokenizer(path)
    assert (t.unk, t.bos, t.eos, t.pad) == (0, 1, 2, -1)
    assert t.eod == t.eos == 2


def test_model_without_eos_has_no_eod(corpus, tmp_path):
    t = Tokenizer(train_sentencepiece(corpus, tmp_path / "noeos", 700, eos_id=-1))
    with pytest.raises(ValueError, match="neither an <eod> piece nor an EOS id"):
        _ = t.eod
    assert t.special_ids()["eod"] == -1


@pytest.mark.parametrize("vocab, dtype", [(8000, np.uint16), (65499, np.uint16), (65500, np.int32), (128256, np.int32)])
def test_optimal_dtype_follows_megatron_rule(vocab, dtype):
    from labsupport.datasets.indexed import optimal_dtype
    assert optimal_dtype(vocab) is dtype


# ---------------------------------------------------------------------------------------------
# measuring and comparing
# ---------------------------------------------------------------------------------------------
def test_tokens_per_character_and_byte(tok):
    texts = ["한국어 문서", "plain english text", "😀"]
    n_tok = sum(len(tok.encode(t)) for t in texts)
    assert tokens_per_character(tok, texts) == pytest.approx(n_tok / sum(map(len, texts)))
    assert tokens_per_byte(tok, texts) == pytest.approx(n_tok / sum(len(t.encode()) for t in texts))
    assert tokens_per_byte(tok, texts) < tokens_per_character(tok, texts)  # Korean/emoji: >1 byte/char
    with pytest.raises(ValueError, match="no characters"):
        tokens_per_character(tok, ["", ""])


def test_compare_tokenizers_same_and_mismatch(corpus, tmp_path):
    a = Tokenizer(train_sentencepiece(corpus, tmp_path / "a", 700))
    a2 = Tokenizer(shutil.copy(a.path, tmp_path / "copy.model"))
    other_docs = write_jsonl(tmp_path / "other.jsonl", synthetic_docs(seed=99))
    b = Tokenizer(train_sentencepiece(other_docs, tmp_path / "b", 700, pad_id=3, eos_id=0))
    probes = synthetic_docs(seed=5, n=12)
    same = compare_tokenizers(a, a2, probes)
    assert same == {"same_fingerprint": True, "vocab_sizes": (700, 700), "special_ids_differ": [],
                    "id_agreement": 1.0, "garbled": None, "verdict": "same"}
    diff = compare_tokenizers(a, b, probes)
    assert diff["verdict"] == "mismatch" and not diff["same_fingerprint"]
    assert diff["special_ids_differ"] == ["eod", "eos", "pad"]
    assert diff["garbled"] is not None and diff["garbled"] not in probes
    assert 0.0 <= diff["id_agreement"] < 1.0


def test_decode_rejects_ids_outside_the_vocabulary(tok):
    with pytest.raises(ValueError, match=r"outside this tokenizer's vocabulary 0\.\.\d+"):
        tok.decode([5, tok.vocab_size])
    with pytest.raises(ValueError, match="outside"):
        tok.decode([-1])
    assert tok.decode(np.array(tok.encode("abc"), dtype=np.uint16)) == "abc"


def test_encode_rejects_non_strings(tok):
    with pytest.raises(TypeError, match="expects a str, got bytes"):
        tok.encode(b"abc")
    with pytest.raises(TypeError, match=r"texts\[1\] is an int"):
        tok.encode_batch(["a", 3])


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_missing_input_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        train_sentencepiece(missing, tmp_path / "m", 500)
    with pytest.raises(FileNotFoundError, match="directory"):
        train_sentencepiece(tmp_path, tmp_path / "m", 500)
    assert not (tmp_path / "m.model").exists()


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        Tokenizer(tmp_path / "missing.model")


def test_not_a_model_file(tmp_path):
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(ValueError, match="junk.model is not a SentencePiece model"):
        Tokenizer(junk)


def test_empty_corpus(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CorpusError, match=r"no text in .*empty\.jsonl"):
        train_sentencepiece(empty, tmp_path / "m", 500)
    blanks = write_jsonl(tmp_path / "blanks.jsonl", ["", ""])
    with pytest.raises(CorpusError, match="blanks.jsonl"):
        train_sentencepiece(blanks, tmp_path / "m", 500)
    with pytest.raises(ValueError, match="inputs is empty"):
        train_sentencepiece([], tmp_path / "m", 500)


def test_vocab_size_too_large_for_the_corpus(tmp_path):
    small = write_jsonl(tmp_path / "small.jsonl", ["hello world, a very small corpus"] * 5)
    with pytest.raises(ValueError, match=r"vocab_size=5000 is too large for .*small\.jsonl.*<= (\d+)") as err:
        train_sentencepiece(small, tmp_path / "m", 5000)
    limit = int(err.value.args[0].split("<= ")[1].split()[0])
    assert train_sentencepiece(small, tmp_path / "ok", limit).is_file()  # the suggested size works
    assert Tokenizer(tmp_path / "ok.model").vocab_size == limit


def test_vocab_size_too_small(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=100 is too small .* use vocab_size >= \d+"):
        train_sentencepiece(corpus, tmp_path / "m", 100)
    with pytest.raises(ValueError, match="positive integer"):
        train_sentencepiece(corpus, tmp_path / "m", 0)


def test_non_utf8_line_names_file_and_line(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    lines = [json.dumps({"text": "fine"}).encode(), json.dumps({"text": "also fine"}).encode(),
             '{"text": "caf\xe9 in cp949/latin-1"}'.encode("latin-1")]
    bad.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CorpusError, match=r"latin1\.jsonl:3: not valid UTF-8 \(byte 0xe9"):
        train_sentencepiece(bad, tmp_path / "m", 500)
    txt = tmp_path / "korean_cp949.txt"
    txt.write_bytes("첫 줄\n".encode() + "둘째 줄\n".encode("cp949"))
    with pytest.raises(CorpusError, match=r"korean_cp949\.txt:2: not valid UTF-8"):
        read_documents(txt)


def test_bad_json_and_missing_field_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "ok"}\n{"text": "unterminated\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: not a JSON object"):
        read_documents(p)
    p.write_text('{"text": "ok"}\n\n{"body": "x"}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:3: no field 'text' \(found \['body'\]\)"):
        train_sentencepiece(p, tmp_path / "m", 500)
    p.write_text('{"text": 12}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:1: field 'text' is an int"):
        read_documents(p)
    p.write_text('{"body": "a custom key works"}\n')
    assert read_documents(p, json_key="body") == ["a custom key works"]


def test_bad_options(corpus, tmp_path):
    with pytest.raises(ValueError, match="unknown SentencePiece option 'no_such_option'"):
        train_sentencepiece(corpus, tmp_path / "m", 500, no_such_option=1)
    with pytest.raises(ValueError, match=r"\['input'\] are set by train_sentencepiece"):
        train_sentencepiece(corpus, tmp_path / "m", 500, input="x.txt")
    with pytest.raises(ValueError, match="model_type must be"):
        train_sentencepiece(corpus, tmp_path / "m", 500, model_type="wordpiece")


def test_failed_training_leaves_no_files(tmp_path):
    small = write_jsonl(tmp_path / "small.jsonl", ["tiny"])
    out = tmp_path / "models"
    out.mkdir()
    with pytest.raises(ValueError):
        train_sentencepiece(small, out / "m", 5000)
    assert list(out.iterdir()) == []


def test_successful_training_leaves_only_the_model(corpus, tmp_path):
    train_sentencepiece(corpus, tmp_path / "m", 600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.model"]


# ---------------------------------------------------------------------------------------------
# reading corpora
# ---------------------------------------------------------------------------------------------
def test_read_documents_text_and_jsonl(tmp_path):
    txt = tmp_path / "plain.txt"
    txt.write_text("line one\r\n\nline two\n", encoding="utf-8")
    assert read_documents(txt) == ["line one", "line two"]
    j = write_jsonl(tmp_path / "d.jsonl", ["a\nb", "", "c"])
    assert read_documents(j) == ["a\nb", "c"]
    assert read_documents(j, limit=1) == ["a\nb"]


def test_long_documents_are_cut_for_training_not_dropped():
    doc = ("x" * 100 + "\n") * 500  # 50,500 characters
    parts = T._training_sentences([doc], max_chars=4096)
    assert "".join(parts) == doc and max(map(len, parts)) <= 4096
    assert all(p.endswith("\n") for p in parts)  # cut at line ends
    one_line = "y" * 10_000
    assert T._training_sentences([one_line], max_chars=4096) == ["y" * 4096, "y" * 4096, "y" * 1808]


# ---------------------------------------------------------------------------------------------
# the workbook tokenizer (on a small stand-in for the shipped corpora)
# ---------------------------------------------------------------------------------------------
@pytest.fixture()
def small_workbook(tmp_path, monkeypatch):
    import labsupport.paths

    data = tmp_path / "data"
    data.mkdir()
    docs = synthetic_docs(seed=11, n=200)
    for k, name in enumerate(labsupport.paths.DOMAINS):
        write_jsonl(data / f"{name}.jsonl", docs[k::4])
    monkeypatch.setattr(labsupport.paths, "DATA_DIR", data)
    monkeypatch.setenv("LABSUPPORT_WORK", str(tmp_path / "work"))
    return tmp_path


def test_workbook_tokenizer_builds_once_and_prints_nothing(small_workbook, capfd):
    path = T.workbook_tokenizer(vocab_size=600)
    assert path.parent == small_workbook / "work" / "tokenizer"
    mtime = path.stat().st_mtime_ns
    assert T.workbook_tokenizer(vocab_size=600) == path and path.stat().st_mtime_ns == mtime
    assert capfd.readouterr().out == ""
    tok = Tokenizer(path)
    assert tok.vocab_size == 600 and tok.dtype == np.uint16
    # a changed corpus gives a new model (the cache key includes the corpora)
    with open(small_workbook / "data" / "web.jsonl", "a") as fh:
        fh.write(json.dumps({"text": "one more document"}) + "\n")
    assert T.workbook_tokenizer(vocab_size=600) != path


def test_workbook_tokenizer_is_safe_when_processes_race(small_workbook):
    code = ("import sys, labsupport.paths as P; from pathlib import Path; P.DATA_DIR = Path(sys.argv[1]); "
            "from labsupport.datasets.tokenizer import workbook_tokenizer as w, Tokenizer as T; "
            "p = w(vocab_size=600); print(p, T(p).fingerprint)")
    env = {**os.environ, "LABSUPPORT_WORK": str(small_workbook / "work")}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(small_workbook / "data")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o[0] for o in outs}) == 1  # same path, same fingerprint
    files = list((small_workbook / "work" / "tokenizer").iterdir())
    assert len(files) == 1 and files[0].suffix == ".model"  # no temporary files left behind


def test_workbook_tokenizer_missing_corpus(small_workbook):
    (small_workbook / "data" / "korean.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="korean.jsonl"):
        T.workbook_tokenizer(vocab_size=600)


def test_repr_names_the_model_not_a_machine_path(model, tmp_path):
    tok = Tokenizer(model)
    assert "vocab_size=800" in repr(tok) and tok.fingerprint[:12] in repr(tok)
    assert str(tmp_path.parent) not in repr(tok)
    assert repr(Tokenizer.from_bytes(model.read_bytes(), "x.model")).startswith("Tokenizer(x.model,")
    assert repr(pickle.loads(pickle.dumps(tok))) == repr(tok)
