"""labsupport's shared pieces: setup/device, paths, configs, orientation arithmetic, runall."""
from __future__ import annotations

import json
import random
import re

import nbformat
import numpy as np
import pytest
import torch

import labsupport
from labsupport import config as cfglib
from labsupport.distributed import gpu_grid, training_memory
from labsupport.workbook import runall
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
    notes = {row[0]: row[2] for row in cfglib.describe_config(cfglib.load_config())}
    assert notes["data.data_prefix"].endswith("NeMo 1.x: model.data.data_prefix")
    assert notes["model.precision"].endswith("NeMo 1.x: trainer.precision")
    assert "NeMo 1.x" not in notes["trainer.devices"]          # same path in both


@pytest.mark.parametrize("overrides, field", [
    (["model.tensor_parallel=4"], "model.tensor_parallel"),
    (["trainer.devices"], "key=value"),
])
def test_config_bad_overrides_name_the_key(overrides, field):
    with pytest.raises(cfglib.ConfigError, match=field):
        cfglib.load_config("gpt_pretrain", overrides)


@pytest.mark.parametrize("overrides, field", [
    (["model.tensor_model_parallel_size=3"], "not divisible"),
    (["trainer.devices=0"], "trainer.devices must be a positive integer"),
])
def test_impossible_layouts_name_the_field(overrides, field):
    with pytest.raises(cfglib.ConfigError, match=field):
        cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", overrides))


def test_tp_across_nodes_is_legal_and_warns_with_its_cost():
    cfg = cfglib.load_config("gpt_pretrain", ["model.tensor_model_parallel_size=16"])
    layout = cfglib.parallel_layout(cfg)                  # Megatron's rule: 32 % (16 × 2) == 0
    assert (layout.data_parallel, layout.tp_nodes, layout.tp_spans_nodes) == (1, 2, True)
    with pytest.warns(gpu_grid.TensorParallelAcrossNodesWarning) as record:
        assert gpu_grid.check_layout(cfg) == layout
    message = str(record[0].message)
    cost = gpu_grid.tp_step_cost(cfg, layout)
    # NCCL's model: the ring leaves each node over its 8 NICs (400 GB/s), 14 µs per network hop
    assert cost.busbw_GBps == pytest.approx(400.0) and cost.nodes == 2
    assert cost.nvlink_s < cost.seconds < 2 * cost.nvlink_s
    for part in ("model.tensor_model_parallel_size=16", "trainer.devices=8", "2 nodes",
                 f"{cost.seconds:.2f} s", f"{cost.nvlink_s:.2f} s", "400 GB/s", "14 µs"):
        assert part in message, (part, message)


def test_tp_inside_a_node_does_not_warn(recwarn):
    layout = gpu_grid.check_layout(cfglib.load_config("gpt_pretrain"))
    assert not layout.tp_spans_nodes and layout.tp_nodes == 1
    assert not [w for w in recwarn if issubclass(w.category, gpu_grid.TensorParallelAcrossNodesWarning)]


