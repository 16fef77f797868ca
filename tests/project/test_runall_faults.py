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


def _slow_cell_running(partial: list[Path]) -> bool:
    """Has papermill marked the 60-second cell as running (it saves the notebook as each cell starts)?"""
    try:
        nb = nbformat.read(partial[0], as_version=4)
    except Exception:  # noqa: BLE001 - caught between papermill's writes
        return False
    return any("time.sleep" in c.source and c.metadata.get("papermill", {}).get("status") == "running"
               for c in nb.cells)


def test_ctrl_c_leaves_no_notebook_that_looks_finished(tmp_path):
    """A Ctrl-C to runall's process group (as a terminal sends it) while a notebook runs.  The
    interrupt is sent once papermill has marked the 60-second cell as running (or after 120 s
    of waiting), so it lands mid-cell with a ~60 s margin on a loaded machine; the outcome is
    asserted either way: interrupted (130, one line, nothing under the chapter's name) or, had
    the run ended first, a complete notebook (0)."""
    nb = _slow_notebook(tmp_path / "99_slow.ipynb")
    out = tmp_path / "runs"
    # SIGINT as a terminal's foreground job has it (a suite started with & passes it on ignored)
    proc = runall(str(nb), "--out", str(out), start_new_session=True,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        partial = list(out.glob(".99_slow.*.running.ipynb"))
        if partial and _slow_cell_running(partial):
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert "Traceback" not in err, err          # runall's, and the kernel's as it is shut down mid-cell
    lines = [x for x in err.splitlines() if x.strip()]
    if proc.returncode == 130:
        assert lines[-1] == "runall: interrupted (Ctrl-C)", err
        assert [x for x in lines if x.startswith("runall:")] == [lines[-1]], err
        assert not re.search(r'File "[^"]*(labsupport|papermill)/[^"]*\.py"', err), err
        assert sorted(p.name for p in out.iterdir()) == []   # no 99_slow.ipynb, no temporary file
    else:                                       # the run ended before the Ctrl-C reached it
        assert proc.returncode == 0, err
        done = nbformat.read(out / "99_slow.ipynb", as_version=4)
        assert "done" in str(done.cells[-1].get("outputs")), err


@pytest.mark.parametrize("value", ["1", "7"])
def test_parameter_of_the_right_type_passes_the_check(value):
    from labsupport.workbook.runall import _check_parameters

    _check_parameters([REPO_ROOT / "notebooks" / "01_tokenization.ipynb"], {"seed": int(value)})
