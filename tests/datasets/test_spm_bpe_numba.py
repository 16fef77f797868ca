"""labsupport.datasets.spm_bpe_numba (chapter 2's compiled BPE for the word cache's new words):
exactly SentencePiece's ids — for every normalization rule, with and without byte fallback and
dummy prefix, on random Unicode, long words (the heap) and tied scores — or SentencePiece
itself, with the reason; and preprocessing writes the same bytes with either engine."""
from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from tests.datasets import test_tokenizer
from tests.datasets import test_word_cache
from tests.datasets.test_tokenizer import EDGE_CASES, synthetic_docs
from tests.datasets.test_word_cache import NFKC_SENSITIVE, _nfkc_text, _spacey_text

from labsupport.datasets import preprocess as P
from labsupport.datasets import spm_bpe_numba as K
from labsupport.datasets import word_cache as W
from labsupport.datasets.tokenizer import Tokenizer, train_sentencepiece

# fixtures of the tokenizer and word-cache tests, under the same names
corpus, shipped_texts = test_tokenizer.corpus, test_word_cache.shipped_texts
META = "\u2581"
Piece = model_pb2.ModelProto.SentencePiece

pytestmark = pytest.mark.skipif(K.numba_problem() is not None, reason="numba is not installed")


def _train(rule: str, byte_fallback: bool, dummy_prefix: bool, vocab: int = 700, **extra) -> Tokenizer:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(synthetic_docs(seed=3) + NFKC_SENSITIVE * 3),
                                   model_writer=buf, vocab_size=vocab, model_type="bpe", minloglevel=2,
                                   num_threads=1, normalization_rule_name=rule, byte_fallback=byte_fallback,
                                   add_dummy_prefix=dummy_prefix, **extra)
    return Tokenizer.from_bytes(buf.getvalue(), f"{rule}.model")


def _copy(tok: Tokenizer) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(W.normalization_free_proto(tok))
    return sp


def _words_of(tok: Tokenizer, texts: list[str]) -> list[str]:
    """The normalized words the word cache would send to BPE (without literal "▁" texts)."""
    norm = tok._sp.normalize([t for t in texts if META not in t])
    return [w for t in norm for w in W._NORMALIZED_WORD_RE.findall(t)]


def _assert_kernel_exact(tok: Tokenizer, words: list[str]) -> int:
    tables = K.build_bpe_tables(W.read_model_proto(tok))
    ids, ends = K.encode_words(tables, words)
    assert ids.dtype == np.int32 and ends.dtype == np.int64 and ends.size == len(words)
    expected = _copy(tok).encode(words)
    starts = [0] + ends[:-1].tolist()
    wrong = [(w, ids[a:b].tolist(), e) for w, a, b, e in zip(words, starts, ends.tolist(), expected)
             if ids[a:b].tolist() != e]
    assert not wrong, wrong[:3]
    return sum(len(w) > K.SCAN_MAX for w in words)


def _long_words(rng: random.Random, pieces: list[str], n: int) -> list[str]:
    """Words longer than the scan limit: pieces, repeats and odd characters run together."""
    out = []
    for _ in range(n):
        parts = [rng.choice(pieces) if rng.random() < 0.85 else chr(rng.choice([rng.randint(0x20, 0xD7FF),
                                                                                  rng.randint(0xE000, 0x2FFFF)]))
                 for _ in range(rng.randint(15, 60))]
        out.append(META + "".join(parts).replace(" ", META))
    out += [META + "a" * 200, "a" * 49, META * 60, "ab" * 100, "\u3131" * 70]
    return out


@pytest.mark.parametrize("rule", ["identity", "nmt_nfkc", "nfkc_cf"])
@pytest.mark.parametrize("byte_fallback,dummy_prefix", [(True, True), (True, False), (False, True), (False, False)])
def test_compiled_bpe_equals_sentencepiece(rule, byte_fallback, dummy_prefix, shipped_texts):
    """Every word of the shipped corpora, random NFKC-sensitive and spacey text, and long words,
    for each normalization rule × byte fallback × dummy prefix (12 models)."""
    tok = _train(rule, byte_fallback, dummy_prefix)
    assert W.bpe_engine_problem(tok) is None
    rng = random.Random(f"{rule}{byte_fallback}{dummy_prefix}")
    texts = shipped_texts[:400] + [_nfkc_text(rng) for _ in range(1500)] + \
        [_spacey_text(rng) for _ in range(1500)] + EDGE_CASES
    pieces = [p.piece for p in W.read_model_proto(tok).pieces if p.type == Piece.NORMAL]
    words = sorted(set(_words_of(tok, texts))) + _long_words(rng, pieces, 200)
    assert _assert_kernel_exact(tok, words) >= 200  # the heap path ran too
    if not byte_fallback:  # unknown characters: one <unk> per run, as SentencePiece
        assert any(tok.unk in x for x in _copy(tok).encode(words))


