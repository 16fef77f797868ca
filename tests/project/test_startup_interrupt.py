"""Ctrl-C while a command is still importing its code: one line and exit 130, nothing written (issue 23).

The interrupt is injected at the import (``LABSUPPORT_FAULT=interrupt-import``), so the test does
not depend on when a real signal happens to land (the interpreter's own start-up, before any of
the workbook's code runs, cannot be handled by it).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from labsupport.paths import REPO_ROOT

COMMANDS = {
    "preprocess": (["-m", "labsupport", "preprocess", "--input", "in.jsonl", "--tokenizer-model", "x.model",
                    "--output-prefix", "out/ds"], "preprocess: interrupted (Ctrl-C)"),
    "train": (["-m", "labsupport", "train", "trainer.max_steps=1", "--save-dir", "out"],
              "error: interrupted (Ctrl-C) while starting; nothing was written"),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_ctrl_c_while_importing_is_one_line_and_130(name, tmp_path):
    args, line = COMMANDS[name]
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), LABSUPPORT_FAULT="interrupt-import")
    done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [line] and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]      # nothing written
