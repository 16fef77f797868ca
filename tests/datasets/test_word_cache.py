"""labsupport.datasets.word_cache (chapter 2's speed path): the word cache gives exactly
``Tokenizer.encode``'s ids — for every SentencePiece BPE model, whatever its normalization rule —
or falls back to ``encode`` and says why.  Uses the synthetic corpus and models of
``tests/datasets/test_tokenizer.py``; the normalizing models are trained here with SentencePiece's defaults."""
from __future__ import annotations

import io
import json
import pickle
import random

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from labsupport.datasets import tokenizer as T
from labsupport.datasets import word_cache as W
from labsupport.datasets.tokenizer import Tokenizer, read_documents, train_sentencepiece
from labsupport.datasets.word_cache import WordCache, word_cache_problem

# the shared corpus, models and text generators of the tokenizer tests
from tests.datasets import test_tokenizer
from tests.datasets.test_tokenizer import EDGE_CASES, EN, KO, _random_text, synthetic_docs

# its fixtures, under the same names (bound here, not imported, so parameters may reuse the names)
corpus, model, tok = test_tokenizer.corpus, test_tokenizer.model, test_tokenizer.tok


# ---------------------------------------------------------------------------------------------
# the word-level cache (WordCache): exactly encode()'s ids, or encode() itself
# ---------------------------------------------------------------------------------------------
def _split_into_words(text: str) -> list[str]:
    """SentencePiece's SplitIntoWords (model_interface.cc, whitespace as prefix, whitespace-only
    pieces allowed) on the normalized text (" " → "▁"), mapped back to the raw text."""
    norm = text.replace(" ", "\u2581")
    words: list[str] = []
    in_ws = False
    for k, ch in enumerate(norm):
        is_ws = ch == "\u2581"
        if k == 0 or (is_ws and not in_ws):
            words.append("")
            in_ws = True
        if in_ws and not is_ws:
            in_ws = False
        words[-1] += ch
    return [w.replace("\u2581", " ") for w in words]


def test_word_split_equals_sentencepiece_split_into_words():
    import itertools

    assert W._WORD_RE.findall("a  b") == ["a", "  b"] and W._WORD_RE.findall("a ") == ["a", " "]
    assert W._WORD_RE.findall("") == [] and W._WORD_RE.findall("   ") == ["   "]
    assert W._WORD_RE.findall(" x\ty\n z  ") == [" x\ty\n", " z", "  "]  # only " " separates
    n = 0
    for length in range(8):
        for chars in itertools.product(" a\t\n", repeat=length):
            text = "".join(chars)
            assert W._WORD_RE.findall(text) == _split_into_words(text), repr(text)
            n += 1
    rng = random.Random(7)
    for _ in range(2000):
        text = _spacey_text(rng).replace("\u2581", "")
        assert W._WORD_RE.findall(text) == _split_into_words(text), repr(text)
    assert n == sum(4 ** k for k in range(8))


def _spacey_text(rng: random.Random) -> str:
    """Random text heavy in what word splitting must get right: runs of spaces (also leading,
    trailing and only spaces), tabs, newlines, digits, Korean, emoji, "▁", NUL, any character."""
    pools = [
        lambda: " " * rng.choice([1, 1, 1, 2, 3, 4, 8]),
        lambda: rng.choice(["\t", "\n", "\r\n", "\t\t", "\n    ", " \n", "\u2581", "\u2581\u2581", "\x00"]),
        lambda: rng.choice(EN) + rng.choice(["", "", ".", ",", "(", ")", ":", "'s"]),
        lambda: "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6))),
        lambda: rng.choice(KO),
        lambda: chr(rng.randint(0xAC00, 0xD7A3)),
        lambda: rng.choice(["😀", "👨‍👩‍👧", "🇰🇷", "é", "e\u0301", "ｆ", "\u00a0", "\u3000", "—"]),
        lambda: chr(rng.choice([rng.randint(0x21, 0x7E), rng.randint(0xA0, 0xD7FF),
                                rng.randint(0xE000, 0x10FFFF)])),
        lambda: "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou")
                        for _ in range(rng.randint(1, 5))),
    ]
    text = "".join(rng.choice(pools)() for _ in range(rng.randint(0, 40)))
    if rng.random() < 0.2:
        text = " " * rng.randint(1, 4) + text
    if rng.random() < 0.2:
        text += " " * rng.randint(1, 4)
    return text


