"""The tokenizer's word cache — the speed path of chapter 2's preprocessing (book §6.2.4).

:class:`WordCache` is :meth:`Tokenizer.encode <labsupport.datasets.tokenizer.Tokenizer.encode>`
with a word → ids cache (what HF ``tokenizers`` does): a word seen before is not run through
BPE again.  Same ids as ``Tokenizer.encode``, proven per model by :func:`word_cache_problem`;
for a model where that proof fails, it calls ``encode`` itself and says why.

Why cutting a text into words changes nothing, for a SentencePiece BPE model:

1. ``encode(text)`` is ``BPE(normalize(text))``: the model's normalizer (NFKC and friends,
   the dummy-prefix "▁", squeezed spaces, spaces → "▁") runs once over the whole text, then one
   merge loop runs over the normalized text.  ``SentencePieceProcessor.normalize`` is that
   normalizer, and a copy of the model with an identity normalizer
   (:func:`normalization_free_proto`, edited through ``sentencepiece_model_pb2``) runs the
   same merge loop on already-normalized text.
2. The merge loop picks the best-scoring adjacent pair anywhere, leftmost on ties.  A merge
   only joins symbols into a piece of the vocabulary, so no merge crosses a point where no
   piece can span: a "▁" after a non-"▁" character, when no piece has "▁" after another
   character.  The merges inside each word are then the same, in the same relative order, as
   when the word is encoded alone.
3. Nothing else looks across such a point: no UNUSED pieces (their re-splitting is shared by
   the whole text) and, without byte fallback, "▁" is a known piece (so no run of ``<unk>``
   is merged across words).

So ``encode(text) == concat(copy.encode(w) for w in words(normalize(text)))``; the words are
cut with :data:`_NORMALIZED_WORD_RE` (``"▁a▁▁b"`` → ``"▁a"``, ``"▁▁b"``).  Models whose
normalizer changes nothing (the workbook's: identity rule, no dummy prefix, spaces kept) skip
the normalize pass and cut the raw text at spaces (:data:`_WORD_RE`), the same cut.  A text
where no two spaces touch (every text of a model that squeezes spaces, SentencePiece's default)
is cut by ``text.split("▁")`` instead, the same words at a fraction of the regex's cost; the
words after a space are cached without it, so no new string is made per word.

4. The same argument cuts a new word finer (:func:`fine_cut_problem`, :func:`fine_word_re`).
   Join two characters other than "▁" whenever they stand side by side in a NORMAL or
   USER_DEFINED piece (the only pieces a merge or a user symbol can form); the groups are the
   model's character classes (:func:`piece_classes`; for a model trained with SentencePiece's
   default ``split_by_unicode_script``: letters, digits and punctuation, Hangul, ...).  Between
   two characters of different classes no piece has that pair, so no merge and no user symbol
   crosses there; and, without byte fallback, every character of a class must be a piece itself,
   so at least one side is never ``<unk>`` and no run of ``<unk>`` is merged across.  So
   ``"▁self.assertEqual(x,"`` → ``"▁self"``, ``"."``, ``"assertEqual"``, ``"("``, ``"x"``, ``","``
   (a "▁" run stays with what follows it; characters in no class are never cut apart).  Only
   the words not cached yet are cut this way, and only their new parts go through
   SentencePiece (most parts of a new identifier were seen before); each word is then cached
   as the concatenation of its parts' ids.  It is an option (``WordCache(fine=True)``,
   ``preprocess(..., fine_cut=True)``), off by default: exact, but in the two-worker pipeline
   the regex pass and the bookkeeping per new word cost more than the BPE they save
   (``benchmarks/results/indexed.json``, ``labsupport_fine_cut``).

5. What a new word costs: one pass of SentencePiece's BPE, about 1.7 µs through
   ``SentencePieceProcessor.encode``.  ``WordCache(bpe_engine="numba")`` runs the same merge
   loop compiled by numba instead (:mod:`labsupport.datasets.spm_bpe_numba`, about 60% of the
   time; proven per model by :func:`bpe_engine_problem`), which chapter 2's preprocessing uses
   on large inputs.

A unigram model is different: its Viterbi search scores whole paths, and word-by-word ids
differ on real text (measured: 6–36 of 6,000 documents), so unigram models fall back.

    >>> cache = WordCache(Tokenizer(workbook_tokenizer()))        # doctest: +SKIP
    >>> cache.encode_flat(["a cat", "a dog"], append=3)           # doctest: +SKIP
    (array([  97, 3211, 3, 97, 2804, 3], dtype=uint16), array([3, 3]))
"""
from __future__ import annotations

