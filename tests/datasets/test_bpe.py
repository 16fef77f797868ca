"""labsupport.datasets.bpe (chapter 1): the from-scratch byte-level BPE used in the notebook and checks."""
from __future__ import annotations

import random

import pytest

from labsupport.datasets.bpe import ByteBPE, merge, merge_step, most_frequent_pair, pair_counts

TEXT = ("low lower lowest newer newest wider widest — 낮은 더 낮은 가장 낮은 🙂🙂 "
        "def f(x):\n    return x\n\tdone\n") * 4


def _merge_bruteforce(ids, pair, new_id):
    """Independent reference: regex-free string replacement on a token-per-symbol encoding."""
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i:i + 2]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def test_pair_counts_counts_overlaps_in_first_seen_order():
    c = pair_counts([7, 7, 7, 1, 7, 7])
    assert c == {(7, 7): 3, (7, 1): 1, (1, 7): 1}
    assert list(c) == [(7, 7), (7, 1), (1, 7)]
    assert pair_counts([5]) == {} and pair_counts([]) == {}


def test_merge_is_left_to_right_and_non_overlapping():
    assert merge([7, 7, 7], (7, 7), 9) == [9, 7]
    assert merge([7, 7, 7, 7], (7, 7), 9) == [9, 9]
    assert merge([1, 2, 3, 1, 2], (1, 2), 256) == [256, 3, 256]
    assert merge([1, 2, 3], (2, 1), 256) == [1, 2, 3]


def test_merge_matches_bruteforce_on_random_sequences():
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randint(0, 4) for _ in range(rng.randint(0, 40))]
        pair = (rng.randint(0, 4), rng.randint(0, 4))
        assert merge(ids, pair, 99) == _merge_bruteforce(ids, pair, 99)


def test_most_frequent_pair_breaks_ties_by_first_occurrence():
    assert most_frequent_pair([3, 4, 1, 2, 3, 4, 1, 2]) == (3, 4)  # (3,4) and (1,2) both twice
    assert most_frequent_pair([1, 2, 9, 3, 4, 3, 4]) == (3, 4)
    assert most_frequent_pair([1]) is None


def test_merge_step_returns_new_ids_and_pair_without_mutating():
    ids = [1, 2, 1, 2, 3]
    new, pair = merge_step(ids, 256)
    assert (new, pair) == ([256, 256, 3], (1, 2)) and ids == [1, 2, 1, 2, 3]
    assert merge_step([5], 256) == ([5], None)


def test_training_history_and_vocabulary():
    bpe = ByteBPE.train(TEXT, num_merges=60)
    assert bpe.history[0] == len(TEXT.encode("utf-8"))
    assert len(bpe.history) == len(bpe.merges) + 1 and len(bpe.merges) == 60
    assert all(a > b for a, b in zip(bpe.history, bpe.history[1:]))  # every merge shortens
    assert bpe.vocab_size == 256 + 60
    for k, (a, b) in enumerate(bpe.merges):
        assert a < 256 + k and b < 256 + k  # merges only use earlier tokens
        assert bpe.token_bytes(256 + k) == bpe.token_bytes(a) + bpe.token_bytes(b)


def test_encode_reproduces_training_and_round_trips():
    bpe = ByteBPE.train(TEXT, num_merges=80)
    ids = bpe.encode(TEXT)
    assert len(ids) == bpe.history[-1]
    assert bpe.decode(ids) == TEXT


def test_round_trip_on_random_unicode():
    bpe = ByteBPE.train(TEXT, num_merges=50)
    rng = random.Random(3)
    for _ in range(200):
        text = "".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xAC00, 0xD7A3),
                                        rng.randint(0x1F600, 0x1F64F), 0x0A, 0x09]))
                       for _ in range(rng.randint(0, 30)))
        assert bpe.decode(bpe.encode(text)) == text


def test_training_stops_when_no_pair_repeats():
    bpe = ByteBPE.train("abcdef", num_merges=10)
    assert bpe.merges == [] and bpe.history == [6]
    assert len(ByteBPE.train("abab", num_merges=10, min_count=1).merges) >= 1


def test_bad_arguments():
    bpe = ByteBPE.train(TEXT, num_merges=5)
    with pytest.raises(ValueError, match=r"token id 261 is outside the vocabulary 0\.\.260"):
        bpe.decode([1, 261])
    with pytest.raises(ValueError, match="outside"):
        bpe.decode([-1])
    with pytest.raises(TypeError, match="text must be a str"):
        ByteBPE.train(b"bytes", 3)
    with pytest.raises(ValueError, match="num_merges"):
        ByteBPE.train("x", -1)


def test_cut_sequence_decodes_with_replacement_character():
    bpe = ByteBPE()
    ids = list("한".encode())
    assert bpe.decode(ids[:2]) == "\ufffd"
    assert bpe.pieces(ids) == ["\\xed", "\\x95", "\\x9c"]