def test_compiled_bpe_equals_sentencepiece_with_the_workbook_tokenizer(shipped_texts):
    from labsupport.datasets.tokenizer import workbook_tokenizer

    tok = Tokenizer(workbook_tokenizer())
    assert W.bpe_engine_problem(tok) is None
    words = sorted({w for t in shipped_texts if META not in t for w in W._WORD_RE.findall(t)})
    _assert_kernel_exact(tok, [w.replace(" ", META) for w in words])


def test_ties_go_to_the_leftmost_pair():
    """All scores equal: every choice is a tie, broken by position (short words scan, long words
    use the heap) exactly as SentencePiece breaks it."""
    tok = _train("identity", True, True)
    model = W.read_model_proto(tok)
    for p in model.pieces:
        if p.type == Piece.NORMAL:
            p.score = -1.0
    tied = Tokenizer.from_bytes(model.SerializeToString(), "tied.model")
    rng = random.Random(2)
    texts = [_spacey_text(rng) for _ in range(1500)]
    pieces = [p.piece for p in model.pieces if p.type == Piece.NORMAL]
    words = sorted(set(_words_of(tied, texts))) + _long_words(rng, pieces, 100)
    _assert_kernel_exact(tied, words)
    assert _copy(tied).encode(words) != _copy(tok).encode(words)  # the tie rule was exercised


def test_models_the_loop_cannot_run_use_sentencepiece_and_say_why(corpus, tmp_path):
    user = Tokenizer(train_sentencepiece(corpus, tmp_path / "user", 600, user_defined_symbols=["<tag>"]))
    assert W.word_cache_problem(user) is None  # the cache itself is fine ...
    assert "USER_DEFINED" in W.bpe_engine_problem(user)  # ... the compiled loop is not
    cache = W.WordCache(user, bpe_engine="numba")
    assert cache.bpe_engine == "sentencepiece" and "USER_DEFINED" in cache.bpe_problem
    texts = ["a <tag> b", "x<tag>y z"] + [_spacey_text(random.Random(k)) for k in range(200)]
    assert cache.encode_flat(texts)[0].tolist() == [i for t in texts for i in user.encode(t)]
    model = W.read_model_proto(_train("identity", True, True))
    control = model_pb2.ModelProto()
    control.CopyFrom(model)
    control.pieces[1].piece, control.pieces[1].type = "x", Piece.CONTROL   # a one-character control piece
    assert "reserved piece 'x'" in K.bpe_tables_problem(control)
    model.pieces[-1].score = float("-inf")
    assert "finite" in K.bpe_tables_problem(model)
    with pytest.raises(ValueError, match="finite"):
        K.build_bpe_tables(model)
    unigram = Tokenizer(train_sentencepiece(corpus, tmp_path / "uni", 600, "unigram"))
    assert W.bpe_engine_problem(unigram).startswith("no word cache (not a BPE model")
    assert W.WordCache(unigram, bpe_engine="numba").bpe_engine == "sentencepiece"
    with pytest.raises(ValueError, match="bpe_engine must be one of"):
        W.WordCache(unigram, bpe_engine="fast")


def test_the_self_check_refuses_a_loop_that_disagrees(monkeypatch):
    """A guard that can fail: a loop that drops one id is caught before any text uses it."""
    tok = _train("nmt_nfkc", True, False)
    real = K.encode_words

    def off_by_one(tables, words, escape_spaces=False):
        ids, ends = real(tables, words, escape_spaces)
        return ids[1:], ends - 1

    monkeypatch.setattr(K, "encode_words", off_by_one)
    monkeypatch.setattr(W, "_BPE", {})
    assert "self-check failed" in W.bpe_engine_problem(tok)
    assert W.WordCache(tok, bpe_engine="numba").bpe_engine == "sentencepiece"
    monkeypatch.setattr(K, "_IMPORT_ERROR", "numba could not be imported (test)")
    monkeypatch.setattr(W, "_BPE", {})
    assert W.bpe_engine_problem(tok) == "numba could not be imported (test)"