import random
import itertools
import re
from typing import Any, Sequence

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from labsupport.datasets.tokenizer import META_SYMBOL, Tokenizer, with_article

__all__ = ["WordCache", "WORD_CACHE_MAX_WORDS", "BPE_ENGINES", "word_cache_problem", "fine_cut_problem",
           "bpe_engine_problem", "piece_classes", "fine_word_re", "read_model_proto", "normalization_free_proto"]

#: Default bound of a :class:`WordCache`: past this many distinct words it is emptied and refilled.
WORD_CACHE_MAX_WORDS = 500_000
#: Longer words (base64, URLs, minified code) are encoded but not kept by a WordCache.
_MAX_CACHED_WORD_CHARS = 128
#: Words of a raw text for a model whose normalizer changes nothing: a run of spaces with the
#: non-spaces after it, or the non-spaces at the start.  Only " " (U+0020) separates: tabs and
#: newlines are part of words, like any other character.
_WORD_RE = re.compile(" +[^ ]*|[^ ]+")
#: The same cut on normalized text, where every space is already "▁".
_NORMALIZED_WORD_RE = re.compile("\u2581+[^\u2581]*|[^\u2581]+")
#: A piece that could span a word boundary: "▁" after another character (or a raw space).
_STRADDLE_RE = re.compile("[^\u2581\x00]\u2581| ")

#: Texts encoded whole and word by word by the self-check of :func:`word_cache_problem`:
#: spaces, code, Korean, emoji, and what NFKC rewrites (full-width forms, ligatures,
#: compatibility jamo, combining marks, CRLF, no-break and ideographic spaces).
_WORD_PROBES = (
    "", " ", "   ", "a", "a ", " a", "a  b", "  leading and trailing  ", "x = 1  # comment\n",
    "def f(x):\n    if x:\n        return  x\n\treturn None\n", "\t\ttabs\t and\n\n  newlines \n",
    "many      spaces   between    words", "한국어 토크나이저는  어휘를 다룬다.", "이모지 😀 👨‍👩‍👧 🇰🇷 ok",
    "numbers 1234567890  3.14159 -42", "<s> </s> <unk> text", "\x00 \x01\x7f \u00a0\u3000 end",
    "ｆｕｌｌ　ｗｉｄｔｈ ﬁne ﬂow ㄱㄴㄷ ㅏ e\u0301 a\u0308 Å \u212b ① ™ Ⅻ ½ x² ｶﾞ\r\nCRLF \r end ",
)
#: fingerprint → result of word_cache_problem (forked workers inherit it from the parent)
_PROBLEMS: dict[str, str | None] = {}
#: How the words not cached yet go through BPE: SentencePiece's own ``encode``, or its merge
#: loop compiled by numba (:mod:`labsupport.datasets.spm_bpe_numba`; same ids, about 60% of the time).
BPE_ENGINES = ("sentencepiece", "numba")
#: fingerprint → (why the compiled loop cannot be used or None, its tables); inherited by forked workers
_BPE: dict[str, tuple[str | None, Any]] = {}
#: fingerprint → the fine-cut regex of the model on normalized text ("▁") and on raw text (" ")
_FINE_RES: dict[tuple[str, str], re.Pattern] = {}


# ---------------------------------------------------------------------------------------------
# the model proto
# ---------------------------------------------------------------------------------------------
def read_model_proto(tok: Tokenizer) -> model_pb2.ModelProto:
    """The tokenizer's model as a ``sentencepiece_model_pb2.ModelProto`` (a fresh copy)."""
    model = model_pb2.ModelProto()
    model.ParseFromString(tok._proto)
    return model


def normalization_free_proto(tok: Tokenizer) -> bytes:
    """The serialized model with an identity normalizer: no charsmap, no dummy prefix, spaces
    kept, spaces still escaped as "▁".  Encoding ``normalize(text)`` with it gives
    ``encode(text)`` (module docstring, step 1)."""
    model = read_model_proto(tok)
    norm = model.normalizer_spec
    norm.name = "identity"
    norm.precompiled_charsmap = b""
    norm.add_dummy_prefix = False
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    norm.ClearField("normalization_rule_tsv")
    return model.SerializeToString()


