"""The shipped corpora match their manifest and have the shapes the chapters rely on."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labsupport.paths import DATA_DIR, DOMAINS, REPO_ROOT, data_file


def test_manifest_matches_the_files():
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "build_data.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", DOMAINS)
def test_domain_corpora_are_text_jsonl(name):
    lines = data_file(name).read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 100
    docs = [json.loads(line) for line in lines]
    assert all(set(d) == {"text"} and isinstance(d["text"], str) and d["text"] for d in docs)


def test_sft_pairs_have_input_and_output():
    docs = [json.loads(line) for line in data_file("sft").read_text(encoding="utf-8").splitlines()]
    assert len(docs) >= 1000
    assert all(set(d) == {"input", "output"} and d["input"] and d["output"] for d in docs)


def test_provenance_and_licences_are_documented():
    readme = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    for name in (*DOMAINS, "sft"):
        assert f"{name}.jsonl" in readme
    for word in ("licen", "Debian"):
        assert word.lower() in readme.lower()
    assert any((DATA_DIR / "LICENSES").iterdir())


def test_code_corpus_keeps_indentation_and_tabs():
    docs = [json.loads(line)["text"] for line in data_file("code").read_text(encoding="utf-8").splitlines()]
    assert any("\n    " in d for d in docs) and any("\t" in d for d in docs)