@pytest.mark.parametrize("rule", ["identity", "nfkc_cf"])
def test_word_cache_with_the_compiled_loop_equals_encode(rule, shipped_texts):
    """Through WordCache (both cuts: raw text for a model that does not normalize, normalized
    text otherwise), batch after batch, with a pickled copy and a lone surrogate."""
    tok = _train(rule, False, rule == "nfkc_cf", remove_extra_whitespaces=rule != "identity")
    cache = W.WordCache(tok, bpe_engine="numba")
    assert cache.bpe_engine == "numba" and cache.bpe_problem is None
    assert (cache._normalize is None) == (rule == "identity")
    rng = random.Random(9)
    texts = shipped_texts[:300] + [_nfkc_text(rng) for _ in range(800)] + [_spacey_text(rng) for _ in range(800)]
    plain = W.WordCache(tok)
    assert plain.bpe_engine == "sentencepiece" and plain.bpe_problem == "turned off"
    for k in range(0, len(texts), 250):
        a, b = cache.encode_flat(texts[k:k + 250], append=tok.eod), plain.encode_flat(texts[k:k + 250], append=tok.eod)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    assert cache.encoded == plain.encoded > 0
    import pickle

    again = pickle.loads(pickle.dumps(cache))
    assert again.bpe_engine == "numba" and len(again) == 0
    with pytest.raises(TypeError) as compiled:
        again.encode_flat(["ok", "bad \ud800 text"])
    with pytest.raises(TypeError) as reference:
        tok.encode_batch(["ok", "bad \ud800 text"], num_threads=1)
    assert str(compiled.value) == str(reference.value)


def test_preprocess_writes_the_same_bytes_with_either_engine(tmp_path, monkeypatch, capsys):
    from labsupport.paths import data_file

    tok = _train("nmt_nfkc", True, True, vocab=900)
    model = tmp_path / "tok.model"
    model.write_bytes(tok._proto)
    src = data_file("code")
    outs = {}
    for engine, workers in (("sentencepiece", 1), ("numba", 2), ("numba", 1)):
        res = P.preprocess([src], tmp_path / f"{engine}{workers}", model, append_eod=True, workers=workers,
                           show_progress=False, bpe_engine=engine)
        assert res.word_cache["bpe_engine"] == engine
        outs[engine, workers] = [(tmp_path / f"{engine}{workers}_text_document{e}").read_bytes()
                                 for e in (".bin", ".idx")]
    assert outs["numba", 2] == outs["sentencepiece", 1] == outs["numba", 1]
    # auto: SentencePiece below the threshold (with the reason), the compiled loop above it
    res = P.preprocess([src], tmp_path / "auto", model, show_progress=False)
    assert res.word_cache["bpe_engine"] == "sentencepiece" and "MB" in res.word_cache["bpe_problem"]
    assert P.choose_bpe_engine("auto", tok, 10 ** 9, None, workers=64)[0] == "sentencepiece"  # per worker
    monkeypatch.setattr(P, "AUTO_NUMBA_BYTES_PER_WORKER", 0)
    res = P.preprocess([src], tmp_path / "auto", model, show_progress=False)
    assert res.word_cache["bpe_engine"] == "numba" and res.word_cache["bpe_problem"] is None
    res = P.preprocess([src], tmp_path / "auto", model, show_progress=False, word_cache=False)
    assert res.word_cache["bpe_engine"] == "sentencepiece" and res.word_cache["bpe_problem"] == "no word cache"
    with pytest.raises(P.PreprocessError, match="--bpe-engine must be one of"):
        P.preprocess([src], tmp_path / "x", model, show_progress=False, bpe_engine="cpp")
    # the CLI flag, and what the summary line says
    assert P.main(["--input", str(src), "--tokenizer-model", str(model), "--output-prefix", str(tmp_path / "cli"),
                   "--append-eod", "--no-progress", "--bpe-engine", "numba"]) == 0
    assert "new words through the compiled BPE loop" in capsys.readouterr().out
    assert (tmp_path / "cli_text_document.bin").read_bytes() == outs["numba", 2][0]
    assert P.main(["--input", str(src), "--tokenizer-model", str(model), "--output-prefix", str(tmp_path / "x"),
                   "--bpe-engine", "cpp"]) == 2
    assert "invalid choice: 'cpp'" in capsys.readouterr().err