def _normalizes(model: model_pb2.ModelProto) -> bool:
    """True when the model's normalizer changes more than " " → "▁"."""
    norm = model.normalizer_spec
    return bool(norm.precompiled_charsmap or norm.add_dummy_prefix or norm.remove_extra_whitespaces)


#: Piece types SentencePiece's BPE merges into (``pieces_`` in model_interface.cc); CONTROL,
#: UNKNOWN and BYTE pieces are never formed from text, UNUSED ones are refused by the proof.
_MERGEABLE = (model_pb2.ModelProto.SentencePiece.NORMAL, model_pb2.ModelProto.SentencePiece.USER_DEFINED)


def piece_classes(model: model_pb2.ModelProto) -> list[str]:
    """The model's character classes (module docstring, step 4): characters other than "▁"
    joined whenever they stand side by side in some NORMAL or USER_DEFINED piece (union-find over
    the pieces' character bigrams).  Returns each class's characters, sorted, largest class
    first; characters in no such bigram belong to no class."""
    parent: dict[str, str] = {}

    def root(c: str) -> str:
        while parent.setdefault(c, c) != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for p in model.pieces:
        if p.type in _MERGEABLE:
            for a, b in zip(p.piece, p.piece[1:]):
                if a != META_SYMBOL and b != META_SYMBOL:
                    parent[root(a)] = root(b)
    classes: dict[str, list[str]] = {}
    for c in parent:
        classes.setdefault(root(c), []).append(c)
    return sorted(("".join(sorted(v)) for v in classes.values()), key=lambda v: (-len(v), v))


def _fine_re(tok: Tokenizer, space: str) -> re.Pattern:
    """:func:`fine_word_re` of the tokenizer's classes, cached per fingerprint."""
    key = (tok.fingerprint, space)
    if key not in _FINE_RES:
        _FINE_RES[key] = fine_word_re(piece_classes(read_model_proto(tok)), space)
    return _FINE_RES[key]


def _char_set(chars: str) -> str:
    """``chars`` as the inside of a regex character class, consecutive code points as ranges."""
    codes = sorted(set(map(ord, chars)))
    out, k = [], 0
    while k < len(codes):
        j = k
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = re.escape(chr(codes[k])), re.escape(chr(codes[j]))
        out.append(lo if j == k else f"{lo}-{hi}" if j > k + 1 else lo + hi)
        k = j + 1
    return "".join(out)


def fine_word_re(classes: Sequence[str], space: str = META_SYMBOL) -> re.Pattern:
    """The fine cut of a word (module docstring, step 4): a run of ``space`` then a run of one
    class, or of characters in no class; or a run of ``space`` alone.  ``"▁self.assertEqual(x,"``
    → ``"▁self"``, ``"."``, ``"assertEqual"``, ``"("``, ``"x"``, ``","`` for a model whose
    letters and punctuation never share a piece.  ``space``: "▁" on normalized text, " " on the raw
    text of a model that does not normalize."""
    runs = [f"[{_char_set(c)}]+" for c in classes]
    runs.append(f"[^{_char_set(space + ''.join(classes))}]+")
    sp = re.escape(space)
    return re.compile(f"{sp}*(?:{'|'.join(runs)})|{sp}+")


# ---------------------------------------------------------------------------------------------
# the proof, per model
# ---------------------------------------------------------------------------------------------
def word_cache_problem(tok: Tokenizer) -> str | None:
    """None when word-by-word encoding gives exactly ``tok.encode``'s ids; else why not.

    Checked from the model proto (module docstring): a BPE model, spaces escaped as "▁" and
    not a suffix, no piece with "▁" after another character, no UNUSED piece, and with no byte
    fallback a "▁" piece.  Then the probe texts are encoded both ways, a guard against a
    SentencePiece version whose algorithm differs.  Cached per fingerprint.
    """
    if getattr(tok, "library", "sentencepiece") != "sentencepiece":
        return "a Hugging Face tokenizer: the tokenizers library encodes every document (and caches words itself)"
    if tok.fingerprint not in _PROBLEMS:
        _PROBLEMS[tok.fingerprint] = _check(tok)
    return _PROBLEMS[tok.fingerprint]


