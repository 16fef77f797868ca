"""Faults injected into the data and the weights of chapter 6's run (issue #32): a prefix
preprocessed again under its index cache and under a checkpoint, damaged ``.bin``/``.idx`` and
sidecar files, and a learning rate that overflows every weight.  Each ends as the command's one
line (``error: …``) with its documented status, or — a stale cache — one line saying it was
rebuilt; nothing half-written, nothing that existed destroyed.

The runs call the command's ``main`` in this process (as ``python -m labsupport train`` does),
a few steps of the tiny GPT on CPU, over a 12-document corpus copied per test.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from labsupport.training import checkpoint as ckpt
from labsupport.training.cli import EXIT_ENV, EXIT_USAGE
from tests.training.test_faults import errors, run_main

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def preprocess_docs(folder: Path, docs: int, seed: int = 0) -> str:
    """``folder/tiny_text_document`` from ``docs`` documents of 40 words (the first ``n`` the same
    for every ``docs`` ≥ n: a larger call appends documents)."""
    from labsupport.datasets.preprocess import preprocess
    from labsupport.datasets.tokenizer import workbook_tokenizer

    rng = random.Random(seed)
    src = folder / "tiny.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(40))}) + "\n"
                           for _ in range(docs)))
    preprocess([src], folder / "tiny", workbook_tokenizer(), append_eod=True, show_progress=False)
    return str(folder / "tiny_text_document")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    preprocess_docs(folder, 12)
    return folder


@pytest.fixture
def prefix(built, tmp_path) -> str:
    """A fresh copy of the 12-document corpus (its .bin, .idx and sidecar .json)."""
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(built / f"tiny_text_document{suffix}", tmp_path / f"tiny_text_document{suffix}")
    return str(tmp_path / "tiny_text_document")


def data(prefix: str) -> str:
    return f"model.data.data_prefix=[1.0,{prefix}]"


# ------------------------------------------------------------------ a prefix preprocessed again
def test_a_stale_index_cache_is_rebuilt_saying_so(tmp_path, capsys, prefix):
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=2")
    assert status == 0 and not any("index cache" in x for x in err), err
    preprocess_docs(tmp_path, 20)                   # the same prefix, 8 documents appended
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=2")
    assert status == 0, err
    stale = [x for x in err if x.startswith("index cache ")]
    assert len(stale) == 1 and "preprocessed again" in stale[0] and stale[0].endswith("rebuilt it"), err
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=2")
    assert status == 0 and not any("index cache" in x for x in err), err      # rebuilt once, then loaded


def test_resuming_across_a_prefix_preprocessed_again_is_refused(tmp_path, capsys, prefix):
    save = tmp_path / "s"
    status, _ = run_main(capsys, data(prefix), "trainer.max_steps=3", "--stop-after", "1", "--save-dir", str(save))
    assert status == 0
    saved = [p.name for p in ckpt.checkpoints_newest_first(save)]
    preprocess_docs(tmp_path, 20)
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=3", "--resume", str(save), "--save-dir", str(save))
    assert status == EXIT_USAGE and len(errors(err)) == 1, err
    line = errors(err)[0]
    assert saved[0] in line and "resuming would change the 8 samples already trained on" in line, line
    assert "allow_new_data_plan=true" in line
    assert [p.name for p in ckpt.checkpoints_newest_first(save)] == saved            # nothing written


def test_resuming_across_other_tokens_of_the_same_lengths_is_refused(tmp_path, capsys, prefix):
    """The samples' digest covers documents and offsets, not tokens: the corpus digest catches it."""
    save = tmp_path / "s"
    assert run_main(capsys, data(prefix), "trainer.max_steps=3", "--stop-after", "1", "--save-dir", str(save))[0] == 0
    raw = bytearray(Path(f"{prefix}.bin").read_bytes())
    raw[0], raw[2] = raw[2], raw[0]                 # two tokens swapped (uint16 ids of this vocabulary)
    raw[1], raw[3] = raw[3], raw[1]
    assert raw != Path(f"{prefix}.bin").read_bytes()
    Path(f"{prefix}.bin").write_bytes(bytes(raw))
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=3", "--resume", str(save))
    assert status == EXIT_USAGE and len(errors(err)) == 1, err
    assert "the tiny corpus was preprocessed again (its .bin/.idx differ)" in errors(err)[0], err


# ------------------------------------------------------------------ damaged data files
def _patch(path: str, offset: int, data: bytes) -> None:
    raw = bytearray(Path(path).read_bytes())
    raw[offset:offset + len(data)] = data
    Path(path).write_bytes(bytes(raw))


