"""labsupport.models.vocab_padding (chapter 2): Megatron's padded vocabulary, by hand-computed cases."""
from __future__ import annotations

import numpy as np
import pytest

from labsupport.models.vocab_padding import padded_vocab_size


@pytest.mark.parametrize(("vocab", "divisible_by", "tp", "padded"), [
    (1, 128, 1, 128),
    (128, 128, 1, 128),            # already a multiple: unchanged, not one more multiple
    (129, 128, 1, 256),
    (50_257, 128, 1, 50_304),      # GPT-2: 393 * 128
    (50_257, 128, 8, 51_200),      # multiple 1024: 50 * 1024
    (32_000, 128, 1, 32_000),      # Llama 2: 250 * 128
    (32_000, 128, 3, 32_256),      # multiple 384: 84 * 384
    (65_400, 128, 1, 65_408),      # 511 * 128
    (65_400, 128, 2, 65_536),      # multiple 256: 256 * 256 — crosses 65,500
    (128_256, 128, 8, 129_024),    # Llama 3: multiple 1024, 126 * 1024
    (7, 1, 1, 7),
])
def test_hand_computed(vocab, divisible_by, tp, padded):
    assert padded_vocab_size(vocab, divisible_by, tp) == padded
    assert padded % (divisible_by * tp) == 0 and 0 <= padded - vocab < divisible_by * tp


def test_defaults_and_numpy_integers():
    assert padded_vocab_size(1000) == 1024
    assert padded_vocab_size(np.int64(1000), np.int32(128), np.int64(2)) == 1024


@pytest.mark.parametrize(("args", "message"), [
    ((0, 128, 1), "vocab_size must be positive, got 0"),
    ((-5, 128, 1), "vocab_size must be positive, got -5"),
    ((1000, 0, 1), "divisible_by must be positive, got 0"),
    ((1000, -128, 1), "divisible_by must be positive, got -128"),
    ((1000, 128, 0), "tensor_parallel must be positive, got 0"),
    ((1000.0, 128, 1), "vocab_size must be a positive integer, got 1000.0 (float)"),
    ((1000, True, 1), "divisible_by must be a positive integer, got True (bool)"),
])
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        padded_vocab_size(*args)
