"""Hugging Face tokenizers for the workbook — chapter 1 (a second tokenizer family) and chapter 2.

Most current models ship a Hugging Face ``tokenizer.json`` rather than a SentencePiece ``.model``.
This module gives that family the same interface as :class:`labsupport.datasets.tokenizer.Tokenizer`,
so chapter 2's preprocessing (and everything after it) takes either:

* :func:`train_byte_level_bpe` — a byte-level BPE (GPT-2's scheme: every byte is a symbol, so
  nothing is ever unknown and decoding is lossless) trained with the ``tokenizers`` package, and
  saved as a Hugging Face tokenizer folder: ``tokenizer.json`` (the model) and
  ``tokenizer_config.json`` (which special token is EOS, …).  That folder is what
  ``transformers.AutoTokenizer.from_pretrained(folder)`` and Megatron's
  ``--tokenizer-type HuggingFaceTokenizer --tokenizer-model folder`` load.
* :class:`HFTokenizer` — a folder (or a ``tokenizer.json``) with ``encode``, ``encode_batch``,
  ``decode``, the special ids and a **fingerprint** (sha256 of the canonical ``tokenizer.json``
  and the EOS token), the guard chapter 2 stores beside every ``.bin``/``.idx``.
* :func:`workbook_hf_tokenizer` — the workbook's byte-level BPE, trained once on the four domain
  corpora and cached in ``work_dir("tokenizer")``.

``encode`` adds no special token, like megatron-core's ``HuggingFaceTokenizer.text_to_ids`` with
``include_special_tokens=False`` (the default of core_v0.16.1; core_v0.19.0 turned it on, which
only differs for a tokenizer whose post-processor adds tokens, e.g. a BOS — this one has none).
As in Megatron, the text of a special token inside a document (``"<|endoftext|>"``) *is* read as
that token: ``tokenizers`` matches added tokens in raw text.  ``eod`` is the EOS token's id.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from labsupport.datasets.indexed import optimal_dtype
from labsupport.datasets.tokenizer import TokenizerMismatchError, read_documents
from labsupport.datasets.utils import DataError
from labsupport.fileio import PathLike, atomic_write
from labsupport.paths import DOMAINS, data_file, display_path, shown_path, work_dir

__all__ = ["HF_SPECIAL_TOKENS", "HFTokenizer", "train_byte_level_bpe", "workbook_hf_tokenizer",
           "is_hf_tokenizer_path", "WORKBOOK_HF_VOCAB_SIZE"]

#: The special tokens of the models trained here, in id order (0, 1, 2, …), and their roles.
HF_SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "<|pad|>", "bos_token": "<|bos|>", "eos_token": "<|endoftext|>",
    "im_start": "<|im_start|>", "im_end": "<|im_end|>",
}
#: Vocabulary size of the workbook's byte-level BPE (256 bytes + special tokens + merges).
WORKBOOK_HF_VOCAB_SIZE = 4000
_CONFIG_KEYS = ("pad_token", "bos_token", "eos_token")


def _tokenizers():
    try:
        import tokenizers  # noqa: PLC0415 - imported where used: chapters without HF tokenizers never load it
    except ImportError:
        raise ImportError("the `tokenizers` package is missing: run `make setup` (or "
                          "`.venv/bin/python -m pip install tokenizers`)") from None
    return tokenizers


def is_hf_tokenizer_path(path: PathLike) -> bool:
    """True for a Hugging Face tokenizer folder (holding ``tokenizer.json``) or a ``.json`` file."""
    p = Path(path)
    return (p.is_dir() and (p / "tokenizer.json").is_file()) or p.suffix == ".json"


def train_byte_level_bpe(texts: Iterable[str], out_dir: PathLike, vocab_size: int,
                         min_frequency: int = 2) -> Path:
    """Train a byte-level BPE of ``vocab_size`` ids (special tokens and 256 bytes included) on ``texts``
    and save it as a Hugging Face tokenizer folder ``out_dir``; returns ``out_dir``.

    Deterministic: the same texts give the same ``tokenizer.json`` (the merges are picked by count,
    ties by the pair's order, whatever the thread count).  Written atomically, file by file.
    """
    tk = _tokenizers()
    specials = list(HF_SPECIAL_TOKENS.values())
    if int(vocab_size) < 256 + len(specials):
        raise ValueError(f"vocab_size {vocab_size}: a byte-level BPE needs at least {256 + len(specials)} "
                         f"ids (256 bytes + {len(specials)} special tokens)")
    model = tk.Tokenizer(tk.models.BPE())
    model.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)   # GPT-2's split, no space added
    model.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=int(vocab_size), min_frequency=min_frequency,
                                     special_tokens=specials, show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    model.train_from_iterator(texts, trainer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "model_max_length": 1_000_000, **{k: HF_SPECIAL_TOKENS[k] for k in _CONFIG_KEYS}}
    atomic_write(out / "tokenizer.json", model.to_str(pretty=True).encode("utf-8"))
    atomic_write(out / "tokenizer_config.json", (json.dumps(config, indent=2) + "\n").encode("utf-8"))
    return out


class HFTokenizer:
    """A Hugging Face tokenizer (``tokenizer.json`` + optional ``tokenizer_config.json``) with the
    interface of :class:`~labsupport.datasets.tokenizer.Tokenizer`.  Ids are ints in ``0..vocab_size-1``."""

    library = "huggingface"

    def __init__(self, path: PathLike):
        p = Path(path)
        folder = p if p.is_dir() else p.parent
        model_file = p / "tokenizer.json" if p.is_dir() else p
        if not model_file.is_file():
            raise FileNotFoundError(f"tokenizer {shown_path(p)!r} has no tokenizer.json; pass a Hugging Face "
                                    "tokenizer folder or its tokenizer.json")
        config_file = folder / "tokenizer_config.json"
        config = {}
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text(encoding="utf-8"))
            except ValueError as exc:       # UnicodeDecodeError too
                raise DataError(f"{shown_path(config_file)} is not JSON ({exc}); fix or remove it") from None
            if not isinstance(config, dict):
                raise DataError(f"{shown_path(config_file)} holds a JSON {type(config).__name__}, not an object "
                                "of settings; fix or remove it")
        try:
            text = model_file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{shown_path(model_file)} is not UTF-8 text, so not a Hugging Face tokenizer.json "
                            "(a SentencePiece .model? then --tokenizer-library sentencepiece)") from None
        self._init(text, config, p)

    def _init(self, text: str, config: dict, path: Path) -> None:
        try:
            self._tk = _tokenizers().Tokenizer.from_str(text)
        except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception type for a bad file
            raise DataError(f"{shown_path(path)} is not a Hugging Face tokenizer ({exc}); pass the folder "
                            "written by train_byte_level_bpe or tokenizer.save_pretrained") from None
        self.path, self._config = path, dict(config)
        self._canonical = self._tk.to_str()
        tokens = {k: self._token_text(config.get(k)) for k in _CONFIG_KEYS}
        self._special = {k: (self._tk.token_to_id(t) if t is not None else None) for k, t in tokens.items()}
        self._eos_text = tokens["eos_token"]

    @staticmethod
    def _token_text(value) -> str | None:      # tokenizer_config.json writes "x" or {"content": "x", …}
        return value.get("content") if isinstance(value, dict) else value

    def __reduce__(self):   # multiprocessing workers: ship the JSON, not the Rust object
        return (_hf_from_state, (self._canonical, self._config, str(self.path)))

    def __repr__(self) -> str:
        return (f"HFTokenizer({display_path(self.path)}, vocab_size={self.vocab_size}, "
                f"fingerprint={self.fingerprint[:12]}…)")

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical ``tokenizer.json`` and the EOS token: same model ⇔ same fingerprint."""
        return hashlib.sha256(json.dumps([self._canonical, self._eos_text]).encode("utf-8")).hexdigest()

    def assert_same(self, other: "HFTokenizer | str", what: str = "") -> None:
        """Raise :class:`~labsupport.datasets.tokenizer.TokenizerMismatchError` unless ``other`` (a tokenizer
        of either family, or a fingerprint string) is this model; ``what`` names it in the message."""
        if isinstance(other, str):
            theirs, label = other.strip().lower().removeprefix("sha256:"), what or "the stored fingerprint"
        else:
            theirs, label = other.fingerprint, what or f"tokenizer {other.path.name}"
        if theirs != self.fingerprint:
            raise TokenizerMismatchError(
                f"tokenizer mismatch: {self.path.name} has fingerprint {self.fingerprint} but {label} has "
                f"{theirs}. Token ids made by one tokenizer decode to garbage with the other: preprocess, "
                "train and serve with the same tokenizer folder (or re-preprocess the data with this one).")

    @property
    def vocab_size(self) -> int:
        """Number of ids, added (special) tokens included — ``len(AutoTokenizer)``, Megatron's ``vocab_size``."""
        return self._tk.get_vocab_size(with_added_tokens=True)

    @property
    def dtype(self) -> np.dtype:
        """The ``.bin`` dtype for this vocabulary (Megatron's ``DType.optimal_dtype``)."""
        return np.dtype(optimal_dtype(self.vocab_size))

    @property
    def special_ids(self) -> dict[str, int | None]:
        """``{"pad_token": id, "bos_token": id, "eos_token": id}`` from ``tokenizer_config.json`` (None: not set)."""
        return dict(self._special)

    @property
    def eod(self) -> int:
        """End-of-document id (``--append-eod``): the EOS token's, as megatron-core's ``HuggingFaceTokenizer.eod``."""
        eod = self._special["eos_token"]
        if eod is None:
            raise ValueError(f"{display_path(self.path)}: tokenizer_config.json names no eos_token that is in the "
                             "vocabulary, so there is no end-of-document id; add one")
        return eod

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """The ids of ``text`` (special-token *text* in it is matched).  ``add_special_tokens``: also what the
        tokenizer's post-processor adds (a BOS, say): megatron-core 0.19's default, not 0.16's."""
        return self._tk.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], num_threads: int | None = None) -> list[list[int]]:
        """``[encode(t) for t in texts]`` (``tokenizers`` may use several threads; ``num_threads`` is ignored)."""
        return [e.ids for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """For each text: its ids (as :meth:`encode`) and each token's ``(start, end)`` *character* span in the
        text (tokens of one multi-byte character share its span) — what a loss mask by character spans needs."""
        return [(e.ids, list(e.offsets)) for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, special tokens written out (so ``decode(encode(t)) == t`` for every text)."""
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=False)

    def pieces(self, text_or_ids: str | Iterable[int]) -> list[str]:
        """The pieces of a text or of ids (byte-level: a leading space shows as ``Ġ``)."""
        ids = self.encode(text_or_ids) if isinstance(text_or_ids, str) else list(text_or_ids)
        return [self._tk.id_to_token(int(i)) for i in ids]


def _hf_from_state(canonical: str, config: dict, path: str) -> HFTokenizer:
    tok = HFTokenizer.__new__(HFTokenizer)
    tok._init(canonical, config, Path(path))
    return tok


def workbook_hf_tokenizer(vocab_size: int = WORKBOOK_HF_VOCAB_SIZE) -> Path:
    """The folder of the workbook's byte-level BPE, training it (about a second) if it is missing.

    Trained on the four domain corpora ``web``, ``code``, ``books``, ``korean`` and cached in
    ``work_dir("tokenizer")`` under a name holding a hash of the recipe, the corpora and the
    ``tokenizers`` version; built in a temporary folder and renamed, so concurrent callers are safe.
    """
    tk = _tokenizers()
    files = [data_file(d) for d in DOMAINS]
    recipe = hashlib.sha256(json.dumps({"vocab_size": vocab_size, "specials": HF_SPECIAL_TOKENS,
                                        "tokenizers": tk.__version__}, sort_keys=True).encode())
    for f in files:
        recipe.update(f.name.encode() + hashlib.sha256(f.read_bytes()).digest())
    out = work_dir("tokenizer") / f"workbook_hf_bpe{vocab_size}_{recipe.hexdigest()[:12]}"
    if (out / "tokenizer_config.json").is_file():
        return out
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    train_byte_level_bpe((d for f in files for d in read_documents(f)), tmp, vocab_size)
    try:
        os.rename(tmp, out)
    except OSError:              # another process finished first: its folder holds the same bytes
        for child in tmp.iterdir():
            child.unlink()
        tmp.rmdir()
    return out