DAMAGE = {
    "TruncatedIndexError": (".idx", lambda p: Path(p).write_bytes(Path(p).read_bytes()[:-5]), "truncated"),
    "BadMagicError": (".idx", lambda p: _patch(p, 0, b"NOTANIDX!"), "bad magic"),
    "CorruptIndexError": (".idx", lambda p: _patch(p, 34, (2**31 - 1).to_bytes(4, "little")), "sequence pointer"),
    "BinSizeMismatchError": (".bin", lambda p: Path(p).write_bytes(Path(p).read_bytes()[:-2]), "bytes, but"),
    "sidecar not JSON": (".json", lambda p: Path(p).write_text("{half a sidecar"), "unreadable sidecar"),
    "sidecar not an object": (".json", lambda p: Path(p).write_text("[1, 2]"), "damaged sidecar"),
}


@pytest.mark.parametrize("fault", list(DAMAGE))
def test_a_damaged_data_file_is_one_line_and_exit_2(tmp_path, capsys, prefix, fault):
    suffix, damage, says = DAMAGE[fault]
    damage(prefix + suffix)
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=2", "--save-dir", str(tmp_path / "s"))
    assert status == EXIT_USAGE, err
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    assert f"tiny_text_document{suffix}" in err[0] and says in err[0], err
    assert not ckpt.checkpoints_newest_first(tmp_path / "s")


# ------------------------------------------------------------------ weights that overflow
def test_inf_weights_are_never_checkpointed(tmp_path, capsys, prefix):
    save = tmp_path / "s"
    status, err = run_main(capsys, data(prefix), "trainer.max_steps=3", "model.optim.lr=1e39",
                           "model.optim.sched.warmup_steps=0", "--save-dir", str(save), "--save-every", "1")
    assert status == EXIT_ENV, err
    assert len(errors(err)) == 1, err
    line = errors(err)[0]
    assert line.startswith("error: step 1: after the optimizer step the weights of ") and "NaN or inf" in line, line
    assert "no checkpoint was written" in line and "model.optim.lr" in line
    assert not ckpt.checkpoints_newest_first(save) and not [p for p in save.iterdir() if p.is_file()]


@pytest.mark.parametrize("override, message", [
    ("model.optim.lr=inf", "model.optim.lr=inf: expected a finite number > 0"),
    ("model.optim.lr=nan", "model.optim.lr=nan: expected a finite number > 0"),
    ("model.optim.weight_decay=inf", "model.optim.weight_decay=inf: expected a finite number ≥ 0"),
    ("model.optim.betas=[0.9]", "model.optim.betas=[0.9]: expected two numbers [beta1, beta2]"),
    ("model.optim.betas=[0.9,0.98,0.5]", "model.optim.betas=[0.9, 0.98, 0.5]: expected two numbers"),
    ("model.optim.betas=[0.9,1.0]", "model.optim.betas[1]=1.0: expected a number in [0, 1)"),
    ("model.optim.betas=[-0.1,0.98]", "model.optim.betas[0]=-0.1: expected a number in [0, 1)"),
    ("model.optim.betas=[0.9,nan]", "model.optim.betas[1]=nan: expected a number in [0, 1)"),
])
def test_bad_optimizer_values_are_refused_naming_the_field(capsys, override, message):
    status, err = run_main(capsys, override)
    assert status == EXIT_USAGE and len(err) == 1 and err[0].startswith(f"error: {message}"), err


@pytest.mark.parametrize("content", [b"", b"garbage\x00\x01 not a protobuf", b"\x0a\x03abc"])
def test_a_tokenizer_model_that_is_no_model_is_one_line_and_exit_2(tmp_path, capsys, prefix, content):
    """A 0-byte, garbage or truncated ``model.tokenizer.model`` (#32 item 8): one line naming the file, exit 2."""
    model = tmp_path / "bad.model"
    model.write_bytes(content)
    save = tmp_path / "s"
    status, err = run_main(capsys, data(prefix), f"model.tokenizer.model={model}", "trainer.max_steps=1",
                           "--save-dir", str(save))
    assert status == EXIT_USAGE and len(err) == 1 and err[0].startswith("error: "), err   # no traceback
    assert f"{model} is not a SentencePiece model" in err[0] and "spm_train" in err[0], err
    assert not save.exists() or not ckpt.checkpoints_newest_first(save)
