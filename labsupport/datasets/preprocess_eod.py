"""Which end token Megatron-LM's ``tools/preprocess_data.py --append-eod`` appends — chapters 1 and 2.

The script appends ``tokenizer.eod`` after every document.  Which tokenizer that is depends on the
version (read in NVIDIA/Megatron-LM at the tags core_v0.14.0, core_v0.16.1, core_v0.17.0, core_r0.19.0):

* up to 0.14: ``megatron.training.tokenizer.build_tokenizer`` (the *legacy* tokenizers); its
  ``SentencePieceTokenizer`` type adds new ``<CLS> <SEP> <EOD> <MASK>`` ids after the model's pieces
  and appends that ``<EOD>`` (``megatron/training/tokenizer/tokenizer.py``, ``_SentencePieceTokenizer``);
* 0.15 and 0.16: the new ``megatron.core.tokenizers`` unless ``--legacy-tokenizer`` is given
  (``Encoder.initializer`` in ``tools/preprocess_data.py``); its SentencePiece tokenizer has no
  extra ids and ``eod`` is the model's EOS;
* 0.17 on: the legacy path is gone (``build_tokenizer`` from ``megatron.core.tokenizers.utils``).

:func:`preprocess_tokenizer` builds the tokenizer exactly as the script does by default (its
``--tokenizer-*`` defaults and the dummy values it sets), with the installed megatron-core, so a
cell can show the id it appends.
"""
from __future__ import annotations

import argparse
import importlib
import os
import warnings
from dataclasses import dataclass

__all__ = ["PreprocessTokenizer", "megatron_tokenizer", "preprocess_tokenizer"]


@dataclass(frozen=True)
class PreprocessTokenizer:
    """The tokenizer of ``tools/preprocess_data.py`` for one SentencePiece model."""

    megatron_core: str      # the installed version
    module: str             # where build_tokenizer came from
    class_name: str
    eod: int                # what --append-eod appends
    vocab_size: int


def megatron_tokenizer(model_path: str | os.PathLike, tokenizer_type: str = "SentencePieceTokenizer"):
    """megatron-core's tokenizer object for ``model_path`` as ``tools/preprocess_data.py`` builds it by default,
    and the module its ``build_tokenizer`` came from.

    ``tokenizer_type``: "SentencePieceTokenizer" (a ``.model``) or "HuggingFaceTokenizer" (a tokenizer folder,
    loaded by ``transformers.AutoTokenizer``).  Raises ImportError when megatron-core (≥ 0.15, which has
    ``megatron.core.tokenizers``) — or, for a Hugging Face tokenizer, ``transformers`` — is missing.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                     # "Transformer Engine and Apex are not installed"
        importlib.import_module("megatron.core")            # its import-time warnings, silenced here
        try:                                                # 0.17 on
            from megatron.core.tokenizers.utils import build_tokenizer as module  # noqa: PLC0415 - megatron-core is an optional dependency
        except ImportError:                                 # 0.15, 0.16
            from megatron.core.tokenizers.text.utils import build_tokenizer as module  # noqa: PLC0415 - megatron-core is an optional dependency
    args = argparse.Namespace(
        tokenizer_type=tokenizer_type, tokenizer_model=os.fspath(model_path),
        # the --tokenizer-* defaults (megatron/training/arguments.py, TokenizerConfig in 0.19)
        tokenizer_sentencepiece_legacy=False, tokenizer_sentencepiece_ignore_extra_whitespaces=True,
        tokenizer_special_tokens=None, special_tokens=None, tokenizer_metadata=None, metadata_path=None,
        chat_template=None, pad_vocab_size=True, padded_vocab_size=None,
        vocab_file=None, merge_file=None, trust_remote_code=False,
        # Hugging Face: core_v0.16.1 reads --tokenizer-hf-use-fast / --tokenizer-hf-include-special-tokens
        # (both off); core_v0.19.0 reads their --tokenizer-hf-no-* negations (both off: fast, special tokens in)
        tokenizer_hf_use_fast=False, tokenizer_hf_include_special_tokens=False,
        tokenizer_hf_no_use_fast=False, tokenizer_hf_no_include_special_tokens=False,
        # what tools/preprocess_data.py sets after parsing ("some default/dummy values for the tokenizer")
        rank=1, make_vocab_size_divisible_by=128, tensor_model_parallel_size=1, vocab_extra_ids=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return module.build_tokenizer(args), module.__name__


def preprocess_tokenizer(model_path: str | os.PathLike,
                         tokenizer_type: str = "SentencePieceTokenizer") -> PreprocessTokenizer:
    """A summary of :func:`megatron_tokenizer`: version, module, class, the EOD id and the vocabulary size."""
    tok, module = megatron_tokenizer(model_path, tokenizer_type)        # imports megatron-core, quietly
    import megatron.core  # noqa: PLC0415 - megatron-core is an optional dependency
    return PreprocessTokenizer(megatron.core.__version__, module, type(tok).__name__, int(tok.eod),
                               int(tok.vocab_size))