def _check(tok: Tokenizer) -> str | None:
    sp = tok._sp
    try:
        model = read_model_proto(tok)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, or a newer proto it cannot read
        return f"the model proto could not be read ({exc})"
    trainer, norm = model.trainer_spec, model.normalizer_spec
    if trainer.model_type != model_pb2.TrainerSpec.BPE:
        return "not a BPE model (a unigram model scores the whole text at once)"
    if not norm.escape_whitespaces:
        return "the model has escape_whitespaces off"
    if trainer.treat_whitespace_as_suffix:
        return "the model has treat_whitespace_as_suffix"
    unused = next((i for i, p in enumerate(model.pieces)
                   if p.type == model_pb2.ModelProto.SentencePiece.UNUSED), None)
    if unused is not None:
        return f"the model has UNUSED pieces (e.g. {model.pieces[unused].piece!r})"
    pieces = "\x00".join(p.piece for p in model.pieces)  # pieces never contain NUL
    straddle = _STRADDLE_RE.search(pieces)
    if straddle:
        a, b = pieces.rfind("\x00", 0, straddle.start()) + 1, pieces.find("\x00", straddle.end())
        return f"the piece {pieces[a:b if b >= 0 else None]!r} could span a word boundary"
    if not trainer.byte_fallback and sp.piece_to_id(META_SYMBOL) == sp.unk_id():
        return "no byte_fallback and no '▁' piece (runs of <unk> could merge across words)"
    cache = WordCache(tok, _proof=True)
    for text in _WORD_PROBES:
        if cache.encode(text) != sp.encode(text):
            return f"self-check failed: {text!r} encodes differently word by word"
    return None


def fine_cut_problem(tok: Tokenizer) -> str | None:
    """None when the fine cut (:func:`fine_word_re` over :func:`piece_classes`, module
    docstring step 4) gives exactly ``tok.encode``'s ids; else why not (the word cache then cuts
    at spaces only).  Needs :func:`word_cache_problem` to be None; without byte fallback every
    character of a class must be a piece itself (so no run of ``<unk>`` crosses a fine cut).
    Then the probe texts are encoded with fine cuts.  Cached per fingerprint."""
    key = "fine:" + tok.fingerprint
    if key not in _PROBLEMS:
        _PROBLEMS[key] = word_cache_problem(tok) or _check_fine(tok)
    return _PROBLEMS[key]


def _check_fine(tok: Tokenizer) -> str | None:
    model = read_model_proto(tok)
    classes = piece_classes(model)
    if not classes:
        return "no piece joins two characters other than '▁' (nothing to cut finer)"
    if not model.trainer_spec.byte_fallback:
        unk = tok._sp.unk_id()
        lone = next((c for c in "".join(classes) if tok._sp.piece_to_id(c) == unk), None)
        if lone is not None:
            return (f"no byte_fallback and {lone!r} is in a piece but not a piece itself "
                    "(runs of <unk> could merge across a fine cut)")
    cache = WordCache(tok, _proof=True, _fine=True)
    for text in _WORD_PROBES:
        if cache.encode(text) != tok._sp.encode(text):
            return f"self-check failed: {text!r} encodes differently with fine cuts"
    return None


def bpe_engine_problem(tok: Tokenizer) -> str | None:
    """None when the compiled merge loop (:mod:`labsupport.datasets.spm_bpe_numba`) gives the
    words' ids exactly as SentencePiece does; else why not (the cache then uses SentencePiece's
    own ``encode`` for new words).  Needs :func:`word_cache_problem` to be None and the loop's
    conditions (:func:`~labsupport.datasets.spm_bpe_numba.bpe_tables_problem`); then every piece
    of the vocabulary, the probe texts' words and a few thousand random words (pieces run
    together, unknown characters, words long enough for the heap) are encoded both ways.
    Cached per fingerprint; the first call in a process imports numba and loads the loop (~0.4 s
    with the self-check)."""
    return _bpe_state(tok)[0]


def _bpe_state(tok: Tokenizer) -> tuple[str | None, Any]:
    if tok.fingerprint not in _BPE:
        _BPE[tok.fingerprint] = _check_bpe(tok)
    return _BPE[tok.fingerprint]


