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
The speed path of chapter 2's preprocessing lives in a module of its own beside this one,
:mod:`labsupport.datasets.word_cache` (``WordCache(tok)``: ``encode`` with a word-level cache,
proven per model by ``word_cache_problem(tok)`` to give the same ids for SentencePiece BPE models);
it imports this module, never the other way round.

Special ids of the models trained here: ``pad=0, unk=1, bos=2, eos=3``.  **eod** (the end of
document token that ``--append-eod`` appends in chapter 2) is the id of a piece named ``<eod>``
when a model has one (e.g. trained with ``control_symbols=["<eod>"]``), else the EOS id.  The
workbook's models have none, so eod == eos — the same choice as Megatron-Core's
``SentencePieceTokenizer.eod`` and NeMo's ``preprocess_data_for_megatron.py --append-eod`` (both
use the EOS id).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from labsupport.fileio import PathLike, atomic_write
from labsupport.paths import DOMAINS, data_file, display_path, shown_path, work_dir
from labsupport.datasets.indexed import optimal_dtype
from labsupport.datasets.utils import DataError


__all__ = [
    "CorpusError", "TokenizerMismatchError", "Tokenizer", "train_sentencepiece", "train_sentencepiece_bytes",
    "read_documents", "tokens_per_character", "tokens_per_byte", "compare_tokenizers",
    "workbook_tokenizer", "LOSSLESS_OPTIONS", "SPECIAL_IDS", "WORKBOOK_VOCAB_SIZE",
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


META_SYMBOL = "\u2581"  # SentencePiece's whitespace symbol "▁"


def with_article(noun: str) -> str:
    """'a str' / 'an int': a type name with its article, for error messages."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"

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
                    raise CorpusError(f"{path}:{lineno}: field {json_key!r} is {with_article(type(text).__name__)}, "
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
    :class:`labsupport.datasets.hf_tokenizer.HFTokenizer` is the same interface for a Hugging Face tokenizer.
    """

    library = "sentencepiece"

    def __init__(self, model_path: PathLike):
        path = Path(model_path)
        self._in_memory = False
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer model {str(path)!r} does not exist; train one with "
                "labsupport.datasets.tokenizer.train_sentencepiece(...) or use "
                "labsupport.datasets.tokenizer.workbook_tokenizer()"
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
            why = str(exc).split("] ")[-1].strip() or "unreadable"     # not sentencepiece's source line
            raise DataError(f"{shown_path(path)} is not a SentencePiece model ({why}); "
                            "pass the .model file written by spm_train / train_sentencepiece") from None
        self.path = path
        self._sp = sp
        self._proto = sp.serialized_model_proto()
        self._fingerprint = hashlib.sha256(self._proto).hexdigest()
        # Literal "▁" in the text would decode as a space; models without a dummy prefix and
        # with byte pieces can encode it as its three UTF-8 bytes instead (see encode()).
        self._meta_bytes = [sp.piece_to_id(f"<0x{b:02X}>") for b in META_SYMBOL.encode("utf-8")]
        has_bytes = all(i != sp.unk_id() and sp.is_byte(i) for i in self._meta_bytes)
        no_prefix = not sp.encode("a", out_type=str)[0].startswith(META_SYMBOL)
        self._escape_meta = has_bytes and no_prefix

    # pickling (multiprocessing workers in chapter 2): ship the proto, not the C++ object
    def __reduce__(self):
        return (_tokenizer_from_state, (self._proto, str(self.path), self._in_memory))

    def __repr__(self) -> str:

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
        if self._escape_meta and META_SYMBOL in text:
            return self._encode_with_meta(text)
        return self._sp.encode(text)

    def _encode_with_meta(self, text: str) -> list[int]:
        ids: list[int] = []
        parts = text.split(META_SYMBOL)
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
            raise TypeError(f"encode_batch expects strings; texts[{bad}] is {with_article(type(texts[bad]).__name__)}")
        n = int(num_threads) if num_threads is not None else (os.cpu_count() or 1)
        if n < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        out = self._sp.encode(texts, num_threads=n)
        if self._escape_meta:
            for i, t in enumerate(texts):
                if META_SYMBOL in t:
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


def _tokenizer_from_state(proto: bytes, name: str, in_memory: bool = False) -> Tokenizer:
    tok = Tokenizer.from_bytes(proto, name)
    tok._in_memory = in_memory
    return tok


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
        shown = decode_lenient(serve_tok, ids)
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


def decode_lenient(tok: Tokenizer, ids: Sequence[int]) -> str:
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
