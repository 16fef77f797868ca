"""The GPU report (benchmarks/gpu_report.py) and how notebooks quote it (labsupport.measured_on_gpu).

The real measurement needs CUDA; here the same code runs with ``--device cpu`` at toy sizes, and
the quoting is tested on a results file shaped as a GPU run writes it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import labsupport
from benchmarks import gpu_report

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="10" time="12.5"><testcase classname="a" name="t1"/><testcase classname="a" name="t2">
<skipped message="x"/></testcase><testcase classname="b" name="t3"><skipped message="y"/></testcase>
</testsuite></testsuites>"""


def test_cpu_run_measures_every_part_and_never_counts_as_a_gpu_measurement(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    out = tmp_path / "gpu.json"
    result = gpu_report.main(["--device", "cpu", "--junit", str(junit), "--out", str(out)])
    on_disk = json.loads(out.read_text())
    assert on_disk["attention"]["max_abs_difference"] < 1e-4 and on_disk["attention"]["documents"] > 1
    pt = on_disk["packing_throughput"]
    assert pt["packed"]["real_tokens"] > 0 and pt["padded"]["steps"] == pt["packed"]["steps"] == 3
    assert on_disk["collectives"]["world_size"] == 1 and on_disk["collectives"]["local_copy"]
    assert set(on_disk["collectives"]["alpha_beta_predictions"]) == set(gpu_report.LINKS)
    assert on_disk["end_to_end"]["steps"] == 3 and on_disk["end_to_end"]["median_tokens_per_s"] > 0
    repro = on_disk["reproducibility"]                    # fresh processes; on CPU both settings repeat exactly
    assert repro["deterministic"]["completed"] and repro["deterministic"]["bitwise_equal"], repro["deterministic"]
    assert all(r["line"].startswith("train: trainer.deterministic=true set ") for r in repro["deterministic"]["runs"])
    assert repro["default"]["completed"] and all(r["line"] is None for r in repro["default"]["runs"])
    assert on_disk["test_gpu"]["passed"] == 7 and on_disk["test_gpu"]["skipped"] == 2
    assert on_disk["test_gpu"]["skipped_tests"] == ["a::t2", "b::t3"]
    assert result["environment"]["device_type"] == "cpu"
    # toy numbers are never quoted as GPU measurements
    assert labsupport.measured_on_gpu("attention", out).startswith("No GPU measurement committed yet")


def test_without_cuda_the_report_refuses_with_exit_2(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_report", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, cwd=labsupport.REPO_ROOT)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_bad_junit_file_is_named(tmp_path):
    bad = tmp_path / "junit.xml"
    bad.write_text("<testsuite")
    with pytest.raises(SystemExit, match="cannot read the JUnit log .*junit.xml"):
        gpu_report.junit_summary(bad)


def _gpu_file(tmp_path):
    data = {
        "environment": {"device_type": "cuda", "device_name": "NVIDIA H200", "device_count": 1, "memory_gib": 139.8,
                        "compute_capability": "9.0", "bf16_supported": True, "torch": "2.11.0", "cuda": "13.0",
                        "nccl": "2.28.3", "date_utc": "2026-12-01 10:00"},
        "attention": {"path": "varlen_attn", "max_abs_difference": 0.0078, "dtype": "bfloat16", "seq_length": 4096,
                      "documents": 7},
        "packing_throughput": {"padded": {"real_tokens_per_s": 1000.0}, "packed": {"real_tokens_per_s": 9000.0},
                               "packed_over_padded": 9.0, "parameters": 58e6, "seq_length": 4096,
                               "precision": "bf16 autocast"},
        "collectives": {"note": "one GPU: …", "local_copy": [{"bytes": 1 << 20, "GBps_read_plus_write": 2000.0}],
                        "alpha_beta_predictions": {"NVLink": {"all_reduce": [{"bytes": 1 << 30, "seconds": 0.004,
                                                                              "busbw_GBps": 440.0}]}}},
        "end_to_end": {"config": "configs/megatron_gpt_tiny.yaml", "overrides": ["trainer.precision=bf16"],
                       "steps": 300, "first_loss": 9.1, "last_loss": 4.2, "median_tokens_per_s": 250000.0},
        "test_gpu": {"passed": 900, "failures": 0, "errors": 0, "skipped": 0, "seconds": 300.0},
    }
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("section, needle", [
    ("environment", "make test-gpu: 900 passed, 0 failed, 0 skipped"),
    ("attention", "varlen_attn: max |difference| to per-document SDPA 7.80e-03"),
    ("packing_throughput", "packed / padded: 9.0× (58 M parameters"),
    ("end_to_end", "loss 9.10 → 4.20 in 300 steps, 250,000 tokens/s (median)"),
    ("collectives", "α–β model, NVLink: all_reduce of 1,073,741,824 B ≈ 4.00 ms, busbw 440 GB/s"),
])
def test_notebooks_quote_a_gpu_run(tmp_path, section, needle):
    text = labsupport.measured_on_gpu(section, _gpu_file(tmp_path))
    assert text.startswith("Measured on NVIDIA H200 × 1 (2026-12-01 10:00 UTC, torch 2.11.0, CUDA 13.0, NCCL 2.28.3)")
    assert needle in text


def test_unknown_section_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="no section 'flops'"):
        labsupport.measured_on_gpu("flops", _gpu_file(tmp_path))
    assert "No GPU measurement committed yet" in labsupport.measured_on_gpu("attention", tmp_path / "none.json")
