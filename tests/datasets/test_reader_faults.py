"""Damaged files for the readers (issue 23): a packed SFT file and the blend's index cache.

A damaged packed SFT file is one ValueError line naming it (no raw zip/numpy error); a damaged
blend cache is derived data: it is rebuilt, with one warning line, never used silently.
"""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

from labsupport.datasets import blending as bl
from labsupport.datasets.sft_packing import PackedSFT, pack_sft, tokenize_sft


class CharTokenizer:
    """One id per character; specials pad 0, bos 2, eos 3 (as tests/datasets/test_packing.py's)."""

    bos, eos, pad = 2, 3, 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) % 997 + 4 for c in text]


def _packed(tmp_path):
    rng = np.random.default_rng(3)
    examples = [{"input": "q" * int(rng.integers(1, 20)), "output": "a" * int(rng.integers(1, 20))} for _ in range(30)]
    return pack_sft(tokenize_sft(examples, CharTokenizer()), 64).save(tmp_path / "p.npz")


def _flip_inside(path, member: str) -> None:
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.file_size - 3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["bit", "truncate", "empty", "garbage"])
def test_damaged_packed_sft_is_one_line(tmp_path, damage):
    path = _packed(tmp_path)
    if damage == "bit":
        _flip_inside(path, "input_ids.npy")
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    with pytest.raises(ValueError) as info:
        PackedSFT.load(path)
    message = str(info.value)
    assert message.startswith(f"{path.name}") or "p.npz" in message.split(":")[0]
    assert "\n" not in message and ("damaged" in message or "not a labsupport packed SFT file" in message), message


def test_missing_packed_sft_names_it(tmp_path):
    with pytest.raises(ValueError, match="nope.npz: no such packed SFT file"):
        PackedSFT.load(tmp_path / "nope.npz")


class Samples:
    """A sample dataset of ``n`` items (the blend only needs len and [i])."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


@pytest.mark.parametrize("damage", ["bit", "truncate", "digest"])
def test_damaged_blend_cache_is_rebuilt_not_used(tmp_path, capsys, damage):
    cache = tmp_path / "cache"
    parts = [Samples(400), Samples(300), Samples(300)]
    first = bl.BlendedDataset(parts, [0.5, 0.2, 0.3], 500, cache_dir=cache, check_tokenizer=False)
    [npy] = cache.glob("*-dataset_sample_index.npy")
    if damage == "bit":   # a flipped bit in the data: np.load accepts it
        data = bytearray(npy.read_bytes())
        data[-5] ^= 0x04
        npy.write_bytes(bytes(data))
        assert np.load(npy).shape == first.dataset_sample_index.shape
    elif damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:100])
    else:
        next(cache.glob("*-sha256.txt")).write_text("0" * 64 + "\n")
    capsys.readouterr()
    again = bl.BlendedDataset(parts, [0.5, 0.2, 0.3], 500, cache_dir=cache, check_tokenizer=False)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert not again.cache_hit
    assert len(err) == 1 and err[0].startswith("warning: blend cache") and err[0].endswith("rebuilding it"), err
    assert np.array_equal(again.dataset_sample_index, first.dataset_sample_index)
    third = bl.BlendedDataset(parts, [0.5, 0.2, 0.3], 500, cache_dir=cache, check_tokenizer=False)
    assert third.cache_hit and capsys.readouterr().err == ""     # the rebuilt cache is intact
