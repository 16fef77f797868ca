"""SentencePiece tokenizers for the workbook — chapter 1 (tokenization, book §6.2.1, §6.2.4, §6.2.9).

What this module gives the other chapters:

* :func:`train_sentencepiece` — train a BPE or unigram model from jsonl/text files,
  deterministically, with options that make it **lossless** like a real LLM tokenizer:
  ``decode(encode(text)) == text`` for code indentation, tabs, runs of spaces, newlines,
  Korean and emoji (identity normalisation, whitespace kept, byte fallback).
* :class:`Tokenizer` — a SentencePiece model (also one trained elsewhere) with ``encode``,
  ``encode_batch``, ``decode``, the special ids and a **fingerprint**: the sha256 of the
  serialized model proto.  Chapter 2 stores it beside every ``.bin/.idx``; a mismatch raises
  :class:`TokenizerMismatchError` naming both fingerprints (book §6.2.4 pitfall, §6.2.9).
* :func:`workbook_tokenizer` — the standard model of the workbook, trained on the four
  domain corpora and cached in ``work_dir("tokenizer")``.
* :class:`WordCache` — ``encode`` with a word-level cache (what HF ``tokenizers`` does): a word
  seen before is not run through BPE again.  Exact — the same ids as ``Tokenizer.encode`` —
  for the models where :meth:`Tokenizer.word_cache_problem` finds no reason it could differ
  (the workbook's BPE models); for any other model it simply calls ``encode``.  Chapter 2's
  preprocessing uses it.

Special ids of the models trained here: ``pad=0, unk=1, bos=2, eos=3``.  **eod** (the end of
document token that ``--append-eod`` appends in chapter 2) is the id of a piece named ``<eod>``
when a model has one (e.g. trained with ``control_symbols=["<eod>"]``), else the EOS id.  The workbook's models have none, so
eod == eos — the same choice as Megatron-Core's ``SentencePieceTokenizer.eod`` and NeMo's
``preprocess_data_for_megatron.py --append-eod`` (both use the EOS id).
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from labsupport.fileio import PathLike, atomic_write


__all__ = [
    "CorpusError", "TokenizerMismatchError", "Tokenizer", "train_sentencepiece", "train_sentencepiece_bytes",
    "read_documents", "tokens_per_character", "tokens_per_byte", "compare_tokenizers",
    "workbook_tokenizer", "LOSSLESS_OPTIONS", "SPECIAL_IDS", "WORKBOOK_VOCAB_SIZE",
    "WordCache", "WORD_CACHE_MAX_WORDS",
]

#: Special ids of every model trained by :func:`train_sentencepiece` (unless overridden).
SPECIAL_IDS: dict[str, int] = {"pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3}

#: Options that make a SentencePiece model lossless on any text; see the module docstring.
#: ``num_threads`` is fixed (not the machine's core count): it is recorded in the model proto,
#: so it is part of the fingerprint, and unigram training picks different pieces with a
#: different thread count (checked with sentencepiece 0.2.3).
LOSSLESS_OPTIONS: dict[str, object] = {
    "normalization_rule_name": "identity",  # no NFKC: ｆ stays ｆ, tabs stay tabs
    "remove_extra_whitespaces": False,  # keep runs of spaces, leading/trailing spaces
    "add_dummy_prefix": False,  # no invented leading space
    "byte_fallback": True,  # unseen characters → their UTF-8 bytes, never <unk>
    "split_digits": True,  # 2024 → 2 0 2 4, as in Llama-style vocabularies
    "allow_whitespace_only_pieces": True,  # "▁▁▁▁" (code indentation) can be one piece
    "character_coverage": 0.9995,
    "max_sentence_length": 1 << 16,  # bytes; documents are cut below this, see _training_sentences
    "num_threads": 2,
    "minloglevel": 2,  # SentencePiece's own log goes to the process stderr; keep only errors
    **SPECIAL_IDS,
}

#: Vocabulary size of the workbook's standard tokenizer: trains in seconds on the shipped
#: corpora and stays far below 65,500, so chapter 2 stores tokens as uint16.
WORKBOOK_VOCAB_SIZE = 8000


_META = "\u2581"  # SentencePiece's whitespace symbol "▁"


def _a(noun: str) -> str:
    """'a str' / 'an int': the article for a type name in error messages."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"

#: Default bound of a :class:`WordCache`: past this many distinct words it is emptied and refilled.
WORD_CACHE_MAX_WORDS = 500_000
#: Longer words (base64, URLs, minified code) are encoded but not kept by a WordCache.
_MAX_CACHED_WORD_CHARS = 128
#: The words of :class:`WordCache`: a run of spaces with the non-spaces after it, or the
#: non-spaces at the start of the text.  Only " " (U+0020) separates: tabs and newlines are
#: part of words, like any other character.  A new word starts exactly where the normalized
#: text has a "▁" whose previous character is not "▁" (see Tokenizer.word_cache_problem).
_WORD_RE = re.compile(" +[^ ]*|[^ ]+")
_MAX_TRAIN_CHARS = 1 << 14  # a training "sentence" is at most this many characters (≤ 64 KiB UTF-8)
_RESERVED_OPTIONS = ("input", "model_prefix", "sentence_iterator", "model_writer", "vocab_size", "model_type")