def test_tables_describe_the_model():
    """The hash table holds every way to cut a piece into two keyed halves, and nothing else."""
    tok = _train("identity", True, True)
    model = W.read_model_proto(tok)
    t = K.build_bpe_tables(model)
    assert t.pair_keys.size & (t.pair_keys.size - 1) == 0 and (t.pair_keys >= 0).sum() <= t.pair_keys.size // 4
    normal = [p.piece for p in model.pieces if p.type == Piece.NORMAL]
    key = {p: k for k, p in enumerate(normal)}
    for c in {p[0] for p in normal if len(p) > 1} | {p[-1] for p in normal if len(p) > 1}:
        key.setdefault(c, None)
    expected = {}
    for k, p in enumerate(normal):
        for cut in range(1, len(p)):
            a, b = p[:cut], p[cut:]
            if a in key and b in key:
                expected[a, b] = k
    found = {}
    stored = dict(zip(t.pair_keys[t.pair_keys >= 0].tolist(), t.pair_vals[t.pair_keys >= 0].tolist()))
    names = {}
    for text in key:
        names[int(t.char_key[ord(text)]) if len(text) == 1 else key[text]] = text
    for code, merged in stored.items():
        found[names[code // t.n_keys], names[code % t.n_keys]] = merged
    assert found == expected and len(found) > 100
    assert t.out_id[key[normal[0]]] == tok.piece_to_id(normal[0]) and t.char_out[0x10FFFF] == tok.unk
    assert t.byte_id[0x41] == tok.piece_to_id("<0x41>")
    json.dumps({"keys": t.n_keys})  # plain ints


def test_spawned_workers_start_the_compiled_loop_themselves(tmp_path, monkeypatch):
    """Where processes are spawned (macOS, Windows), each worker proves and loads the loop itself."""
    from labsupport.paths import data_file

    tok = _train("nfkc_cf", True, False)
    model = tmp_path / "tok.model"
    model.write_bytes(tok._proto)
    src = data_file("web")
    plain = P.preprocess([src], tmp_path / "fork", model, append_eod=True, workers=1, show_progress=False,
                         bpe_engine="sentencepiece")
    monkeypatch.setattr(P.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    res = P.preprocess([src], tmp_path / "spawn", model, append_eod=True, workers=2, show_progress=False,
                       bpe_engine="numba")
    assert res.word_cache["bpe_engine"] == "numba" and res.word_cache["encoded"] > 0  # as the workers report
    assert res.word_cache["misses"] == res.word_cache["encoded"] and plain.tokens == res.tokens
    for ext in (".bin", ".idx"):
        assert ((tmp_path / f"spawn_text_document{ext}").read_bytes()
                == (tmp_path / f"fork_text_document{ext}").read_bytes())
    # a worker that could not start the loop is reported, not hidden behind the parent's choice
    assert P._engine_report("numba", None, {"numba", "sentencepiece"}) == {
        "bpe_engine": "numba and sentencepiece", "bpe_problem": "a worker could not start the compiled loop"}
    assert P._engine_report("numba", None, {"numba"}) == {"bpe_engine": "numba", "bpe_problem": None}


@pytest.mark.parametrize("score_at,score_tc", [(-0.0, 0.0), (0.0, -0.0), (0.0, 0.0), (-0.0, -0.0), (-1.4e-45, 0.0),
                                               (-0.0, -1.4e-45), (-1.4e-45, -0.0), (-0.0, 1e-30), (2.0, 2.0)])
def test_signed_zero_scores_are_ordered_like_sentencepiece(score_at, score_tc):
    """SentencePiece 0.2.3 merges a pair scored +0.0 before one scored -0.0 (a trained BPE model gives
    its first merge -0.0; a piece appended to the vocabulary without a score has +0.0); other equal
    scores are ties, won by the leftmost pair.  Found by fuzzing the loop against SentencePiece."""
    buf = io.BytesIO()
    lines = ["the cat sat on the mat with a hat", "that rat ate at the flat", "attic data"] * 300
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, model_type="bpe",
                                   vocab_size=300, minloglevel=2, num_threads=1, byte_fallback=True,
                                   normalization_rule_name="identity", add_dummy_prefix=False)
    model = model_pb2.ModelProto()
    model.ParseFromString(buf.getvalue())
    first = next(p for p in model.pieces if p.type == Piece.NORMAL)
    assert first.piece == "at" and str(first.score) == "-0.0"   # what the trainer writes
    first.score = score_at
    added = model.pieces.add()
    added.piece, added.score = "tc", score_tc
    tok = Tokenizer.from_bytes(model.SerializeToString(), "zero.model")
    words = ["atc", META + "atc", "a" + "tc" * 30, "at" * 30 + "c", "tcatc"]
    _assert_kernel_exact(tok, words)
    assert W.bpe_engine_problem(tok) is None
