"""Faults in ``python -m labsupport runall`` (issue 23): a parameter of the wrong type is refused
before anything runs; a Ctrl-C never leaves a half-run notebook under the chapter's name."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from labsupport.paths import REPO_ROOT


def runall(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "labsupport", "runall", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, **kw)


def test_parameter_of_the_wrong_type_is_refused_before_running(tmp_path):
    out = tmp_path / "runs"
    proc = runall("-p", "seed", "abc", "01", "--out", str(out))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "runall: error: -p seed 'abc': notebooks/01_tokenization.ipynb's parameter seed is int (default 0); "
        "give a value of that type"]
    assert not out.exists()


def _slow_notebook(path: Path) -> Path:
    from labsupport.workbook.nbrun import KERNEL

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("seed = 0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("import time\nfor _ in range(600):\n    time.sleep(0.1)"),
                nbformat.v4.new_code_cell("print('done')")]
    nbformat.write(nb, path)
    return path


def test_ctrl_c_leaves_no_notebook_that_looks_finished(tmp_path):
    nb = _slow_notebook(tmp_path / "99_slow.ipynb")
    out = tmp_path / "runs"
    proc = runall(str(nb), "--out", str(out), start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob(".99_slow.*.running.ipynb")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(3)                                   # the kernel is in the slow cell by now
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130, err
    ours = [x for x in err.splitlines() if x.startswith("runall:")]   # the kernel's own warnings aside
    assert ours == ["runall: interrupted (Ctrl-C)"] and err.strip().splitlines()[-1] == ours[0], err
    # the Ctrl-C reaches the kernel too (same process group, as in a terminal): ipykernel may log its
    # own "Exception in message handler" traceback while its sockets close; runall's side has none
    assert not re.search(r'File "[^"]*(labsupport|papermill)/[^"]*\.py"', err), err
    assert sorted(p.name for p in out.iterdir()) == []   # no 99_slow.ipynb, no temporary file


@pytest.mark.parametrize("value", ["1", "7"])
def test_parameter_of_the_right_type_passes_the_check(value):
    from labsupport.workbook.runall import _check_parameters

    _check_parameters([REPO_ROOT / "notebooks" / "01_tokenization.ipynb"], {"seed": int(value)})
