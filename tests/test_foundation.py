"""labsupport's shared pieces: setup/device, paths, configs, orientation arithmetic, runall."""
from __future__ import annotations

import json
import random

import nbformat
import numpy as np
import pytest
import torch

import labsupport
from labsupport import config as cfglib
from labsupport.workbook import orientation, runall
from labsupport.paths import REPO_ROOT, data_file, display_path, work_dir


def test_setup_fixes_every_seed(capsys):
    labsupport.setup(seed=7)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    labsupport.setup(seed=7)
    b = (random.random(), np.random.rand(), torch.rand(1).item())
    assert a == b
    assert "seed 7 · device" in capsys.readouterr().out


def test_device_choice():
    assert labsupport.device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert labsupport.device("auto").type == expected
    with pytest.raises(ValueError, match="auto"):
        labsupport.device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            labsupport.device("cuda")


def test_paths_resolve_from_the_package_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (REPO_ROOT / "labsupport" / "__init__.py").is_file()
    with pytest.raises(FileNotFoundError, match="make data"):
        data_file("no-such-corpus")
    monkeypatch.setenv("LABSUPPORT_WORK", str(tmp_path / "w"))
    p = work_dir("tok")
    assert p.is_dir() and display_path(p / "m.model") == "work/tok/m.model"
    assert display_path(REPO_ROOT / "data" / "web.jsonl") == "data/web.jsonl"


def test_config_overrides_and_layout():
    cfg = cfglib.load_config("gpt_pretrain", ["trainer.num_nodes=8", "+data.num_workers=4"])
    assert cfg.trainer.num_nodes == 8 and cfg.data.num_workers == 4
    layout = cfglib.parallel_layout(cfg)
    assert (layout.world_size, layout.data_parallel) == (64, 4)
    keys = [row[0] for row in cfglib.describe_config(cfglib.load_config())]
    assert "data.data_prefix" in keys and "model.tensor_model_parallel_size" in keys


@pytest.mark.parametrize("overrides, field", [
    (["model.tensor_parallel=4"], "model.tensor_parallel"),
    (["trainer.devices"], "key=value"),
])
def test_config_bad_overrides_name_the_key(overrides, field):
    with pytest.raises(cfglib.ConfigError, match=field):
        cfglib.load_config("gpt_pretrain", overrides)


@pytest.mark.parametrize("overrides, field", [
    (["model.tensor_model_parallel_size=3"], "not divisible"),
    (["model.tensor_model_parallel_size=16"], "exceeds trainer.devices"),
    (["trainer.devices=0"], "trainer.devices must be a positive integer"),
])
def test_impossible_layouts_name_the_field(overrides, field):
    with pytest.raises(cfglib.ConfigError, match=field):
        cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", overrides))


def test_missing_config_file():
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        cfglib.load_config("nope")


def test_memory_arithmetic_contradicts_seed_001_for_full_finetuning():
    assert orientation.training_memory_gb(8e9, "bf16_weights") == pytest.approx(16.0)
    assert orientation.training_memory_gb(8e9, "full_adam") == pytest.approx(128.0)
    assert orientation.training_memory_gb(8e9, "lora") < 80
    for row in orientation.SEED_001_GPU_TABLE:
        assert orientation.training_memory_gb(row.n_params, "full_adam") > row.gpu_memory_gb
    with pytest.raises(ValueError):
        orientation.training_memory_gb(8e9, "sgd")


@pytest.mark.slow
def test_runall_runs_a_chapter_with_parameters(tmp_path, capsys):
    status = runall.main(["--out", str(tmp_path), "-p", "overrides", '["trainer.num_nodes=16"]', "00"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| notebooks/00_orientation.ipynb |" in out and "| ok |" in out
    nb = nbformat.read(tmp_path / "00_orientation.ipynb", as_version=4)
    text = json.dumps([c.get("outputs") for c in nb.cells])
    assert "world_size=128" in text, "the injected override reached the notebook"
    assert (tmp_path / "summary.md").is_file()


@pytest.mark.slow
def test_runall_reports_a_failing_notebook(tmp_path, capsys):
    bad = tmp_path / "99_broken.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise KeyError('boom')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, bad)
    status = runall.main(["--out", str(tmp_path / "out"), str(bad)])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED — KeyError" in out and "boom" in out


@pytest.mark.slow
def test_gpu_cells_are_skipped_without_cuda():
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the requires-gpu cells run here (make test-gpu)")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "notebooks/00_orientation.ipynb"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 skipped" in proc.stdout and "requires-gpu cell: no CUDA device" in proc.stdout


@pytest.mark.slow
def test_grade_cli_writes_a_gradebook(tmp_path, capsys):
    import csv

    from labsupport.workbook import grade

    student = tmp_path / "alice"
    student.mkdir()
    sub = student / "00_orientation.ipynb"
    nb = nbformat.read(REPO_ROOT / "solutions" / "00_orientation.ipynb", as_version=4)
    for cell in nb.cells:  # alice solved q2 only: q1 and q3 keep the exercise stubs
        if cell.cell_type == "code" and ("def data_parallel_size" in cell.source or "def exercise_5" in cell.source):
            cell.source = cell.source.split("### BEGIN SOLUTION")[0] + "    raise NotImplementedError\n"
    nbformat.write(nb, sub)
    out = tmp_path / "book" / "grades.csv"
    assert grade.main([str(sub), "--out", str(out), "--seed", "1"]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert {r["question"]: r["status"] for r in rows} == {"q1": "not attempted", "q2": "passed", "q3": "not attempted"}
    assert all(r["student"] == "alice" and r["chapter"] == "ch00" for r in rows)
    summary = list(csv.DictReader(out.with_name("summary.csv").open(encoding="utf-8")))
    assert summary == [{"student": "alice", "chapter": "ch00", "points": "1", "max_points": "3"}]
    assert "alice" in capsys.readouterr().out
    # a second run skips alice unless --regrade
    assert grade.main([str(sub), "--out", str(out), "--seed", "1"]) == 0
    assert "1 already in grades.csv" in capsys.readouterr().out
