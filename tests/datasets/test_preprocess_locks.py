"""Two preprocess runs on one prefix, and bad input (issue #32 items 4 and 12).

Faults injected: a second run on a prefix another run holds (in this process and from a process
killed with SIGKILL), a staging folder named with a live but unrelated pid, a damaged ``COMMIT``
marker, a 0-byte input and ``--workers abc``.  The command's ``main`` runs in this process.
"""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from labsupport.datasets import staging
from labsupport.datasets import preprocess as pp
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.tokenizer import workbook_tokenizer
from labsupport.fileio import hold_lock
from tests.datasets.test_preprocess_faults import EXTS, KEYS, corpus, snapshot
from tests.training.test_locks import holder_process


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    status = pp.main([*argv, "--tokenizer-model", str(workbook_tokenizer()), "--json-keys", *KEYS, "--no-progress"])
    return status, [x for x in capsys.readouterr().err.splitlines() if x.strip()]


@pytest.fixture
def built(tmp_path) -> Path:
    prefix = tmp_path / "out" / "ds"
    pp.preprocess([corpus(tmp_path / "a.jsonl", 5, "a")], prefix, workbook_tokenizer(), json_keys=KEYS,
                  show_progress=False)
    return prefix


def test_a_second_run_on_a_locked_prefix_is_refused_and_changes_nothing(tmp_path, capsys, built):
    old = snapshot(built)
    with hold_lock(f"{built}.lock", "a first run"):
        status, err = run(capsys, "--input", str(corpus(tmp_path / "b.jsonl", 9, "b")), "--output-prefix", str(built))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith(f"preprocess: error: --output-prefix {built} is in use by another run "
                             f"(pid {os.getpid()}"), err
    assert err[0].endswith("wait for that run to finish, or choose another --output-prefix"), err
    assert snapshot(built) == old and staging.staging_folders(built) == []
    status, err = run(capsys, "--input", str(tmp_path / "b.jsonl"), "--output-prefix", str(built))
    assert status == 0, err
    assert snapshot(built) != old and not Path(f"{built}.lock").exists()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, capsys, built):
    proc = holder_process(Path(f"{built}.lock"))
    status, err = run(capsys, "--input", str(corpus(tmp_path / "b.jsonl", 9, "b")), "--output-prefix", str(built))
    assert status == 1 and f"pid {proc.pid}" in err[0], err
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    status, err = run(capsys, "--input", str(tmp_path / "b.jsonl"), "--output-prefix", str(built))
    assert status == 0, err
    assert sorted(os.listdir(built.parent)) == sorted(f"ds_{k}_document{e}" for k in KEYS for e in EXTS)


def _committed_staging(tmp_path: Path, prefix: Path, pid: int) -> Path:
    """A committed staging folder for ``prefix`` holding a complete new dataset, named with ``pid``."""
    ref = tmp_path / "ref" / "ds"
    pp.preprocess([corpus(tmp_path / "new.jsonl", 9, "new")], ref, workbook_tokenizer(), json_keys=KEYS,
                  show_progress=False)
    folder = prefix.parent / f".{prefix.name}.staging-{pid}-0123abcd"
    folder.mkdir()
    for k in KEYS:
        for e in EXTS:
            shutil.copy(f"{ref}_{k}_document{e}", folder / f"ds_{k}_document{e}")
    return folder


def test_a_damaged_commit_marker_is_damage_the_moves_are_rebuilt(tmp_path, built):
    folder = _committed_staging(tmp_path, built, os.getpid())
    new = {k.replace("ref_", "ds_"): v for k, v in snapshot(tmp_path / "ref" / "ds").items()}
    (folder / "COMMIT").write_bytes(b'{"moves": [["\xff\x00 garbage')
    notes = staging.recover(built)
    assert len(notes) == 1 and "COMMIT was damaged" in notes[0], notes
    assert snapshot(built) == new and staging.staging_folders(built) == []
    for k in KEYS:
        IndexedDataset(f"{built}_{k}_document")


def test_under_the_lock_a_staging_folder_of_a_reused_pid_is_recovered(tmp_path, capsys, built):
    """pid 1 is alive but is no preprocess run: with the prefix locked, its folder is a killed run's."""
    folder = _committed_staging(tmp_path, built, 1)
    (folder / "COMMIT").write_text("{}")
    assert staging.recover(built) == []                         # unlocked: a live pid's folder is left alone
    status, err = run(capsys, "--input", str(corpus(tmp_path / "b.jsonl", 9, "b")), "--output-prefix", str(built))
    assert status == 0, err
    assert any("completed the outputs of an interrupted run" in x for x in err), err
    assert staging.staging_folders(built) == []


def test_a_0_byte_input_is_refused_in_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    status, err = run(capsys, "--input", str(empty), "--output-prefix", str(tmp_path / "o"))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith(f"preprocess: error: --input {empty}: empty (0 bytes)") and "jsonl" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["empty.jsonl"]


@pytest.mark.parametrize("argv, expect", [
    (["--workers", "abc"], "argument --workers: invalid int value: 'abc'"),
    (["--bpe-engine", "x"], "argument --bpe-engine: invalid choice: 'x'"),
])
def test_a_bad_flag_value_is_one_line(tmp_path, capsys, argv, expect):
    status, err = run(capsys, "--input", "a.jsonl", "--output-prefix", str(tmp_path / "o"), *argv)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"preprocess: error: {expect}") and err[0].endswith("--help"), err
