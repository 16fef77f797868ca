"""``trainer.deterministic`` (labsupport.training.determinism, chapter 6): the switch validates, sets torch's
deterministic flags before the model is built and says once what it cannot set; off, it touches nothing.
On a CUDA machine (``make test-gpu``) the run is repeated in fresh processes: bitwise equal with the switch
on; without it the outcome is only reported."""
from __future__ import annotations

import os

import pytest
import torch

from labsupport.config import ConfigError
from labsupport.training import determinism as D
from labsupport.training.settings import load_settings
from tests.training import test_faults
from tests.training.test_faults import errors, run_main, tiny

tiny_prefix = test_faults.tiny_prefix   # the 12-document corpus of test_faults (a fixture)
LINE = "train: trainer.deterministic=true set "


def _torch_state() -> tuple[bool, bool, bool, bool, str | None]:
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, os.environ.get(D.CUBLAS_VAR))


@pytest.fixture
def restore_torch():
    """Put torch's global deterministic switches (and CUBLAS_WORKSPACE_CONFIG) back after the test."""
    mode, warn_only, cudnn_det, cudnn_bench, cublas = before = _torch_state()
    yield before
    torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_det, cudnn_bench
    if cublas is None:
        os.environ.pop(D.CUBLAS_VAR, None)
    else:
        os.environ[D.CUBLAS_VAR] = cublas


def test_the_default_is_off_and_a_bad_value_names_the_field():
    assert load_settings().config.trainer.deterministic is False
    assert load_settings(overrides=["trainer.deterministic=true"]).config.trainer.deterministic is True
    with pytest.raises(ConfigError) as info:
        load_settings(overrides=["trainer.deterministic=maybe"])
    assert str(info.value).startswith("trainer.deterministic='maybe': expected true or false"), str(info.value)
    assert "\n" not in str(info.value)


def test_on_a_two_step_cpu_run_sets_torchs_flag_and_says_one_line(tmp_path, capsys, tiny_prefix, restore_torch):
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "trainer.accelerator=cpu",
                           "trainer.deterministic=true", "--log", str(tmp_path / "log.jsonl"))
    assert status == 0 and not errors(err), err
    assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    said = [x for x in err if x.startswith(LINE)]
    assert len(said) == 1, err
    assert "cannot set the order of the all-reduce's additions" in said[0]
    assert "fused or flash attention kernels" in said[0] and "atomics" in said[0]
    assert D.CUBLAS_VAR not in said[0] and os.environ.get(D.CUBLAS_VAR) == restore_torch[4]  # CPU: not touched
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2


def test_off_changes_nothing(capsys, tiny_prefix, restore_torch):
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "trainer.accelerator=cpu")
    assert status == 0 and not errors(err), err
    assert _torch_state() == restore_torch
    assert not [x for x in err if "trainer.deterministic" in x], err


def test_the_line_says_whether_nccl_algo_is_set():
    done = ["torch.use_deterministic_algorithms(True)"]
    assert "NCCL_ALGO is not set" in D.limits_line(done, {})
    assert "NCCL_ALGO=Ring, one of the values" in D.limits_line(done, {"NCCL_ALGO": "Ring"})
    assert "NCCL_ALGO=NVLS, not one of the values" in D.limits_line(done, {"NCCL_ALGO": "NVLS"})
    line = D.limits_line(done, {"NCCL_ALGO": "Ring"}, late_cuda=True)
    assert "Tree, Ring, CollnetDirect, CollnetChain, ^NVLS" in line and "export it before starting Python" in line
    assert "\n" not in line


def test_on_cuda_an_unset_cublas_workspace_is_set_and_a_set_one_kept(restore_torch):
    env: dict[str, str] = {}
    assert D.apply_determinism(True, env)[-1] == "CUBLAS_WORKSPACE_CONFIG=:4096:8" and env[D.CUBLAS_VAR] == ":4096:8"
    env = {D.CUBLAS_VAR: ":16:8"}
    assert D.apply_determinism(True, env)[-1] == "CUBLAS_WORKSPACE_CONFIG=:16:8 (kept)" and env[D.CUBLAS_VAR] == ":16:8"
    env = {}
    assert not any("CUBLAS" in x for x in D.apply_determinism(False, env)) and env == {}


def test_only_rank_0_speaks_and_off_returns_nothing(capsys, restore_torch):
    assert D.setup_determinism(False, torch.device("cpu"), 0) == [] and _torch_state() == restore_torch
    D.setup_determinism(True, torch.device("cpu"), 1)
    assert capsys.readouterr().err == ""
    D.setup_determinism(True, torch.device("cpu"), 0)
    assert capsys.readouterr().err.count(LINE) == 1


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="requires-gpu: no CUDA device (run make test-gpu on a GPU machine)")
def test_on_cuda_repeated_runs_are_bitwise_equal_with_the_switch(record_property):
    """Four fresh processes of chapter 6's run on CUDA (benchmarks/gpu_report.py's reproducibility part)."""
    from benchmarks import gpu_report

    result = gpu_report.reproducibility(torch.device("cuda"), 4)
    on, off = result["deterministic"], result["default"]
    record_property("deterministic_bitwise_equal", on["bitwise_equal"])
    record_property("default_bitwise_equal", off["bitwise_equal"])
    print(f"trainer.deterministic=true: bitwise equal {on['bitwise_equal']}; "
          f"false: bitwise equal {off['bitwise_equal']} (max |difference| {off['max_abs_difference']})")
    assert on["completed"], [r["last_stderr"] for r in on["runs"]]
    assert on["bitwise_equal"], [r["losses"] for r in on["runs"]]
    assert all(r["line"] and "CUBLAS_WORKSPACE_CONFIG=:4096:8" in r["line"] for r in on["runs"]), on["runs"]
    assert off["completed"], [r["last_stderr"] for r in off["runs"]]
