"""Where numba cannot be imported (a platform without a wheel), the workbook still works: a fresh
interpreter with the import blocked builds Megatron's blending indices with the numpy engine and
preprocesses with SentencePiece's encode, each saying why — and gives the same output as here."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from labsupport.paths import REPO_ROOT

#: Runs in a fresh interpreter where ``import numba`` raises ImportError (a None entry in sys.modules).
_SCRIPT = r"""
import json, sys
sys.modules["numba"] = None
from pathlib import Path
import numpy as np
from labsupport.datasets import blending
from labsupport.datasets.blending_numba import numba_problem
from labsupport.datasets.spm_bpe_numba import numba_problem as bpe_numba_problem
from labsupport.datasets.preprocess import preprocess
from labsupport.datasets.tokenizer import workbook_tokenizer
from labsupport.paths import data_file

out = Path(sys.argv[1])
w = np.random.default_rng(3).dirichlet(np.full(40, 0.1))
di, si = blending.build_blending_indices(w, 200_000)
np.save(out / "di.npy", di); np.save(out / "si.npy", si)
res = preprocess([data_file("code")], out / "code", workbook_tokenizer(), append_eod=True, workers=2,
                 show_progress=False, bpe_engine="numba")
print(json.dumps({"numba_problem": numba_problem(), "bpe_numba_problem": bpe_numba_problem(),
                  "engine": blending.blending_engine(), "bpe_engine": res.word_cache["bpe_engine"],
                  "bpe_problem": res.word_cache["bpe_problem"], "numba_loaded": "numba" in sys.modules
                  and sys.modules["numba"] is not None}))
"""


def test_the_workbook_runs_without_numba(tmp_path):
    from labsupport.datasets import blending
    from labsupport.datasets.preprocess import preprocess
    from labsupport.datasets.tokenizer import workbook_tokenizer
    from labsupport.paths import data_file

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba_problem"].startswith("numba could not be imported")
    assert report["bpe_numba_problem"] == report["numba_problem"]
    assert report["engine"] == "numpy" and not report["numba_loaded"]
    assert report["bpe_engine"] == "sentencepiece" and report["bpe_problem"].startswith("numba could not be imported")
    # the same output as with numba here
    w = np.random.default_rng(3).dirichlet(np.full(40, 0.1))
    di, si = blending.build_blending_indices(w, 200_000, engine="numba")
    assert np.array_equal(np.load(tmp_path / "di.npy"), di) and np.array_equal(np.load(tmp_path / "si.npy"), si)
    res = preprocess([data_file("code")], tmp_path / "here", workbook_tokenizer(), append_eod=True,
                     show_progress=False, bpe_engine="numba")
    assert res.word_cache["bpe_engine"] == "numba"
    for ext in (".bin", ".idx"):
        assert ((tmp_path / f"code_text_document{ext}").read_bytes()
                == (tmp_path / f"here_text_document{ext}").read_bytes())
