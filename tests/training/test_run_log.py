"""The log holds every step once (issue #32 item 7; docs/training.md "The log").

Faults injected: a job killed before its first save (its log holds steps a restart runs again
from step 0), a resume the data-plan guard refuses, a half-written last line, a line of binary
garbage.  :func:`labsupport.training.run_log.reconcile_log` directly, then through the command.
"""
from __future__ import annotations

import json
import shutil
from labsupport.training import checkpoint as ckpt
from labsupport.training.run_log import aside_name, reconcile_log
from tests.training import test_faults
from tests.training.test_faults import errors, losses, run_main, tiny

tiny_prefix = test_faults.tiny_prefix   # the module's 12-document corpus (a fixture)


def _records(*steps: int) -> bytes:
    return b"".join(json.dumps({"step": s, "loss": 1.0 / s}).encode() + b"\n" for s in steps)


def test_reconcile_drops_later_steps_a_torn_last_line_and_garbage(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(_records(1, 2) + b"\xff\xfe\x00garbage\n" + _records(3) + b'{"step": 4, "lo')
    done = reconcile_log(log, 2)
    assert done == {"dropped": 1, "bad": 2, "aside": None}
    assert log.read_bytes() == _records(1, 2)
    assert reconcile_log(log, 2) == {"dropped": 0, "bad": 0, "aside": None}   # nothing to do: untouched


def test_reconcile_from_step_0_keeps_the_old_log_aside(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(_records(1, 2))
    done = reconcile_log(log, 0)
    assert done["aside"] == aside_name(log) and aside_name(log).read_bytes() == _records(1, 2)
    assert not log.exists()
    log.write_bytes(b'{"step": 1, "lo')                         # only a torn line: emptied, nothing kept aside
    aside_name(log).unlink()
    assert reconcile_log(log, 0)["aside"] is None and log.read_bytes() == b"" and not aside_name(log).exists()


def test_resume_if_exists_without_a_checkpoint_starts_an_empty_log(tmp_path, capsys, tiny_prefix):
    """A job killed before its first save: its log holds steps 1-2; the restart starts at step 0."""
    whole, save = tmp_path / "whole", tmp_path / "s"
    assert run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--log-file", str(whole / "log.jsonl"))[0] == 0
    log = save / "log.jsonl"
    save.mkdir()
    log.write_bytes((whole / "log.jsonl").read_bytes())
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save),
                           "--resume-if-exists", "--log-file", str(log))
    assert status == 0, err
    assert any("no checkpoint" in x for x in err) and any("log.jsonl.old" in x for x in err), err
    assert losses(log) == losses(whole / "log.jsonl")           # every step once (losses() asserts it)
    assert aside_name(log).read_bytes() == (whole / "log.jsonl").read_bytes()


def test_a_refused_resume_drops_nothing_and_a_torn_line_is_dropped(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    log = save / "log.jsonl"
    assert run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save), "--save-every", "1",
                    "--log-file", str(log))[0] == 0
    shutil.rmtree(save / ckpt.checkpoint_name(2, 16))           # resume from step 1, with step 2 in the log
    before = log.read_bytes()
    # max_steps 2 → 4 reshuffles the first epoch: the data-plan guard refuses, and the log is untouched
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=4", "--resume", str(save),
                           "--save-dir", str(save), "--log-file", str(log))
    assert status == 2 and len(errors(err)) == 1 and "allow_new_data_plan" in errors(err)[0], err
    assert log.read_bytes() == before
    # a killed run's half-written line and binary garbage: dropped, the next record starts its own line
    log.write_bytes(before + b"\xff\xfe garbage\n" + b'{"step": 3, "loss": 0.')
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--resume", str(save),
                           "--save-dir", str(save), "--log-file", str(log))
    assert status == 0, err
    assert sorted(losses(log)) == [1, 2]
    assert any("not JSON records" in x for x in err), err
