"""`python -m benchmarks` fails when a benchmark's two sides disagree (the contract in benchmarks/_common.py)."""
from __future__ import annotations

import inspect
import sys
import types

import pytest

import benchmarks.__main__ as runner
from benchmarks._common import Mismatch, require


def _fake(monkeypatch, name, main):
    mod = types.ModuleType(f"benchmarks.{name}")
    mod.main = main
    monkeypatch.setitem(sys.modules, f"benchmarks.{name}", mod)


def test_a_mismatch_fails_the_command_and_the_others_still_run(monkeypatch, capsys):
    ran = []

    def good(argv):
        ran.append("good")
        return {"ok": True}

    def bad(argv):
        ran.append("bad")
        require(False, "labsupport and megatron-core differ at sample 7")

    _fake(monkeypatch, "bench_bad", bad)
    _fake(monkeypatch, "bench_good", good)
    assert runner.main(["bench_bad", "good"]) == 1
    assert ran == ["bad", "good"]
    err = capsys.readouterr().err
    assert "bench_bad: Mismatch: labsupport and megatron-core differ at sample 7" in err


def test_a_benchmark_not_returning_its_results_fails(monkeypatch):
    _fake(monkeypatch, "bench_old", lambda argv: 0)
    assert runner.main(["old"]) == 1


def test_all_good_exits_zero(monkeypatch, capsys):
    _fake(monkeypatch, "bench_good", lambda argv: {"ratio": 1.0})
    assert runner.main(["good"]) == 0
    assert "outputs equal on both sides" in capsys.readouterr().out


def test_require_raises_only_on_false():
    require(True, "unused")
    with pytest.raises(Mismatch, match="differ"):
        require(False, "differ")


@pytest.mark.parametrize("name", runner.benchmark_names())
def test_every_benchmark_follows_the_contract(name):
    import importlib
    mod = importlib.import_module(f"benchmarks.{name}")
    sig = inspect.signature(mod.main)
    assert list(sig.parameters) == ["argv"], name
    assert sig.return_annotation in (dict, "dict"), name