def _flat_reference(tok: Tokenizer, texts, append=None):
    ids = [tok.encode(t) for t in texts]
    if append is not None:
        ids = [x + [append] if x else x for x in ids]
    return [i for x in ids for i in x], [len(x) for x in ids]


def _assert_cache_exact(tok: Tokenizer, texts, cache=None, batch: int = 97):
    cache = W.WordCache(tok) if cache is None else cache
    expected, lens = _flat_reference(tok, texts, append=tok.eod)
    flat, got_lens = [], []
    for k in range(0, len(texts), batch):  # several batches: later ones hit the cache
        f, n = cache.encode_flat(texts[k:k + batch], append=tok.eod)
        assert f.dtype == cache.dtype and n.dtype == np.int64
        flat.extend(f.tolist())
        got_lens.extend(n.tolist())
    assert got_lens == lens
    assert flat == expected
    return cache


@pytest.fixture(scope="module")
def workbook_tok() -> Tokenizer:
    return Tokenizer(T.workbook_tokenizer())


def test_workbook_models_qualify_for_the_word_cache(workbook_tok, tok, model):
    assert word_cache_problem(workbook_tok) is None
    assert W.WordCache(workbook_tok).exact
    assert W.fine_cut_problem(workbook_tok) is None and W.WordCache(workbook_tok, fine=True).fine_problem is None
    assert W.WordCache(workbook_tok).fine_problem == "turned off"          # an option, off by default
    if "bpe" in model.parent.name:  # the module's BPE model: other data, vocabulary 800
        assert word_cache_problem(tok) is None
    else:
        assert "not a BPE model" in word_cache_problem(tok)


def test_word_cache_is_exact_on_the_shipped_corpora(workbook_tok):
    from labsupport.paths import DOMAINS, data_file

    cache = W.WordCache(workbook_tok)
    for d in DOMAINS:
        docs = read_documents(data_file(d))
        _assert_cache_exact(workbook_tok, docs, cache)
        assert [cache.encode(t) for t in docs[:50]] == [workbook_tok.encode(t) for t in docs[:50]]
    assert 0 < cache.misses < cache.words  # it did cache


def test_word_cache_is_exact_on_random_strings(workbook_tok, tok):
    rng = random.Random(2024)
    texts = [_spacey_text(rng) for _ in range(4000)] + [_random_text(rng) for _ in range(1000)]
    texts += EDGE_CASES + ["", " ", "  ", "\t", "\n", "a", "a ", " a", "a  b", "\u2581", " \u2581 "]
    for t in (workbook_tok, tok):  # tok: the module's models, trained on other data (BPE and unigram)
        cache = _assert_cache_exact(t, texts)
        assert [cache.encode(x) for x in texts[:300]] == [t.encode(x) for x in texts[:300]]
    # a tiny cache is emptied again and again and stays exact
    small = _assert_cache_exact(workbook_tok, texts, W.WordCache(workbook_tok, max_words=40), batch=5)
    assert small.clears > 10 and len(small) <= 40 + 5 * 45


