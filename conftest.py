"""Test harness shared by all tests: nbval settings, GPU-cell skipping, the megatron fixture."""
from __future__ import annotations

import importlib
import os
import warnings

import pytest

# Notebooks executed by nbval (and the exercise tests) run headless: plain progress bars on
# stderr and static fallbacks for widgets, so their stored output is deterministic.
os.environ.setdefault("LABSUPPORT_HEADLESS", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")

GPU_TAG = "requires-gpu"


def _cuda() -> bool:
    try:
        import torch  # noqa: PLC0415 - torch only for the sessions that ask for it (start-up time)
    except ImportError:  # a partial environment (e.g. checking the data path on another Python)
        return False
    return bool(torch.cuda.is_available())


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("LABSUPPORT_REQUIRE_GPU") == "1" and not _cuda():
        raise pytest.UsageError("make test-gpu: torch sees no CUDA device on this machine")


def pytest_collectstart(collector: pytest.Collector) -> None:
    # stderr holds progress bars and warnings: never compared.
    if collector.__class__.__name__ == "IPyNbFile" and "stderr" not in collector.skip_compare:
        collector.skip_compare = collector.skip_compare + ("stderr",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = _cuda()
    skip_gpu = pytest.mark.skip(reason="requires-gpu cell: no CUDA device (run make test-gpu on a GPU machine)")
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if GPU_TAG in tags:
            if has_cuda:
                # Committed outputs come from a CPU run: execute the cell, don't compare it.
                item.options["check"] = False
            else:
                item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def megatron():
    """The real ``megatron.core.datasets`` package, for cross-checks.

    Skips when megatron-core is not installed, unless ``LABSUPPORT_REQUIRE_CROSSCHECK=1``
    (set by ``make test`` and CI), in which case a missing package is a failure.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            datasets = importlib.import_module("megatron.core.datasets")
            importlib.import_module("megatron.core.datasets.helpers")
            importlib.import_module("megatron.core.datasets.indexed_dataset")
        except ImportError as exc:
            if os.environ.get("LABSUPPORT_REQUIRE_CROSSCHECK") == "1":
                pytest.fail(f"megatron-core is required for cross-checks but cannot be imported: {exc}")
            pytest.skip(f"megatron-core not installed ({exc}); `make test` installs it")
    return datasets