class CorpusError(ValueError):
    """A training input is unusable (bad JSON, missing field, not UTF-8, no text)."""


class TokenizerMismatchError(ValueError):
    """Two tokenizers (or a tokenizer and a stored fingerprint) are not the same model."""


# ---------------------------------------------------------------------------------------------
# reading corpora
# ---------------------------------------------------------------------------------------------
def read_documents(path: PathLike, json_key: str = "text", limit: int | None = None) -> list[str]:
    """The documents of one corpus file, in file order.

    ``*.jsonl`` / ``*.json``: one JSON object per line, the document is ``obj[json_key]``
    (the layout Megatron's and NeMo's preprocessing read).  Any other file: one document
    per line, the line ending removed (the layout ``spm_train`` reads).  Blank lines are
    skipped.  ``limit`` stops after that many documents.

    Raises FileNotFoundError for a missing file and :class:`CorpusError` naming
    ``file:line`` for a line that is not UTF-8, not JSON, or lacks ``json_key``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus file {str(path)!r} does not exist"
            + (" (it is a directory: pass the files inside it)" if path.is_dir() else "")
            + "; check the path, or use labsupport.data_file(name) for the shipped corpora"
        )
    is_json = path.suffix.lower() in (".jsonl", ".json")
    docs: list[str] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if limit is not None and len(docs) >= limit:
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = raw[exc.start:exc.start + 1].hex()
                raise CorpusError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{bad} at byte {exc.start} of the line); "
                    "re-encode the file as UTF-8 (e.g. `iconv -f cp949 -t utf-8 in > out`) or drop that line"
                ) from None
            if is_json:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CorpusError(f"{path}:{lineno}: not a JSON object ({exc.msg} at column {exc.colno}); "
                                      "each line of a .jsonl file must be one JSON object") from None
                if not isinstance(obj, dict) or json_key not in obj:
                    keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
                    raise CorpusError(f"{path}:{lineno}: no field {json_key!r} (found {keys}); "
                                      "pass json_key=... naming the text field")
                text = obj[json_key]
                if not isinstance(text, str):
                    raise CorpusError(f"{path}:{lineno}: field {json_key!r} is {_a(type(text).__name__)}, "
                                      "expected a string")
            else:
                text = line.rstrip("\r\n")
            if text:
                docs.append(text)
    return docs


def _as_paths(inputs: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ValueError("inputs is empty: pass at least one corpus file")
    return paths


def _training_sentences(docs: Iterable[str], max_chars: int = _MAX_TRAIN_CHARS) -> list[str]:
    """Documents cut at line ends into pieces of at most ``max_chars`` characters.

    SentencePiece silently skips "sentences" longer than ``max_sentence_length`` bytes; cutting
    keeps every document in training (a piece cannot span a cut, which costs nothing measurable).
    """
    out: list[str] = []
    for doc in docs:
        if len(doc) <= max_chars:
            out.append(doc)
            continue
        start = 0
        while start < len(doc):
            end = min(start + max_chars, len(doc))
            if end < len(doc):
                nl = doc.rfind("\n", start, end)
                if nl > start:
                    end = nl + 1
            out.append(doc[start:end])
            start = end
    return out


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
def train_sentencepiece_bytes(sentences: Sequence[str], vocab_size: int, model_type: str = "bpe",
                              *, seed: int = 0, source: str = "the training text", **options) -> bytes:
    """Train on in-memory ``sentences`` and return the serialized model proto (bytes).

    The building block of :func:`train_sentencepiece`; ``source`` names the data in errors.
    """
    if model_type not in ("bpe", "unigram", "char", "word"):
        raise ValueError(f"model_type must be 'bpe', 'unigram', 'char' or 'word', got {model_type!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size <= 0:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    reserved = sorted(set(options) & set(_RESERVED_OPTIONS))
    if reserved:
        raise ValueError(f"option(s) {reserved} are set by train_sentencepiece itself; remove them")
    sentences = [s for s in sentences if s]
    if not sentences:
        raise CorpusError(f"{source} contains no text: nothing to train a tokenizer on")
    opts = {**LOSSLESS_OPTIONS, **options}
    buf = io.BytesIO()
    spm.set_random_generator_seed(int(seed))
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(_training_sentences(sentences)),
                                       model_writer=buf, vocab_size=int(vocab_size),
                                       model_type=model_type, **opts)
    except RuntimeError as exc:
        msg = str(exc)
        high = re.search(r"Vocabulary size too high \((\d+)\).*?<= (\d+)", msg)
        low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
        if high:
            raise ValueError(
                f"vocab_size={vocab_size} is too large for {source}: a {model_type} model can hold at most "
                f"{high.group(2)} pieces from this text; use vocab_size <= {high.group(2)} or train on more text"
            ) from None
        if low:
            raise ValueError(
                f"vocab_size={vocab_size} is too small for {source}: the special pieces, byte-fallback "
                f"pieces and required characters alone need {low.group(2)}; use vocab_size >= {low.group(2)}"
            ) from None
        field = re.search(r'unknown field name "([^"]+)"', msg)
        if field:
            raise ValueError(f"unknown SentencePiece option {field.group(1)!r}; see "
                             "https://github.com/google/sentencepiece/blob/master/doc/options.md") from None
        raise
    return buf.getvalue()


def train_sentencepiece(inputs: PathLike | Iterable[PathLike], model_prefix: PathLike, vocab_size: int,
                        model_type: str = "bpe", json_key: str = "text", *, seed: int = 0,
                        **options) -> Path:
    """Train a SentencePiece model on ``inputs`` and write ``<model_prefix>.model``; return its path.

    ``inputs``: one path or several (``.jsonl`` read with ``json_key``, other files one document
    per line, see :func:`read_documents`).  ``vocab_size``: number of pieces, special and byte
    pieces included.  ``options`` override :data:`LOSSLESS_OPTIONS` (any SentencePiece trainer
    option, e.g. ``character_coverage=1.0`` or ``user_defined_symbols=["<tab>"]``).

    Deterministic: the same inputs, vocab_size, options and ``seed`` give byte-identical model
    files (the model records no input paths: training reads from memory).  The file is written
    to a temporary name and renamed.

    Raises FileNotFoundError (missing input), :class:`CorpusError` (not UTF-8 / bad JSON /
    missing field, with file and line; no text at all) and ValueError (vocab_size too large or
    too small for the corpus, unknown option).
    """
    paths = _as_paths(inputs)
    docs: list[str] = []
    for p in paths:
        docs.extend(read_documents(p, json_key=json_key))
    names = ", ".join(str(p) for p in paths)
    if not docs:
        raise CorpusError(f"no text in {names} (json_key={json_key!r}): every document is empty or "
                          "the files are empty; check the files and the json_key")
    proto = train_sentencepiece_bytes(docs, vocab_size, model_type, seed=seed, source=names, **options)
    out = Path(f"{os.fspath(model_prefix)}.model")
    atomic_write(out, proto)
    return out


# ---------------------------------------------------------------------------------------------
# the tokenizer
# ---------------------------------------------------------------------------------------------
class Tokenizer:
    """A SentencePiece model: encode/decode, special ids and a fingerprint.

    ``Tokenizer(path)`` loads any SentencePiece ``.model`` (also one trained elsewhere).
    ``encode`` adds no BOS/EOS: special ids are added explicitly by whoever needs them
    (chapter 2 appends ``eod`` per document).  Ids are Python ints in ``0..vocab_size-1``.
    """

    def __init__(self, model_path: PathLike):
        path = Path(model_path)
        self._in_memory = False
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer model {str(path)!r} does not exist; train one with "
                "labsupport.datasets.tokenizer.train_sentencepiece(...) or use labsupport.datasets.tokenizer.workbook_tokenizer()"
            )
        self._init(path.read_bytes(), path)

    @classmethod
    def from_bytes(cls, proto: bytes, name: str = "<in memory>") -> "Tokenizer":
        """A tokenizer from a serialized model proto (as written to a ``.model`` file)."""
        tok = cls.__new__(cls)
        tok._in_memory = True
        tok._init(bytes(proto), Path(name))
        return tok

    def _init(self, proto: bytes, path: Path) -> None:
        sp = spm.SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"{path} is not a SentencePiece model ({exc}); "
                             "pass the .model file written by spm_train / train_sentencepiece") from None
        self.path = path
        self._sp = sp
        self._proto = sp.serialized_model_proto()
        self._fingerprint = hashlib.sha256(self._proto).hexdigest()
        # Literal "▁" in the text would decode as a space; models without a dummy prefix and
        # with byte pieces can encode it as its three UTF-8 bytes instead (see encode()).
        self._meta_bytes = [sp.piece_to_id(f"<0x{b:02X}>") for b in _META.encode("utf-8")]
        has_bytes = all(i != sp.unk_id() and sp.is_byte(i) for i in self._meta_bytes)
        no_prefix = not sp.encode("a", out_type=str)[0].startswith(_META)
        self._escape_meta = has_bytes and no_prefix
        self._word_problem: str | None = None
        self._word_checked = False

    # pickling (multiprocessing workers in chapter 2): ship the proto, not the C++ object
    def __reduce__(self):
        return (_tokenizer_from_state, (self._proto, str(self.path), self._in_memory))

    def __repr__(self) -> str:
        from labsupport.paths import display_path

        where = self.path.name if self._in_memory else display_path(self.path)
        return (f"Tokenizer({where}, vocab_size={self.vocab_size}, "
                f"fingerprint={self.fingerprint[:12]}…)")

    # -- identity ---------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of the serialized model proto: same model ⇔ same fingerprint, whatever the path.

        The proto holds the pieces, scores, normaliser *and* the recorded training settings, so
        models with identical pieces but different recorded settings (e.g. two ``spm_train`` runs
        on differently named input files) get different fingerprints: the guard may raise a false
        alarm, never miss a real difference.  :func:`train_sentencepiece` records no paths.
        """
        return self._fingerprint

    def assert_same(self, other: "Tokenizer | str", what: str = "") -> None:
        """Raise :class:`TokenizerMismatchError` unless ``other`` is the same model.

        ``other`` is a Tokenizer or a fingerprint string (e.g. one stored beside a dataset);
        ``what`` names it in the message (e.g. ``"the tokenizer of data/web_text_document"``).
        """
        if isinstance(other, Tokenizer):
            theirs = other.fingerprint
            label = what or f"tokenizer {other.path.name}"
        elif isinstance(other, str):
            theirs = other.strip().lower().removeprefix("sha256:")
            label = what or "the stored fingerprint"
        else:
            raise TypeError(f"assert_same expects a Tokenizer or a fingerprint string, got {type(other).__name__}")
        if theirs != self.fingerprint:
            raise TokenizerMismatchError(
                f"tokenizer mismatch: {self.path.name} has fingerprint {self.fingerprint} but {label} has "
                f"{theirs}. Token ids made by one tokenizer decode to garbage with the other: preprocess, "
                "train and serve with the same .model file (or re-preprocess the data with this one)."
            )

    # -- vocabulary and special ids ----------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of pieces (ids are 0..vocab_size-1)."""
        return self._sp.get_piece_size()

    @property
    def dtype(self) -> np.dtype:
        """The dtype chapter 2 stores this tokenizer's ids in: Megatron's rule,
        :func:`labsupport.datasets.indexed.optimal_dtype` (uint16 below 65,500 ids, else int32)."""
        from labsupport.datasets.indexed import optimal_dtype
        return np.dtype(optimal_dtype(self.vocab_size))

    @property
    def bos(self) -> int:
        """Beginning-of-sequence id (-1 when the model defines none)."""
        return self._sp.bos_id()

    @property
    def eos(self) -> int:
        """End-of-sequence id (-1 when the model defines none)."""
        return self._sp.eos_id()

    @property
    def pad(self) -> int:
        """Padding id (-1 when the model defines none; SentencePiece's default)."""
        return self._sp.pad_id()

    @property
    def unk(self) -> int:
        """Unknown-piece id (never produced for text when the model has byte fallback)."""
        return self._sp.unk_id()

    @property
    def eod(self) -> int:
        """End-of-document id: the id of a piece named ``<eod>`` if the model has one, else the EOS id.

        (Define it at training time with ``control_symbols=["<eod>"]``.)

        Raises ValueError for a model with neither (``--append-eod`` would be impossible).
        """
        i = self._sp.piece_to_id("<eod>")
        if i != self._sp.unk_id() and self._sp.id_to_piece(i) == "<eod>":
            return i
        if self.eos >= 0:
            return self.eos
        raise ValueError(f"{self.path.name} defines neither an <eod> piece nor an EOS id; "
                         "retrain it with eos_id set (train_sentencepiece does this by default)")

    def special_ids(self) -> dict[str, int]:
        """``{"pad":…, "unk":…, "bos":…, "eos":…, "eod":…}`` (-1 = not defined)."""
        try:
            eod = self.eod
        except ValueError:
            eod = -1
        return {"pad": self.pad, "unk": self.unk, "bos": self.bos, "eos": self.eos, "eod": eod}

    def id_to_piece(self, token_id: int) -> str:
        """The piece string of one id (``"▁"`` stands for a space, ``<0xE2>`` for a raw byte)."""
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside 0..{self.vocab_size - 1}")
        return self._sp.id_to_piece(token_id)

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece string (the unk id when the piece is not in the vocabulary)."""
        return self._sp.piece_to_id(piece)

    def is_byte(self, token_id: int) -> bool:
        """True for the 256 byte-fallback pieces ``<0x00>..<0xFF>``."""
        return bool(self._sp.is_byte(int(token_id)))

    # -- encode / decode ---------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added).

        Lossless (``decode(encode(text)) == text``) for models trained with :data:`LOSSLESS_OPTIONS`;
        a literal "▁" is encoded as its UTF-8 bytes so it does not come back as a space.  A model
        trained elsewhere is only as lossless as its own settings (NFKC normalisation, squeezed
        spaces or a missing byte fallback change the text).
        """
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        if self._escape_meta and _META in text:
            return self._encode_with_meta(text)
        return self._sp.encode(text)

    def _encode_with_meta(self, text: str) -> list[int]:
        ids: list[int] = []
        parts = text.split(_META)
        for k, part in enumerate(parts):
            if k:
                ids.extend(self._meta_bytes)
            if part:
                ids.extend(self._sp.encode(part))
        return ids

    def encode_batch(self, texts: Sequence[str], num_threads: int | None = None) -> list[list[int]]:
        """``[encode(t) for t in texts]`` in one call, tokenized by ``num_threads`` C++ threads.

        ``num_threads`` defaults to the machine's CPU count.  The result does not depend on it.
        """
        texts = list(texts)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"encode_batch expects strings; texts[{bad}] is {_a(type(texts[bad]).__name__)}")
        n = int(num_threads) if num_threads is not None else (os.cpu_count() or 1)
        if n < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        out = self._sp.encode(texts, num_threads=n)
        if self._escape_meta:
            for i, t in enumerate(texts):
                if _META in t:
                    out[i] = self._encode_with_meta(t)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` (a list, numpy array or 1-D tensor of ints).

        Control ids (pad/bos/eos) decode to nothing; raises ValueError for ids outside the vocabulary.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = [int(i) for i in ids]
        n = self.vocab_size
        bad = next((i for i in ids if not 0 <= i < n), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside this tokenizer's vocabulary 0..{n - 1} "
                             f"({self.path.name}); were these ids made by another tokenizer?")
        return self._sp.decode(ids)

    def pieces(self, text_or_ids: str | Iterable[int]) -> list[str]:
        """The piece strings of a text or of ids, for display."""
        ids = self.encode(text_or_ids) if isinstance(text_or_ids, str) else list(text_or_ids)
        return [self.id_to_piece(i) for i in ids]

    # -- word-level caching ------------------------------------------------------------------
    def word_cache_problem(self) -> str | None:
        """None when encoding word by word gives exactly :meth:`encode`'s ids; else the reason why not.

        Words are cut before every space that follows a non-space (``"a  b\\tc d "`` →
        ``"a"``, ``"  b\\tc"``, ``" d"``, ``" "``).  SentencePiece's BPE encoder runs one merge
        loop over the whole normalized text, so cutting it changes nothing exactly when no
        piece can ever straddle a cut and nothing else looks across one.  Checked here from
        the model proto: a BPE model; identity normalization (no charsmap), no dummy prefix,
        extra whitespace kept, spaces escaped as "▁", whitespace not a suffix,
        whitespace-only pieces allowed, byte fallback (so no run of ``<unk>`` is merged across
        a cut); no piece of any type with "▁" after another character (such a piece is the
        only way a merge or a user-defined symbol could span a cut) and no UNUSED piece (their
        re-splitting table is shared by the whole text).  Then a few probe texts are encoded
        both ways, a guard against a SentencePiece version whose algorithm differs.
        The workbook's models (:data:`LOSSLESS_OPTIONS`, BPE) qualify; unigram models do not.
        """
        if not self._word_checked:
            self._word_problem = _word_level_problem(self)
            self._word_checked = True
        return self._word_problem

    def word_cache(self, dtype=None, max_words: int = WORD_CACHE_MAX_WORDS) -> "WordCache":
        """A new, empty :class:`WordCache` for this tokenizer."""
        return WordCache(self, dtype=dtype, max_words=max_words)


def _tokenizer_from_state(proto: bytes, name: str, in_memory: bool = False) -> Tokenizer:
    tok = Tokenizer.from_bytes(proto, name)
    tok._in_memory = in_memory
    return tok


# ---------------------------------------------------------------------------------------------
# word-level cache
# ---------------------------------------------------------------------------------------------
def _proto_fields(buf, wanted: frozenset | None = None) -> list[tuple[int, object]]:
    """``(field number, value)`` of one serialized protobuf message (wire format only).

    Varints come back as ints, length-delimited fields as bytes, fixed32/fixed64 as bytes;
    with ``wanted`` only those field numbers are returned (the others are skipped unread).
    Enough for reading a SentencePiece ModelProto without the ``protobuf`` package.
    """
    buf = memoryview(buf)
    out: list[tuple[int, object]] = []
    i, n = 0, len(buf)

    def varint() -> int:
        nonlocal i
        shift = result = 0
        while True:
            if i >= n:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    while i < n:
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value: object = varint()
        elif wire == 2:
            length = varint()
            if i + length > n:
                raise ValueError("truncated field")
            value = buf[i:i + length]
            i += length
        elif wire in (1, 5):
            value = buf[i:i + (8 if wire == 1 else 4)]
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if wanted is None or field in wanted:
            out.append((field, bytes(value) if isinstance(value, memoryview) else value))
    return out


# TrainerSpec / NormalizerSpec field numbers (sentencepiece_model.proto: ModelProto.trainer_spec
# is field 2, normalizer_spec field 3) and the proto2 defaults of the fields read here.
_MODEL_BPE = 2
_TRAINER_FIELDS = {3: ("model_type", 1), 24: ("treat_whitespace_as_suffix", 0),
                   26: ("allow_whitespace_only_pieces", 0), 35: ("byte_fallback", 0)}
_NORMALIZER_FIELDS = {2: ("precompiled_charsmap", b""), 3: ("add_dummy_prefix", 1),
                      4: ("remove_extra_whitespaces", 1), 5: ("escape_whitespaces", 1)}
#: A piece that could span a word boundary: "▁" after another character (or a raw space).
_STRADDLE_RE = re.compile("[^\u2581\x00]\u2581| ")

#: Texts encoded whole and word by word by the self-check of Tokenizer.word_cache_problem.
_WORD_PROBES = (
    "", " ", "   ", "a", "a ", " a", "a  b", "  leading and trailing  ", "x = 1  # comment\n",
    "def f(x):\n    if x:\n        return  x\n\treturn None\n", "\t\ttabs\t and\n\n  newlines \n",
    "many      spaces   between    words", "한국어 토크나이저는  어휘를 다룬다.", "이모지 😀 👨‍👩‍👧 🇰🇷 ok",
    "numbers 1234567890  3.14159 -42", "<s> </s> <unk> text", "\x00 \x01\x7f \u00a0\u3000 end",
)
#: fingerprint → result of _word_level_problem (forked workers inherit it from the parent)
_WORD_PROBLEMS: dict[str, str | None] = {}


def _word_level_problem(tok: "Tokenizer") -> str | None:
    if tok.fingerprint not in _WORD_PROBLEMS:
        _WORD_PROBLEMS[tok.fingerprint] = _check_word_level(tok)
    return _WORD_PROBLEMS[tok.fingerprint]


def _check_word_level(tok: "Tokenizer") -> str | None:
    sp = tok._sp
    trainer = {name: default for name, default in _TRAINER_FIELDS.values()}
    normalizer = {name: default for name, default in _NORMALIZER_FIELDS.values()}
    try:
        for field, value in _proto_fields(tok._proto, frozenset((2, 3))):
            names, target = (_TRAINER_FIELDS, trainer) if field == 2 else (_NORMALIZER_FIELDS, normalizer)
            for f, v in _proto_fields(value, frozenset(names)):
                target[names[f][0]] = v
    except ValueError as exc:
        return f"the model proto could not be read ({exc})"
    if trainer["model_type"] != _MODEL_BPE:
        return "not a BPE model (a unigram model segments the whole text at once)"
    wanted = {"precompiled_charsmap": (normalizer["precompiled_charsmap"], b"", "a normalization rule"),
              "add_dummy_prefix": (normalizer["add_dummy_prefix"], 0, "add_dummy_prefix"),
              "remove_extra_whitespaces": (normalizer["remove_extra_whitespaces"], 0,
                                           "remove_extra_whitespaces"),
              "escape_whitespaces": (normalizer["escape_whitespaces"], 1, "escape_whitespaces off"),
              "treat_whitespace_as_suffix": (trainer["treat_whitespace_as_suffix"], 0,
                                             "treat_whitespace_as_suffix"),
              "allow_whitespace_only_pieces": (trainer["allow_whitespace_only_pieces"], 1,
                                               "allow_whitespace_only_pieces off"),
              "byte_fallback": (trainer["byte_fallback"], 1, "no byte_fallback")}
    for have, want, label in wanted.values():
        if have != want:
            return f"the model has {label}"
    n = sp.get_piece_size()
    unused = next((i for i in range(n) if sp.is_unused(i)), None)
    if unused is not None:
        return f"the model has UNUSED pieces (e.g. {sp.id_to_piece(unused)!r})"
    pieces = "\x00".join(sp.id_to_piece(i) for i in range(n))  # pieces never contain NUL
    straddle = _STRADDLE_RE.search(pieces)
    if straddle:
        a, b = pieces.rfind("\x00", 0, straddle.start()) + 1, pieces.find("\x00", straddle.end())
        return f"the piece {pieces[a:b if b >= 0 else None]!r} could span a word boundary"
    for text in _WORD_PROBES:
        words = _WORD_RE.findall(text)
        by_word = [i for ids in sp.encode(words, num_threads=1) for i in ids]
        if "".join(words) != text or by_word != sp.encode(text):
            return f"self-check failed: {text!r} encodes differently word by word"
    return None


class WordCache:
    """:meth:`Tokenizer.encode` with a word → ids cache: a word seen before skips BPE.

    Each text is cut into words (a run of spaces plus the non-spaces after it; see
    :meth:`Tokenizer.word_cache_problem`); the words not in the cache are encoded in one
    SentencePiece call and stored as packed ``dtype`` bytes; a text's ids are then the
    concatenation of its words' bytes.  The ids are exactly ``Tokenizer.encode(text)``'s:
    texts containing a literal "▁" go through ``encode`` itself, and for a model that does not
    qualify (``exact`` is False: unigram, other normalization, …) every text does.

    ``dtype``: the integer dtype of the packed ids (default ``tokenizer.dtype``: uint16 below
    65,500 pieces).  ``max_words``: when a batch would take the cache past this many words it is
    emptied first; words longer than 128 characters are never kept, so memory stays bounded
    (~150 bytes a typical word: tens of MB for the default 500,000).  ``num_threads``:
    SentencePiece threads for the words it encodes.  ``words``/``misses`` count the words looked
    up and those that had to be encoded (once per batch).  Not thread-safe; one per process (it
    is not shared, so a pickled copy starts empty).
    """

    def __init__(self, tokenizer: Tokenizer, dtype=None, max_words: int = WORD_CACHE_MAX_WORDS,
                 num_threads: int = 1):
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"WordCache needs a Tokenizer, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self.dtype = np.dtype(tokenizer.dtype if dtype is None else dtype)
        if self.dtype.kind not in "iu" or np.iinfo(self.dtype).max < tokenizer.vocab_size - 1:
            raise ValueError(f"dtype {self.dtype} cannot hold ids up to {tokenizer.vocab_size - 1}")
        if int(max_words) < 1:
            raise ValueError(f"max_words must be >= 1, got {max_words}")
        self.max_words = int(max_words)
        self.num_threads = int(num_threads)
        self.problem = tokenizer.word_cache_problem()
        self.exact = self.problem is None
        self.words = self.misses = self.clears = 0
        self._cache: dict[str, bytes] = {}

    def __reduce__(self):
        return (WordCache, (self.tokenizer, self.dtype, self.max_words, self.num_threads))

    def __len__(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        state = "exact" if self.exact else f"off: {self.problem}"
        return f"WordCache({len(self)} words, dtype={self.dtype}, {state})"

    def clear(self) -> None:
        """Forget every cached word (the counters are kept)."""
        self._cache.clear()

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
            raise TypeError(f"encode_flat expects strings; texts[{bad}] is {_a(type(texts[bad]).__name__)}")
        if append is not None and not 0 <= int(append) < self.tokenizer.vocab_size:
            raise ValueError(f"append id {append} is outside 0..{self.tokenizer.vocab_size - 1}")
        if not self.exact:
            return self._plain(texts, append)
        findall = _WORD_RE.findall
        words = [findall(t) if _META not in t else None for t in texts]
        cache = self._cache
        new = set(itertools.chain.from_iterable(w for w in words if w is not None))
        self.words += sum(len(w) for w in words if w is not None)
        new.difference_update(cache)
        if new and len(cache) + len(new) > self.max_words:
            cache.clear()
            self.clears += 1
            new = set(itertools.chain.from_iterable(w for w in words if w is not None))
        if new:
            self.misses += len(new)
            new_words = list(new)
            try:
                encoded = self.tokenizer._sp.encode(new_words, num_threads=self.num_threads)
            except (TypeError, RuntimeError):
                # e.g. a lone surrogate from a JSON escape: fail exactly like encode_batch
                return self._plain(texts, append)
            sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            buf = np.fromiter(itertools.chain.from_iterable(encoded), dtype=self.dtype,
                              count=int(sizes.sum())).tobytes()
            ends = (np.cumsum(sizes) * self.dtype.itemsize).tolist()
            starts = [0] + ends[:-1]
            cache.update(zip(new_words, map(buf.__getitem__, map(slice, starts, ends))))
            too_long = [w for w in new_words if len(w) > _MAX_CACHED_WORD_CHARS]
        else:
            too_long = []
        get, join, itemsize = cache.__getitem__, b"".join, self.dtype.itemsize
        docs = []
        for t, w in zip(texts, words):
            if w is None:  # a literal "▁": encode() spells it as bytes
                docs.append(np.asarray(self.tokenizer.encode(t), dtype=self.dtype).tobytes())
            else:
                docs.append(join(map(get, w)))
        for w in too_long:  # used for this batch only
            del cache[w]
        lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs)) // itemsize
        if append is not None:
            tail = np.asarray([append], dtype=self.dtype).tobytes()
            docs = [d + tail if d else d for d in docs]
            lens += lens > 0
        return np.frombuffer(join(docs), dtype=self.dtype), lens

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


# ---------------------------------------------------------------------------------------------
# measuring and comparing
# ---------------------------------------------------------------------------------------------
def tokens_per_character(tok: Tokenizer, texts: Sequence[str]) -> float:
    """Total tokens / total characters (Unicode code points) over ``texts``, each encoded alone."""
    texts = list(texts)
    chars = sum(len(t) for t in texts)
    if chars == 0:
        raise ValueError("texts contain no characters: tokens per character is undefined")
    return sum(len(ids) for ids in tok.encode_batch(texts)) / chars


def tokens_per_byte(tok: Tokenizer, texts: Sequence[str]) -> float:
    """Total tokens / total UTF-8 bytes over ``texts``, each encoded alone."""
    texts = list(texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    if nbytes == 0:
        raise ValueError("texts contain no bytes: tokens per byte is undefined")
    return sum(len(ids) for ids in tok.encode_batch(texts)) / nbytes


def compare_tokenizers(train_tok: Tokenizer, serve_tok: Tokenizer, probe_texts: Sequence[str]) -> dict:
    """Diagnose a preprocessing/serving tokenizer mismatch (book exercise 4).

    Returns a dict:

    * ``same_fingerprint`` — bool, the decisive test;
    * ``vocab_sizes`` — ``(train, serve)``;
    * ``special_ids_differ`` — sorted names among pad/unk/bos/eos/eod whose ids differ;
    * ``id_agreement`` — fraction of probe texts encoded to identical ids by both;
    * ``garbled`` — ``serve_tok.decode(train_tok.encode(t))`` for the first probe text where
      that is not ``t`` (what the served model's output looks like), else None;
    * ``verdict`` — ``"same"`` or ``"mismatch"`` (from the fingerprints).

    Ids the serving tokenizer cannot decode (outside its vocabulary) appear as ``"�"``.
    """
    texts = list(probe_texts)
    if not texts:
        raise ValueError("probe_texts is empty: pass a few sample texts")
    a_ids = train_tok.encode_batch(texts)
    b_ids = serve_tok.encode_batch(texts)
    sa, sb = train_tok.special_ids(), serve_tok.special_ids()
    garbled = None
    for t, ids in zip(texts, a_ids):
        shown = _decode_lenient(serve_tok, ids)
        if shown != t:
            garbled = shown
            break
    same = train_tok.fingerprint == serve_tok.fingerprint
    return {
        "same_fingerprint": same,
        "vocab_sizes": (train_tok.vocab_size, serve_tok.vocab_size),
        "special_ids_differ": sorted(k for k in sa if sa[k] != sb[k]),
        "id_agreement": sum(x == y for x, y in zip(a_ids, b_ids)) / len(texts),
        "garbled": garbled,
        "verdict": "same" if same else "mismatch",
    }


def _decode_lenient(tok: Tokenizer, ids: Sequence[int]) -> str:
    """decode(), with ids outside the vocabulary shown as U+FFFD instead of raising."""
    out, run = [], []
    for i in ids:
        if 0 <= i < tok.vocab_size:
            run.append(i)
        else:
            out.append(tok.decode(run))
            out.append("\ufffd")
            run = []
    out.append(tok.decode(run))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# the workbook's standard tokenizer
# ---------------------------------------------------------------------------------------------
def workbook_tokenizer(vocab_size: int = WORKBOOK_VOCAB_SIZE, model_type: str = "bpe") -> Path:
    """Path of the workbook's standard SentencePiece model, training it if it is missing.

    Trained deterministically (seed 0, :data:`LOSSLESS_OPTIONS`) on the four domain corpora
    ``web``, ``code``, ``books``, ``korean``.  Cached in ``work_dir("tokenizer")`` under a name
    that includes a hash of the recipe and of the corpora, so a changed corpus gives a new
    model.  Safe when several processes call it at once (temporary name + rename; all write
    identical bytes) and prints nothing.
    """
    from labsupport.paths import DOMAINS, data_file, work_dir

    files = [data_file(d) for d in DOMAINS]
    recipe = hashlib.sha256()
    recipe.update(json.dumps({"vocab_size": vocab_size, "model_type": model_type, "seed": 0,
                              "options": LOSSLESS_OPTIONS, "chunk": _MAX_TRAIN_CHARS,
                              "sentencepiece": spm.__version__}, sort_keys=True).encode())
    for f in files:
        recipe.update(f.name.encode())
        recipe.update(hashlib.sha256(f.read_bytes()).digest())
    out = work_dir("tokenizer") / f"workbook_{model_type}{vocab_size}_{recipe.hexdigest()[:12]}.model"
    if out.is_file():
        return out
    return train_sentencepiece(files, out.with_suffix(""), vocab_size, model_type, seed=0)