def _check_bpe(tok: Tokenizer) -> tuple[str | None, Any]:
    problem = word_cache_problem(tok)
    if problem:
        return f"no word cache ({problem})", None
    from labsupport.datasets import spm_bpe_numba  # noqa: PLC0415 - numba compile on first use (start-up time)

    model = read_model_proto(tok)
    problem = spm_bpe_numba.bpe_tables_problem(model)
    if problem:
        return problem, None
    tables = spm_bpe_numba.build_bpe_tables(model)
    copy = spm.SentencePieceProcessor()
    copy.LoadFromSerializedProto(normalization_free_proto(tok))
    words = _bpe_probe_words(model, tok)
    ids, ends = spm_bpe_numba.encode_words(tables, words)
    starts = [0] + ends[:-1].tolist()
    for word, expected, a, b in zip(words, copy.encode(words), starts, ends.tolist()):
        if ids[a:b].tolist() != expected:
            return f"self-check failed: the compiled loop encodes {word!r} differently", None
    return None, tables


def _bpe_probe_words(model: model_pb2.ModelProto, tok: Tokenizer, n_random: int = 3000) -> list[str]:
    """Words for :func:`bpe_engine_problem`: every piece (and "▁" + piece), the normalized probe
    texts' words, and ``n_random`` words of 2–6 random pieces or characters (some of no piece,
    some over the loop's short-word limit), from a fixed seed."""

    from labsupport.datasets.spm_bpe_numba import SCAN_MAX  # noqa: PLC0415 - numba compile on first use (start-up time)

    pieces = [p.piece for p in model.pieces if p.type in _MERGEABLE]
    words = pieces + [META_SYMBOL + p for p in pieces if not p.startswith(META_SYMBOL)]
    norm = tok._sp.normalize([t for t in _WORD_PROBES if META_SYMBOL not in t])
    words += [w for t in norm for w in _NORMALIZED_WORD_RE.findall(t)]
    rng = random.Random(0)
    odd = "\x00\t\n\r ~\u00e9\u0301\u3000\uac00\u4e00\U0001f600\U0010fffd"
    for k in range(n_random):
        parts = [rng.choice(pieces) if rng.random() < 0.8 else rng.choice(odd) for _ in range(rng.randint(2, 6))]
        if k % 50 == 0:  # long enough for the heap
            parts = parts * (SCAN_MAX // max(1, len("".join(parts))) + 2)
        words.append("".join(parts))
    return [w.replace(" ", META_SYMBOL) for w in words if w]


# ---------------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------------
class WordCache:
    """:meth:`Tokenizer.encode` with a word → ids cache: a word seen before skips BPE.

    Each text is cut into words (normalized first when the model normalizes; module
    docstring); the words not in the cache are encoded in one SentencePiece call and stored as
    packed ``dtype`` bytes; a text's ids are then the concatenation of its words' bytes.  The
    ids are exactly ``Tokenizer.encode(text)``'s: texts containing a literal "▁" go through
    ``encode`` itself, and so does every text when ``exact`` is False (``problem`` says why: a
    unigram model, …, or ``enabled=False``).

    ``dtype``: the integer dtype of the packed ids (default ``tokenizer.dtype``: uint16 below
    65,500 pieces).  ``max_words``: when a batch would take the cache past this many words it is
    emptied first; words longer than 128 characters are never kept, so memory stays bounded
    (~150 bytes a typical word: tens of MB for the default 500,000).  ``num_threads``:
    SentencePiece threads for the words it encodes.  ``fine``: cut new words finer (off by default; module
    docstring, step 4) where :func:`fine_cut_problem` allows it; ``fine_problem`` says why not
    (None when used).  ``words``/``misses``/``encoded`` count the words looked up, those not
    cached yet (once per batch), and the strings that went through SentencePiece (those words,
    or with the fine cut their new parts; the parts are cached too, so a batch can add more
    entries than words).  Not thread-safe; one per process (it is not shared, so a pickled copy
    starts empty).  ``bpe_engine``: how new words go through BPE — "sentencepiece" (its own
    ``encode``, the default) or "numba" (its merge loop compiled, :mod:`labsupport.datasets.spm_bpe_numba`;
    same ids, about 60% of the time, ~0.4 s to start once per process) where
    :func:`bpe_engine_problem` allows it; ``bpe_engine`` then says which one runs and
    ``bpe_problem`` why not the compiled loop (None when it is used).
    """

    def __init__(self, tokenizer: Tokenizer, dtype=None, max_words: int = WORD_CACHE_MAX_WORDS,
                 num_threads: int = 1, *, enabled: bool = True, fine: bool = False,
                 bpe_engine: str = "sentencepiece", _proof: bool = False, _fine: bool = False):
        if not isinstance(tokenizer, Tokenizer) and getattr(tokenizer, "library", None) != "huggingface":
            raise TypeError(f"WordCache needs a Tokenizer or an HFTokenizer, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self.dtype = np.dtype(tokenizer.dtype if dtype is None else dtype)
        if self.dtype.kind not in "iu" or np.iinfo(self.dtype).max < tokenizer.vocab_size - 1:
            raise ValueError(f"dtype {self.dtype} cannot hold ids up to {tokenizer.vocab_size - 1}")
        if int(max_words) < 1:
            raise ValueError(f"max_words must be >= 1, got {max_words}")
        self.max_words = int(max_words)
        self.num_threads = int(num_threads)
        self.enabled = bool(enabled)
        if _proof:  # used by the self-check itself: the cut is tried, not yet proven
            self.problem = None
        else:
            self.problem = word_cache_problem(tokenizer) if self.enabled else "turned off"
        self.exact = self.problem is None
        self.words = self.misses = self.encoded = self.clears = 0
        self._cache: dict[str, bytes] = {}
        #: words that follow a space, keyed without it: "cat" → the ids of "▁cat" (or " cat")
        self._after_space: dict[str, bytes] = {}
        self._normalize = None
        self._word_sp = getattr(tokenizer, "_sp", None)   # None for an HFTokenizer (never exact: plain encoding)
        self._findall = _WORD_RE.findall
        self._space = " "
        normalizes = self.exact and _normalizes(read_model_proto(tokenizer))
        if normalizes:
            self._normalize = tokenizer._sp.normalize
            self._word_sp = spm.SentencePieceProcessor()
            self._word_sp.LoadFromSerializedProto(normalization_free_proto(tokenizer))
            self._findall = _NORMALIZED_WORD_RE.findall
            self._space = META_SYMBOL
        self._double = self._space * 2
        #: why the misses are not cut finer (None: they are; module docstring, step 4)
        self.fine_problem: str | None = "turned off" if not fine else self.problem
        if _proof:  # used by the fine self-check itself
            self.fine_problem = None if _fine else "not proven yet"
        elif self.fine_problem is None:
            self.fine_problem = fine_cut_problem(tokenizer)
        self._fine_findall = None
        if self.fine_problem is None:
            self._fine_findall = _fine_re(tokenizer, self._space).findall
        if bpe_engine not in BPE_ENGINES + (tokenizer.library,):   # the library itself: its own encode
            raise ValueError(f"bpe_engine must be one of {', '.join(BPE_ENGINES)}; got {bpe_engine!r}")
        #: why new words do not go through the compiled loop (None: they do; ``bpe_engine`` says which runs)
        self.bpe_problem: str | None = "turned off" if bpe_engine in ("sentencepiece", tokenizer.library) \
            else self.problem
        self._bpe_tables = None
        if bpe_engine == "numba" and not _proof and self.exact:
            self.bpe_problem, self._bpe_tables = _bpe_state(tokenizer)
        self.bpe_engine = "numba" if self._bpe_tables is not None else tokenizer.library

    def __reduce__(self):
        return (_word_cache_from_state, (self.tokenizer, self.dtype, self.max_words, self.num_threads,
                                         self.enabled, self.fine_problem != "turned off",
                                         "sentencepiece" if self.bpe_problem == "turned off" else "numba"))

    def __len__(self) -> int:
        return len(self._cache) + len(self._after_space)

    def __repr__(self) -> str:
        state = "exact" if self.exact else f"off: {self.problem}"
        return f"WordCache({len(self)} words, dtype={self.dtype}, {state})"

    def clear(self) -> None:
        """Forget every cached word (the counters are kept)."""
        self._cache.clear()
        self._after_space.clear()

    def encode(self, text: str) -> list[int]:
        """``tokenizer.encode(text)``, through the cache."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        flat, _ = self.encode_flat([text])
        return flat.tolist()

    def encode_flat(self, texts: Sequence[str],
                    append: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """All ``texts`` encoded back to back: ``(ids, lengths)``, ids of ``self.dtype``, lengths int64.

        ``append``: an id added after every text that encodes to at least one token (the EOD of
        chapter 2's ``--append-eod``; counted in that text's length).  Equal to flattening
        ``[tokenizer.encode(t) (+ [append]) for t in texts]``.
        """
        texts = texts if isinstance(texts, list) else list(texts)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"encode_flat expects strings; texts[{bad}] is {with_article(type(texts[bad]).__name__)}")
        if append is not None and not 0 <= int(append) < self.tokenizer.vocab_size:
            raise ValueError(f"append id {append} is outside 0..{self.tokenizer.vocab_size - 1}")
        if not self.exact:
            return self._plain(texts, append)
        try:
            words = self._words(texts)
            docs = self._lookup(words)
        except (TypeError, RuntimeError):
            # e.g. a lone surrogate from a JSON "\ud800" escape: fail exactly like encode_batch
            return self._plain(texts, append)
        for k, w in enumerate(words):
            if w is None:  # a literal "▁": encode() spells it as bytes
                docs[k] = np.asarray(self.tokenizer.encode(texts[k]), dtype=self.dtype).tobytes()
        itemsize = self.dtype.itemsize
        lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs)) // itemsize
        if append is not None:
            tail = np.asarray([append], dtype=self.dtype).tobytes()
            lens += lens > 0
            return (np.frombuffer(b"".join(itertools.chain.from_iterable((d, tail) if d else (d,) for d in docs)),
                                  dtype=self.dtype), lens)
        return np.frombuffer(b"".join(docs), dtype=self.dtype), lens

    def _words(self, texts: list[str]) -> list[Any]:
        """Each text's words: None for a text with a literal "▁"; else a :class:`_Split` (the
        words after single spaces, without them) or, for a text with a run of spaces, the list
        of its words cut by the regex."""
        cut = self._cut
        if self._normalize is None:
            return [cut(t) if META_SYMBOL not in t else None for t in texts]
        plain = [t for t in texts if META_SYMBOL not in t]
        normalized = iter(self._normalize(plain) if plain else [])
        return [cut(next(normalized)) if META_SYMBOL not in t else None for t in texts]

    def _cut(self, text: str) -> Any:
        """One (normalized) text's words.  Where no two spaces touch, ``text.split(space)`` is the
        regex's cut (``"a▁b▁c"`` → ``"a"``, ``"▁b"``, ``"▁c"``) at a fraction of its cost, and the
        words after a space are looked up without it (no new string per word)."""
        space = self._space
        if self._double in text:
            return self._findall(text)
        return _Split(text.split(space))

    def _lookup(self, words: list[Any]) -> list[bytes]:
        """The packed ids of each text from its words, encoding the words not cached yet."""
        cache, after, space = self._cache, self._after_space, self._space
        whole = [w for w in words if w is not None and not isinstance(w, _Split)]
        split = [w for w in words if isinstance(w, _Split)]
        want = set(itertools.chain((w[0] for w in split if w[0]), itertools.chain.from_iterable(whole)))
        want_after = set(itertools.chain.from_iterable(itertools.islice(w, 1, None) for w in split))
        # set.difference(dict) walks the set; difference_update would walk the whole cache
        new, new_after = want.difference(cache), want_after.difference(after)
        self.words += (sum(map(len, whole)) + sum(map(len, split))
                       - sum(1 for w in split if not w[0]))
        if (new or new_after) and len(self) + len(new) + len(new_after) > self.max_words:
            self.clear()
            self.clears += 1
            new, new_after = want, want_after
        too_long: list[str] = []
        too_long_after: list[str] = []
        if new or new_after:
            self.misses += len(new) + len(new_after)
            rest = list(new_after)
            keys_after = [space + w for w in rest]
            if self._fine_findall is None:
                too_long = self._store(list(new))
                self._store(keys_after, keys=rest, target=after)   # filed without the space
            else:
                keep = want.union(k for k in keys_after if k in cache)   # needed under the full key too
                too_long = self._store_fine(list(new) + [k for k in keys_after if k not in cache and k not in new])
                for w, key in zip(rest, keys_after):   # filed under the word without its space
                    after[w] = cache[key] if key in keep else cache.pop(key)
            too_long_after = [w for w in rest if len(w) >= _MAX_CACHED_WORD_CHARS]
        get, get_after, join = cache.__getitem__, after.__getitem__, b"".join
        docs = []
        for w in words:
            if w is None:
                docs.append(b"")
            elif isinstance(w, _Split):
                body = join(map(get_after, itertools.islice(w, 1, None)))
                docs.append(get(w[0]) + body if w[0] else body)
            else:
                docs.append(join(map(get, w)))
        for w in too_long:  # used for this batch only (a part may also be a word)
            cache.pop(w, None)
        for w in too_long_after:
            after.pop(w, None)
        return docs

    def _store(self, words: list[str], keys: list[str] | None = None,
               target: dict[str, bytes] | None = None) -> list[str]:
        """Encode ``words`` (one SentencePiece call) into the cache (or ``target``, under ``keys``);
        returns the words too long to keep."""
        if not words:
            return []
        self.encoded += len(words)
        if self._bpe_tables is not None:
            from labsupport.datasets.spm_bpe_numba import encode_words  # noqa: PLC0415 - numba compile on first use (start-up time)

            try:
                ids, ends = encode_words(self._bpe_tables, words, escape_spaces=self._space == " ")
            except UnicodeEncodeError:  # a lone surrogate: SentencePiece below raises like encode()
                pass
            else:
                self._store_slices(words if keys is None else keys, ids.astype(self.dtype).tobytes(),
                                   ends * self.dtype.itemsize, target)
                return [w for w in words if len(w) > _MAX_CACHED_WORD_CHARS]
        encoded = self._word_sp.encode(words, num_threads=self.num_threads)
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        buf = np.fromiter(itertools.chain.from_iterable(encoded), dtype=self.dtype,
                          count=int(sizes.sum())).tobytes()
        ends = np.cumsum(sizes) * self.dtype.itemsize
        self._store_slices(words if keys is None else keys, buf, ends, target)
        return [w for w in words if len(w) > _MAX_CACHED_WORD_CHARS]

    def _store_slices(self, words: list[str], buf: bytes, ends: np.ndarray,
                      target: dict[str, bytes] | None = None) -> None:
        """Cache ``words[k]`` → ``buf[ends[k-1]:ends[k]]`` (``ends``: byte offsets, int64)."""
        ends = ends.tolist()
        starts = [0] + ends[:-1]
        (self._cache if target is None else target).update(zip(words, map(buf.__getitem__, map(slice, starts, ends))))

    def _store_fine(self, words: list[str]) -> list[str]:
        """Encode new ``words`` through their fine parts (module docstring, step 4): the parts
        not cached yet go through SentencePiece, each word is the concatenation of its parts'
        ids.  The words starting with a space and ending with another character are cut in one
        regex pass over their concatenation (every such word boundary is a cut); the others
        (a text's first word, trailing spaces) are encoded whole.  Returns the words and
        parts too long to keep."""
        space = self._space
        joined = [w for w in words if w[0] == space and w[-1] != space]
        if len(joined) < len(words):
            others = [w for w in words if not (w[0] == space and w[-1] != space)]
            too_long = self._store(others)
        else:
            too_long = []
        if not joined:
            return too_long
        parts = self._fine_findall("".join(joined))
        n = len(parts)
        part_ends = np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n))
        word_ends = np.cumsum(np.fromiter(map(len, joined), dtype=np.int64, count=len(joined)))
        last = np.searchsorted(part_ends, word_ends)  # index of each word's last part
        if not np.array_equal(part_ends[np.minimum(last, n - 1)], word_ends):
            raise RuntimeError("a fine cut missed a word boundary")  # never: encode_flat falls back
        cache = self._cache
        new = set(parts).difference(cache)
        if new:
            new_parts = list(new)
            too_long += self._store(new_parts)
        packed = list(map(cache.__getitem__, parts))
        byte_ends = np.cumsum(np.fromiter(map(len, packed), dtype=np.int64, count=n))
        self._store_slices(joined, b"".join(packed), byte_ends[last])
        too_long += [w for w in joined if len(w) > _MAX_CACHED_WORD_CHARS]
        return too_long

    def _plain(self, texts: list[str], append: int | None) -> tuple[np.ndarray, np.ndarray]:
        """encode_flat without the cache: one SentencePiece call per text."""
        ids = self.tokenizer.encode_batch(texts, num_threads=self.num_threads)
        if append is not None:
            for doc in ids:
                if doc:
                    doc.append(int(append))
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype, count=int(lens.sum()))
        return flat, lens


class _Split(list):
    """A text's ``split(space)``: item 0 is its first word (no space before it, maybe empty),
    every other item a word that followed one space, without that space."""

    __slots__ = ()


def _word_cache_from_state(tokenizer, dtype, max_words, num_threads, enabled=True, fine=False,
                          bpe_engine="sentencepiece") -> WordCache:
    return WordCache(tokenizer, dtype, max_words, num_threads, enabled=enabled, fine=fine, bpe_engine=bpe_engine)
