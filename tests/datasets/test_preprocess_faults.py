"""Faults in preprocessing (issue 23): outputs appear all together or not at all, and an existing
dataset at the prefix survives a kill at every step of the finalisation."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labsupport.datasets import staging
from labsupport.datasets.indexed import IndexedDataset
from labsupport.paths import REPO_ROOT

KEYS = ("text", "title")
EXTS = (".bin", ".idx", ".json")


def corpus(path: Path, n: int, word: str) -> Path:
    path.write_text("".join(json.dumps({"text": f"{word} document {i} " * 5, "title": f"{word} {i}"}) + "\n"
                            for i in range(n)))
    return path


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    from labsupport.datasets.tokenizer import workbook_tokenizer

    cmd = [sys.executable, "-m", "labsupport", "preprocess", "--tokenizer-model", str(workbook_tokenizer()),
           "--json-keys", *KEYS, "--append-eod", "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})


def snapshot(prefix: Path) -> dict[str, bytes]:
    out = {}
    for k in KEYS:
        for e in EXTS:
            p = Path(f"{prefix}_{k}_document{e}")
            if p.exists():
                out[p.name] = p.read_bytes()
    return out


def test_kill_at_every_step_of_the_commit_keeps_old_or_new(tmp_path):
    """SIGKILL before each step of the finalisation (write COMMIT, remove the old .idx files,
    the six renames): every key stays readable or absent, never mixed, and the next run either
    restores the old dataset (killed before COMMIT) or completes the new one (after)."""
    old_src, new_src = corpus(tmp_path / "old.jsonl", 20, "old"), corpus(tmp_path / "new.jsonl", 30, "new")
    prefix = tmp_path / "out" / "ds"
    assert run(["--input", str(old_src), "--output-prefix", str(prefix)]).returncode == 0
    old = snapshot(prefix)
    assert run(["--input", str(new_src), "--output-prefix", str(tmp_path / "ref")]).returncode == 0
    new = {k.replace("ref_", "ds_"): v for k, v in snapshot(tmp_path / "ref").items()}
    assert len(old) == len(new) == 6 and old != new
    steps = 1 + len(KEYS) + len(KEYS) * len(EXTS)          # COMMIT, two unlinks, six renames
    for after in range(steps + 1):
        done = run(["--input", str(new_src), "--output-prefix", str(prefix)],
                   LABSUPPORT_FAULT=f"preprocess-kill:after={after}")
        if after < steps:
            assert done.returncode == -9, (after, done.stderr)
        on_disk = snapshot(prefix)
        for k in KEYS:  # each key: the old files, the new files, or (mid-commit) no .idx — never a mix
            stem = f"ds_{k}_document"
            if f"{stem}.idx" in on_disk:
                IndexedDataset(str(prefix) + f"_{k}_document")
                src = old if on_disk[f"{stem}.idx"] == old[f"{stem}.idx"] else new
                assert all(on_disk[stem + e] == src[stem + e] for e in EXTS), (after, k)
        if after == 0:
            assert on_disk == old
        # the next start recovers: rolled back before COMMIT, forward after it
        notes = staging.recover(prefix)
        assert snapshot(prefix) == (old if after == 0 else new), after
        assert staging.staging_folders(prefix) == [] and (after == steps or notes)
        # put the old dataset back for the next round
        for name, data in old.items():
            (prefix.parent / name).write_bytes(data)
    assert sorted(os.listdir(prefix.parent)) == sorted(old)


def test_error_after_building_leaves_the_old_dataset(tmp_path, monkeypatch):
    """An OSError (here: the commit's first write fails) leaves the existing dataset and no staging folder."""
    from labsupport.datasets.preprocess import PreprocessError, preprocess
    from labsupport.datasets.tokenizer import workbook_tokenizer

    prefix = tmp_path / "ds"
    preprocess([corpus(tmp_path / "a.jsonl", 5, "a")], prefix, workbook_tokenizer(), json_keys=KEYS,
               show_progress=False)
    old = snapshot(prefix)

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(prefix.parent))

    monkeypatch.setattr(staging, "atomic_write", full)
    with pytest.raises(OSError, match="No space"):
        preprocess([corpus(tmp_path / "b.jsonl", 9, "b")], prefix, workbook_tokenizer(), json_keys=KEYS,
                   show_progress=False)
    assert snapshot(prefix) == old and staging.staging_folders(prefix) == []
    assert sorted(os.listdir(tmp_path)) == sorted(["a.jsonl", "b.jsonl", *old])
    del PreprocessError


@pytest.mark.parametrize("filename", [None, "FILE"])
def test_a_full_disk_names_the_file_or_the_prefix_and_the_cure(tmp_path, monkeypatch, capsys, filename):
    """ENOSPC while writing, with and without a file name in the OSError (issue #32): one line naming
    the file (else the output prefix), what to do, and the old dataset intact."""
    from labsupport.datasets.preprocess import main, preprocess
    from labsupport.datasets.tokenizer import workbook_tokenizer

    prefix = tmp_path / "ds"
    src = corpus(tmp_path / "a.jsonl", 5, "a")
    preprocess([src], prefix, workbook_tokenizer(), json_keys=KEYS, show_progress=False)
    old = snapshot(prefix)
    named = str(tmp_path / "ds_text_document.bin") if filename else None

    def full(*a, **k):
        raise OSError(28, "No space left on device", *([named] if named else []))

    monkeypatch.setattr(staging, "atomic_write", full)
    status = main(["--input", str(corpus(tmp_path / "b.jsonl", 9, "b")), "--output-prefix", str(prefix),
                   "--tokenizer-model", str(workbook_tokenizer()), "--json-keys", *KEYS, "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith(f"preprocess: error: {named or prefix}: No space left on device; free space there "
                             "or choose another --output-prefix"), err
    assert "error::" not in err[0]
    assert snapshot(prefix) == old and staging.staging_folders(prefix) == []


def test_workers_zero_is_a_usage_error(tmp_path):
    done = run(["--input", str(corpus(tmp_path / "a.jsonl", 2, "a")), "--output-prefix", str(tmp_path / "x"),
                "--workers", "0"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["preprocess: error: --workers 0: must be ≥ 1 (tokenizing processes)"]
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_ctrl_c_during_the_moves_finishes_them_and_says_the_outputs_are_complete(tmp_path):
    """A Ctrl-C (SIGINT) that arrives while the finished files are moved into place is held until
    the moves are done; the command then exits 130 saying the outputs are complete (not "no output
    was written"), and the new dataset is in place, whole, with no staging folder left."""
    new_src = corpus(tmp_path / "new.jsonl", 30, "new")
    assert run(["--input", str(new_src), "--output-prefix", str(tmp_path / "ref")]).returncode == 0
    new = {k.replace("ref_", "ds_"): v for k, v in snapshot(tmp_path / "ref").items()}
    prefix = tmp_path / "out" / "ds"
    for after in (0, 1, 4):     # before COMMIT is written, during the removals, during the renames
        done = run(["--input", str(new_src), "--output-prefix", str(prefix)],
                   LABSUPPORT_FAULT=f"preprocess-int:after={after}")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 130, (after, done.stderr)
        assert lines == ["preprocess: interrupted (Ctrl-C) after the outputs were complete: "
                         f"{len(KEYS)} dataset(s) written in full"], (after, done.stderr)
        assert snapshot(prefix) == new and staging.staging_folders(prefix) == []

