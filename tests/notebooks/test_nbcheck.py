"""The shared static notebook check (../shared/tools/nbcheck.py) reports nothing."""
from __future__ import annotations

import subprocess
import sys

import pytest

from labsupport.paths import REPO_ROOT

NBCHECK = REPO_ROOT.parent / "shared" / "tools" / "nbcheck.py"


def test_nbcheck_reports_no_problem():
    if not NBCHECK.is_file():
        pytest.skip(f"{NBCHECK.name} lives in ../shared beside the repository (developers and CI only)")
    proc = subprocess.run([sys.executable, str(NBCHECK), str(REPO_ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0 and "0 problem(s)" in proc.stdout, proc.stdout + proc.stderr