def test_tp_cost_uses_chapter_5s_traffic_table_and_nccls_latencies():
    from labsupport.distributed import collectives as C
    from labsupport.distributed import nccl_tuning as T
    from labsupport.distributed.hardware import H100_SXM_NODE
    cfg = cfglib.load_config("gpt_pretrain")
    layout = cfglib.parallel_layout(cfg)
    cost = gpu_grid.tp_step_cost(cfg, layout)
    h, L = cfg.model.hidden_size, cfg.model.num_layers
    rows = C.training_traffic(params=12 * L * h * h + 32000 * h, hidden=h, layers=L, seq_len=cfg.data.seq_length,
                              micro_batch=1, micro_batches=8, dp=2, tp=8, pp=2)
    assert cost.tp_bytes_per_rank == sum(r["bytes_per_rank"] for r in rows if r["parallelism"] == "TP")
    assert cost.tokens_per_step == 8 * 4096 and cost.ops_per_step == 2 * 4 * (L // 2) * 8
    # one node: bus bytes at one GPU's NVLink, plus NCCL's ring latency 8.4 + 7 × 3.4 µs per call
    assert cost.bandwidth_s == pytest.approx(cost.tp_bytes_per_rank / (H100_SXM_NODE.nvlink_GBps * 1e9))
    assert T.ring_latency_us("all_gather", 8, 1) == pytest.approx(8.4 + 7 * 3.4)
    assert cost.latency_s == pytest.approx(cost.ops_per_step * (8.4 + 7 * 3.4) * 1e-6)
    assert cost.seconds == pytest.approx(cost.nvlink_s)


def test_megatron_rules_beyond_world_divisibility():
    base = cfglib.load_config("gpt_pretrain")
    assert cfglib.parallel_layout(base).data_parallel == 2
    for overrides, field in ((["+model.num_attention_heads=12"], "model.num_attention_heads = 12"),
                             (["+model.num_attention_heads=32", "+model.num_query_groups=3"],
                              "model.num_query_groups = 3"),
                             (["trainer.num_nodes=3", "model.pipeline_model_parallel_size=3"], "model.num_layers = 32"),
                             (["+model.context_parallel_size=3"], "model.context_parallel_size")):
        with pytest.raises(cfglib.ConfigError, match=field.replace("+", r"\+")):
            cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", overrides))
    assert cfglib.parallel_layout(cfglib.load_config(
        "gpt_pretrain", ["+model.num_attention_heads=32", "+model.num_query_groups=4"])).data_parallel == 2
    layout = cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", ["+model.context_parallel_size=2"]))
    assert layout.data_parallel == 1


#: (overrides that break one rule, the rule's name, a field its message names); issue #30's four added rules
_BROKEN = (
    (["+model.ffn_hidden_size=11006"], "the FFN hidden size divides by TP", "model.ffn_hidden_size = 11006"),
    (["+model.sequence_parallel=true", "data.seq_length=4100"], "the sequence divides by TP with sequence parallelism",
     "data.seq_length = 4100"),
    (["+model.context_parallel_size=2", "data.seq_length=4098"], "the sequence divides by 2 × CP with context "
     "parallelism", "2 × model.context_parallel_size = 2×2"),
    (["+model.virtual_pipeline_model_parallel_size=3"], "the layers divide by PP × VP (interleaved)",
     "model.virtual_pipeline_model_parallel_size = 2×3"),
)


@pytest.mark.parametrize("overrides, rule, field", _BROKEN, ids=[b[1] for b in _BROKEN])
def test_each_added_rule_refuses_a_layout_that_breaks_it(overrides, rule, field):
    cfg = cfglib.load_config("gpt_pretrain", overrides)
    with pytest.raises(cfglib.ConfigError, match=re.escape(field)):
        cfglib.parallel_layout(cfg)
    v = cfglib.layout_sizes(cfg)
    broken = [r.name for r in cfglib.LAYOUT_RULES if r.applies(v) and not r.holds(v)]
    assert broken == [rule]                                    # exactly the named row fails


def test_added_rules_accept_layouts_that_keep_them():
    for overrides in (["+model.ffn_hidden_size=16384"], ["+model.sequence_parallel=true"],
                      ["+model.context_parallel_size=2"], ["+model.virtual_pipeline_model_parallel_size=4"],
                      ["+model.sequence_parallel=false", "data.seq_length=4100"]):
        assert cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", overrides)).world_size == 32
    with pytest.raises(cfglib.ConfigError, match="model.sequence_parallel must be true or false"):
        cfglib.parallel_layout(cfglib.load_config("gpt_pretrain", ["+model.sequence_parallel=3"]))


def test_every_rule_names_its_megatron_source_line():
    assert len(cfglib.LAYOUT_RULES) == 8 and len({r.name for r in cfglib.LAYOUT_RULES}) == 8
    for rule in cfglib.LAYOUT_RULES:
        assert re.match(r"core_v0\.16\.1 megatron/\S+\.py:\d+", rule.source), rule


def test_megatron_core_raises_on_the_same_rules(megatron):
    from labsupport.pages import megatron_rules
    rows = megatron_rules.broken_rules()
    assert [r[0] for r in rows] == [c[0] for c in megatron_rules.CASES]
    assert "num_attention_heads (12) must be a multiple of tensor_model_parallel_size (8)" in rows[0][2]
    assert "num_query_groups (3)" in rows[1][2]
    # 0.16.1: "num_layers should be divisible by pipeline_model_parallel_size";
    # 0.19.2: "num_layers=30 should be divisible by config.pipeline_model_parallel_size=4"
    assert re.search(r"num_layers\S* should be divisible by (config\.)?pipeline_model_parallel_size",
                     rows[2][2]), rows[2]
    assert "world_size (1) is not divisible by 2" in rows[3][2]
    assert "11006 is not divisible by 8" in rows[4][2]
    assert re.search(r"should be divisible by vp_size 4", rows[5][2]), rows[5]


def test_megatron_rank_order():
    # tp-cp-ep-dp-pp: TP fastest, then DP, then PP
    assert gpu_grid.megatron_coords(13, tp=8, pp=2, dp=2) == (5, 0, 1)
    assert gpu_grid.megatron_coords(16, tp=8, pp=2, dp=2) == (0, 1, 0)
    coords = {gpu_grid.megatron_coords(r, 4, 2, 3) for r in range(24)}
    assert len(coords) == 24                                  # every GPU gets its own (tp, pp, dp)
    with pytest.raises(ValueError, match="rank must be in"):
        gpu_grid.megatron_coords(24, 4, 2, 3)


def test_megatron_rank_order_matches_megatron_core(megatron):
    from megatron.core.parallel_state import RankGenerator
    gen = RankGenerator(tp=4, ep=1, dp=3, pp=2, cp=1, order="tp-cp-ep-dp-pp")
    for name, axis in (("tp", 0), ("pp", 1), ("dp", 2)):
        for group in gen.get_ranks(name):
            others = {tuple(v for i, v in enumerate(gpu_grid.megatron_coords(r, 4, 2, 3)) if i != axis)
                      for r in group}
            assert len(others) == 1, (name, group)            # a group varies only its own axis


def test_missing_config_file():
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        cfglib.load_config("nope")


def test_memory_arithmetic_contradicts_seed_001_for_full_finetuning():
    assert training_memory.training_memory_gb(8e9, "bf16_weights") == pytest.approx(16.0)
    assert training_memory.training_memory_gb(8e9, "zero_adam") == pytest.approx(128.0)
    assert training_memory.training_memory_gb(8e9, "megatron_adam") == pytest.approx(144.0)
    assert training_memory.training_memory_gb(8e9, "megatron_distopt", dp=8) == pytest.approx(8 * 7.5)
    assert training_memory.training_memory_gb(8e9, "megatron_distopt", dp=1) == pytest.approx(144.0)
    assert training_memory.training_memory_gb(8e9, "lora") < 80
    for row in training_memory.K8S_GUIDE_GPU_TABLE:
        assert training_memory.training_memory_gb(row.n_params, "megatron_adam") > row.gpu_memory_gb
    with pytest.raises(ValueError):
        training_memory.training_memory_gb(8e9, "sgd")
    with pytest.raises(ValueError, match="dp"):
        training_memory.training_memory_gb(8e9, "megatron_distopt", dp=0)


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
    for cell in nb.cells:  # alice solved q2–q4: q1 keeps the exercise stub
        if cell.cell_type == "code" and "def data_parallel_size" in cell.source:
            cell.source = cell.source.split("### BEGIN SOLUTION")[0] + "    raise NotImplementedError\n"
    nbformat.write(nb, sub)
    out = tmp_path / "book" / "grades.csv"
    assert grade.main([str(sub), "--out", str(out), "--seed", "1"]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert {r["question"]: r["status"] for r in rows} == {"q1": "not attempted", "q2": "passed", "q3": "passed",
                                                                  "q4": "passed"}
    assert all(r["student"] == "alice" and r["chapter"] == "ch00" for r in rows)
    summary = list(csv.DictReader(out.with_name("summary.csv").open(encoding="utf-8")))
    assert summary == [{"student": "alice", "chapter": "ch00", "points": "3", "max_points": "4"}]
    assert "alice" in capsys.readouterr().out
    # a second run skips alice unless --regrade
    assert grade.main([str(sub), "--out", str(out), "--seed", "1"]) == 0
    assert "1 already in grades.csv" in capsys.readouterr().out