def test_word_cache_dtype_counters_and_errors(workbook_tok):
    cache = WordCache(workbook_tok)
    assert cache.dtype == np.uint16 and len(cache) == 0 and "exact" in repr(cache)
    flat, lens = cache.encode_flat([])
    assert flat.size == 0 and lens.size == 0
    assert cache.encode_flat(["", " hello world", "", "\u2581"], append=workbook_tok.eod)[1].tolist() == \
        [0, len(workbook_tok.encode(" hello world")) + 1, 0, 4]
    assert cache.words == 2 and cache.misses == 2 and len(cache) == 2  # "▁" text went to encode()
    long_word = " " + "x" * W._MAX_CACHED_WORD_CHARS  # too long to keep: encoded, then dropped
    assert cache.encode(long_word + " hello") == workbook_tok.encode(long_word + " hello")
    assert len(cache) == 2 and cache.misses == 3
    wide = W.WordCache(workbook_tok, dtype=np.int32)
    assert wide.encode_flat(["hello  world"])[0].dtype == np.int32
    assert wide.encode("hello  world") == workbook_tok.encode("hello  world")
    copy = pickle.loads(pickle.dumps(cache))  # a pickled copy starts empty
    assert len(copy) == 0 and copy.encode("hello world") == workbook_tok.encode("hello world")
    with pytest.raises(ValueError, match="cannot hold"):
        W.WordCache(workbook_tok, dtype=np.int8)
    with pytest.raises(ValueError, match="max_words"):
        W.WordCache(workbook_tok, max_words=0)
    with pytest.raises(TypeError, match="texts\\[1\\]"):
        cache.encode_flat(["ok", b"bytes"])
    with pytest.raises(TypeError):
        cache.encode(None)
    with pytest.raises(ValueError, match="append"):
        cache.encode_flat(["x"], append=workbook_tok.vocab_size)
    # a lone surrogate (e.g. from a JSON "\ud800" escape) fails exactly like encode_batch
    with pytest.raises(TypeError) as plain:
        workbook_tok.encode_batch(["ok", "bad \ud800 text"], num_threads=1)
    with pytest.raises(TypeError) as cached:
        cache.encode_flat(["ok", "bad \ud800 text"])
    assert str(cached.value) == str(plain.value)


def _edit_piece(proto: bytes, index: int, piece: str | None = None, kind: int | None = None) -> bytes:
    """The model proto with piece ``index``'s string and/or type replaced."""
    model = model_pb2.ModelProto()
    model.ParseFromString(proto)
    if piece is not None:
        model.pieces[index].piece = piece
    if kind is not None:
        model.pieces[index].type = kind
    return model.SerializeToString()


def test_word_cache_falls_back_for_models_that_do_not_qualify(corpus, tmp_path, tok):
    docs = read_documents(corpus)
    rng = random.Random(5)
    texts = docs[:60] + [_spacey_text(rng) for _ in range(400)] + EDGE_CASES
    cases = {
        "unigram": ({"model_type": "unigram"}, "not a BPE model"),
        "suffix": ({"treat_whitespace_as_suffix": True}, "treat_whitespace_as_suffix"),
        "user_space": ({"user_defined_symbols": ["x y"]}, "could span a word boundary"),
    }
    for name, (options, reason) in cases.items():
        options = dict(options)
        model_type = options.pop("model_type", "bpe")
        other = Tokenizer(train_sentencepiece(corpus, tmp_path / name, 600, model_type, **options))
        problem = word_cache_problem(other)
        assert problem is not None and reason in problem, (name, problem)
        cache = WordCache(other)
        assert not cache.exact and "off:" in repr(cache)
        _assert_cache_exact(other, texts, cache)  # = encode(), which it calls
        assert cache.words == 0 and len(cache) == 0
    # hand-edited protos: a piece that could span a word boundary really changes the ids ...
    proto = tok._proto
    if word_cache_problem(tok) is not None:
        return  # the unigram run of the module fixture: nothing more to check
    last = tok.vocab_size - 1
    assert tok.piece_to_id("\u2581t") != tok.unk and tok.piece_to_id("s\u2581t") == tok.unk
    bridged = Tokenizer.from_bytes(_edit_piece(proto, last, piece="s\u2581t"))
    assert "could span a word boundary" in word_cache_problem(bridged)
    whole = bridged.encode("s t")
    by_word = [i for w in W._WORD_RE.findall("s t") for i in bridged.encode(w)]
    assert whole == [last] and by_word != whole  # so the check is needed
    assert WordCache(bridged).encode("s t") == whole
    # ... and UNUSED pieces (their re-splitting table is shared by the whole text) are refused
    unused = Tokenizer.from_bytes(_edit_piece(proto, last, kind=model_pb2.ModelProto.SentencePiece.UNUSED))
    assert "UNUSED" in word_cache_problem(unused)
    _assert_cache_exact(unused, texts)


