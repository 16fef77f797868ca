"""labsupport.models.vocab_padding (chapter 2) against megatron-core's own vocabulary padding.

Where Megatron keeps the function depends on the release:

* core_v0.16.1: only ``megatron/training/tokenizer/tokenizer.py:117`` ``_vocab_size_with_padding``
  (Megatron-LM's training package, which the ``megatron-core`` wheel does not ship) — nothing to
  import, so the comparison is skipped on 0.16.1, saying why;
* core_v0.19.0 on: ``megatron/core/tokenizers/utils/build_tokenizer.py:124``
  ``vocab_size_with_padding(orig_vocab_size, args)`` in megatron-core itself, and
  ``megatron/training/vocab_utils.py:9`` ``calculate_padded_vocab_size`` where the training package is present.

Each one found is compared on many (vocab, divisible_by, TP) combinations, including sizes on and
next to a multiple.
"""
from __future__ import annotations

import argparse
import importlib
import random
import warnings

import pytest

from labsupport.models.vocab_padding import padded_vocab_size

pytestmark = pytest.mark.crosscheck

_CANDIDATES = (
    ("megatron.core.tokenizers.utils.build_tokenizer", "vocab_size_with_padding", "args"),   # 0.17 on
    ("megatron.training.vocab_utils", "calculate_padded_vocab_size", "kwargs"),               # Megatron-LM 0.19 on
    ("megatron.training.tokenizer.tokenizer", "_vocab_size_with_padding", "args"),            # Megatron-LM 0.16
)


def _cases() -> list[tuple[int, int, int]]:
    rng = random.Random(0)
    cases = [(v, d, t) for v in (1, 127, 128, 129, 32_000, 50_257, 65_400, 65_500, 128_256)
             for d in (1, 8, 64, 128) for t in (1, 2, 4, 8)]
    for _ in range(300):
        d, t = rng.choice((1, 2, 3, 8, 64, 100, 128, 256)), rng.choice((1, 2, 3, 4, 8, 16))
        m = d * t
        near = m * rng.randint(1, 2000)
        cases.append((rng.choice((rng.randint(1, 300_000), near, near + 1)), d, t))
    return cases


def _megatron_functions(megatron) -> list[tuple[str, object]]:
    found = []
    for module_name, attr, style in _CANDIDATES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                fn = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError):
                continue
        if style == "args":
            def call(v, d, t, fn=fn):
                args = argparse.Namespace(make_vocab_size_divisible_by=d, tensor_model_parallel_size=t, rank=0)
                return fn(v, args, logging_enabled=False)
        else:
            def call(v, d, t, fn=fn):
                return fn(v, d, t, logging_enabled=False)
        found.append((f"{module_name}.{attr}", call))
    return found


def test_padded_vocab_size_matches_megatron(megatron):
    import megatron.core  # noqa: PLC0415 - megatron-core is an optional dependency
    version = getattr(megatron.core, "__version__", "?")
    functions = _megatron_functions(megatron)
    if not functions:
        pytest.skip(f"megatron-core {version} has no vocabulary-padding function to import: 0.16.1 keeps it in "
                    "Megatron-LM's megatron/training/tokenizer/tokenizer.py (not in the wheel); 0.17+ ship "
                    "megatron.core.tokenizers.utils.build_tokenizer.vocab_size_with_padding")
    for name, call in functions:
        for v, d, t in _cases():
            assert padded_vocab_size(v, d, t) == call(v, d, t), f"{name}({v}, divisible_by={d}, TP={t})"