# ---------------------------------------------------------------------------------------------
# the word cache on normalizing models: normalize once, encode words with an identity copy
# ---------------------------------------------------------------------------------------------
#: What NFKC and case folding rewrite: full-width forms, ligatures, compatibility jamo,
#: combining marks, CRLF and lone CR, compatibility numbers, no-break/ideographic/zero-width spaces.
NFKC_SENSITIVE = [
    "ｆｕｌｌ", "ｗｉｄｅ　ｓｐａｃｅ", "ﬁ", "ﬂ", "ﬀ", "ﬃ", "ㄱ", "ㅏ", "ㄳ", "ㅥ", "e\u0301", "a\u0308", "\u0301",
    "\u0323\u0307", "Å", "\u212b", "①", "™", "Ⅻ", "½", "x²", "ｶﾞ", "ﾊﾟ", "\r\n", "\r", "\n", " ", "  ",
    "   ", "\t", "\u00a0", "\u3000", "\u200b", "\ufeff", "ǅ", "ß", "İ", "Σς", "ＡＢＣ", "㍿", "㈜", "😀",
    "한국어", "Hello", "WORLD", "123", "\u2581",
]


def _nfkc_text(rng: random.Random) -> str:
    def piece() -> str:
        r = rng.random()
        if r < 0.55:
            return rng.choice(NFKC_SENSITIVE)
        if r < 0.8:
            return rng.choice(EN)
        return chr(rng.choice([rng.randint(0x20, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                               rng.randint(0xF900, 0xFFEF), rng.randint(0x1D400, 0x1D7FF)]))
    return "".join(piece() for _ in range(rng.randint(0, 30)))


@pytest.fixture(scope="module")
def shipped_texts() -> list[str]:
    """Every text field of the shipped corpora, data/*.jsonl."""
    from labsupport.paths import REPO_ROOT

    texts: list[str] = []
    for path in sorted((REPO_ROOT / "data").glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line)
                texts.extend(v for v in obj.values() if isinstance(v, str))
    return texts


@pytest.mark.parametrize("rule", ["identity", "nmt_nfkc", "nfkc_cf"])
@pytest.mark.parametrize("byte_fallback,dummy_prefix", [(True, True), (True, False), (False, True), (False, False)])
def test_word_cache_is_exact_for_normalizing_models(corpus, rule, byte_fallback, dummy_prefix, shipped_texts):
    """SentencePiece defaults (squeezed spaces, no whitespace-only pieces) plus the rule under test:
    the cache qualifies and gives SentencePieceProcessor.encode's ids on every shipped text and on
    random NFKC-sensitive Unicode."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(synthetic_docs(seed=3) + NFKC_SENSITIVE * 3),
                                   model_writer=buf, vocab_size=700, model_type="bpe", minloglevel=2,
                                   num_threads=1, normalization_rule_name=rule,
                                   byte_fallback=byte_fallback, add_dummy_prefix=dummy_prefix)
    tok = Tokenizer.from_bytes(buf.getvalue(), f"{rule}.model")
    assert word_cache_problem(tok) is None
    cache = W.WordCache(tok, fine=True)
    assert cache.exact and cache._normalize is not None  # SentencePiece's default squeezes spaces
    rng = random.Random(11)
    texts = shipped_texts + [_nfkc_text(rng) for _ in range(3000)] + EDGE_CASES
    flat, lens = cache.encode_flat(texts)
    expected = tok._sp.encode([t for t in texts], num_threads=1)
    meta = [i for i, t in enumerate(texts) if "\u2581" in t]  # Tokenizer.encode's own rule
    for i in meta:
        expected[i] = tok.encode(texts[i])
    assert lens.tolist() == [len(x) for x in expected]
    assert flat.tolist() == [i for x in expected for i in x]
    assert 0 < cache.misses < cache.words // 2  # it did cache
    assert sum(i < len(shipped_texts) for i in meta) < len(shipped_texts) // 100  # fast path nearly always
    # step 4: the new words were cut finer (fewer strings through BPE than new words) ...
    assert cache.fine_problem is None and W.fine_cut_problem(tok) is None
    assert 0 < cache.encoded < cache.misses
    # ... and give the ids of the plain word cache, batch after batch
    coarse = W.WordCache(tok, fine=False)
    assert coarse.fine_problem == "turned off"
    for k in range(0, len(texts), 500):
        a, b = cache.encode_flat(texts[k:k + 500]), coarse.encode_flat(texts[k:k + 500])
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    assert coarse.encoded == coarse.misses


def test_normalization_free_copy_encodes_normalized_text_like_the_model(corpus, tmp_path):
    """Step 1 of the proof: encode(text) == copy.encode(normalize(text)); the copy is written
    through sentencepiece_model_pb2 and changes only the normalizer."""
    path = train_sentencepiece(corpus, tmp_path / "nfkc", 600, normalization_rule_name="nmt_nfkc",
                               add_dummy_prefix=True, remove_extra_whitespaces=True)
    tok = Tokenizer(path)
    copy = model_pb2.ModelProto()
    copy.ParseFromString(W.normalization_free_proto(tok))
    original = W.read_model_proto(tok)
    assert copy.normalizer_spec.name == "identity" and not copy.normalizer_spec.precompiled_charsmap
    assert not copy.normalizer_spec.add_dummy_prefix and not copy.normalizer_spec.remove_extra_whitespaces
    assert original.normalizer_spec.precompiled_charsmap  # the original still normalizes
    assert copy.pieces == original.pieces and copy.trainer_spec == original.trainer_spec
    plain = Tokenizer.from_bytes(copy.SerializeToString())
    rng = random.Random(4)
    texts = [_nfkc_text(rng).replace("\u2581", "") for _ in range(500)]
    assert plain._sp.encode(tok._sp.normalize(texts)) == tok._sp.encode(texts)
    assert any(plain._sp.encode(t) != tok._sp.encode(t) for t in texts)  # the copy alone differs


def test_unigram_models_fall_back_and_say_why(corpus, tmp_path, capsys):
    path = train_sentencepiece(corpus, tmp_path / "uni", 600, "unigram", normalization_rule_name="nfkc_cf")
    tok = Tokenizer(path)
    assert "not a BPE model" in word_cache_problem(tok)
    cache = W.WordCache(tok)
    texts = [_nfkc_text(random.Random(k)) for k in range(200)]
    assert cache.encode_flat(texts)[0].tolist() == [i for t in texts for i in tok.encode(t)]
    assert cache.words == 0 and "off: not a BPE model" in repr(cache)


# ---------------------------------------------------------------------------------------------
# step 4: the fine cut of a new word between characters of different classes
# ---------------------------------------------------------------------------------------------
def _train(rule: str, byte_fallback: bool, dummy_prefix: bool = True, extra=()) -> Tokenizer:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(synthetic_docs(seed=3) + NFKC_SENSITIVE * 3 + list(extra)),
                                   model_writer=buf, vocab_size=700, model_type="bpe", minloglevel=2,
                                   num_threads=1, normalization_rule_name=rule,
                                   byte_fallback=byte_fallback, add_dummy_prefix=dummy_prefix)
    return Tokenizer.from_bytes(buf.getvalue(), f"{rule}.model")


CODE = ["self.assertEqual(x, y)", "def f(a, b=2):\n\treturn a[0] + b  # ok", "x.y.z(1, '2', \"3\")",
        "for i in range(10): print(i ** 2)", "ｓｅｌｆ.ｆｏｏ（１）", "a_b__c = {'k': [1, 2]}\r\n"]


@pytest.mark.parametrize("rule", ["identity", "nmt_nfkc", "nfkc_cf"])
def test_fine_cut_splits_only_between_classes(rule):
    """Every fine cut falls between two characters (not "▁") that share no NORMAL or
    USER_DEFINED piece's bigram and lie in different classes; the parts give back the word."""
    tok = _train(rule, byte_fallback=True, extra=CODE * 5)
    model = W.read_model_proto(tok)
    classes = W.piece_classes(model)
    assert len(classes) >= 2  # letters and punctuation never share a piece (split_by_unicode_script)
    where = {c: k for k, chars in enumerate(classes) for c in chars}
    bigrams = {p.piece[i:i + 2] for p in model.pieces if p.type in W._MERGEABLE for i in range(len(p.piece) - 1)}
    findall = W.fine_word_re(classes).findall
    parts = findall("\u2581self.assertEqual(x,")
    assert parts[:2] == ["\u2581self", "."] and parts[-3:] == ["(", "x", ","]  # "assertEqual": 1 or 2 parts
    rng = random.Random(3)
    words = [w for t in tok._sp.normalize([_nfkc_text(rng).replace("\u2581", "") for _ in range(800)] + CODE)
             for w in W._NORMALIZED_WORD_RE.findall(t)]
    for w in words:
        parts = findall(w)
        assert "".join(parts) == w
        for left, right in zip(parts, parts[1:]):
            a, b = left[-1], right[0]
            assert a != "\u2581" and b != "\u2581" and a + b not in bigrams
            assert where.get(a, -1) != where.get(b, -1)


@pytest.mark.parametrize("rule", ["identity", "nmt_nfkc", "nfkc_cf"])
@pytest.mark.parametrize("byte_fallback", [True, False])
def test_fine_cut_is_exact_on_code_and_nfkc_sensitive_text(rule, byte_fallback, shipped_texts):
    """Code (where the fine cut matters most), the shipped corpora and random NFKC-sensitive
    Unicode with unknown characters: the fine-cut cache gives SentencePiece's ids."""
    tok = _train(rule, byte_fallback, extra=CODE * 5)
    cache = W.WordCache(tok, fine=True)
    assert cache.fine_problem is None
    rng = random.Random(19)
    code = ["".join(rng.choice(CODE + NFKC_SENSITIVE + ["\u2603", "\U0001F600", "\u00a0", "  "])
                    for _ in range(rng.randint(1, 12))) for _ in range(1500)]
    texts = code + shipped_texts[::7] + [_nfkc_text(rng) for _ in range(1500)] + EDGE_CASES
    expected = [tok.encode(t) for t in texts]
    for k in range(0, len(texts), 300):  # later batches find words and parts cached
        flat, lens = cache.encode_flat(texts[k:k + 300])
        assert flat.tolist() == [i for x in expected[k:k + 300] for i in x]
        assert lens.tolist() == [len(x) for x in expected[k:k + 300]]
    assert 0 < cache.encoded < cache.misses


def test_fine_cut_falls_back_when_unk_runs_could_merge_across_it():
    """Without byte fallback, a character that is in a piece but not a piece itself is <unk>
    next to another unknown character, and SentencePiece merges the two into one <unk>: the fine
    cut would split them, so the model does not qualify (the word cache still cuts at spaces).
    With byte fallback the same edit is harmless (unknown characters become bytes, one by one)."""
    for byte_fallback in (False, True):
        tok = _train("nmt_nfkc", byte_fallback)
        last = tok.vocab_size - 1
        assert tok.piece_to_id("\u2603") == tok.unk and tok.piece_to_id("\u2604") == tok.unk
        edited = Tokenizer.from_bytes(_edit_piece(tok._proto, last, piece="q\u2603"), "edited.model")
        problem = W.fine_cut_problem(edited)
        cache = W.WordCache(edited, fine=True)
        text = "a \u2604\u2603 b"
        if byte_fallback:
            assert problem is None and cache.fine_problem is None
        else:
            assert "is in a piece but not a piece itself" in problem and "'\u2603'" in problem
            assert cache.exact and cache.fine_problem == problem
            unchecked = W.WordCache(edited, _proof=True, _fine=True)  # the fine cut, not proven
            assert unchecked.encode(text) != edited._sp.encode(text)  # so the check is needed
        assert cache.encode(text) == edited._sp.encode(text)
        _assert_cache_exact(edited, [text, "q\u2603 \u2604q\u2603", "x \u2603\u2603q"] + EDGE_CASES, cache)


def test_split_cut_equals_the_regex_cut_and_shares_the_cache(workbook_tok):
    """Texts without a run of spaces are cut by str.split, the others by the regex; a word
    cached under its full key ("␣\\n" from a regex-cut text) stays there when the same word
    turns up after a single space in a split text of a later batch."""
    cache = WordCache(workbook_tok)
    assert isinstance(cache._cut("a b\tc \n"), W._Split) and not isinstance(cache._cut("a  b"), W._Split)
    assert list(cache._cut("a b  c")) == W._WORD_RE.findall("a b  c")
    for text in ("a b\tc \n", " lead", "trail ", "", "one"):
        split = cache._cut(text)
        assert [split[0]] * bool(split[0]) + [" " + w for w in split[1:]] == W._WORD_RE.findall(text)
    batches = [["x  y \n"], ["a \n", "b  c \n", "a \n"], ["x  y \n", "q \n"]]
    for batch in batches:
        flat, lens = cache.encode_flat(batch)
        want = [workbook_tok.encode(t) for t in batch]
        assert flat.tolist() == [i for w in want for i in w] and lens.tolist() == list(map(len, want))
