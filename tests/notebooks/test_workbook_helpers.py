"""Workbook helpers of chapters 0 and 2: the dated framework advice, PyTorch's built-ins, the
loader-memory probe (one shared page cache vs a copy per process) and the starvation arithmetic."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from labsupport.pages import envcheck, figures, memprobe


def test_framework_status_names_each_project_of_the_qa_with_a_source():
    names = [row[0] for row in envcheck.FRAMEWORK_STATUS]
    assert names[:3] == ["Horovod", "FairScale", "DeepSpeed"] and any("FP16" in n for n in names)
    for project, qa_says, status, source in envcheck.FRAMEWORK_STATUS:
        assert qa_says and status and ("github.com/" in source or "datasheet" in source), project
    assert "v0.28.1" in envcheck.FRAMEWORK_STATUS[0][2] and "2023-06-12" in envcheck.FRAMEWORK_STATUS[0][2]


def test_pytorch_builtins_are_shown_by_using_them():
    facts = envcheck.pytorch_builtins()
    assert facts["bf16 autocast"].endswith("torch.bfloat16")          # the autocast really produced bf16
    assert facts["DDP"].endswith("DistributedDataParallel")


def test_checklist_has_a_precision_row_and_names_the_source_by_content():
    rows = envcheck.checklist_rows(envcheck.environment_report())
    assert [r[0] for r in rows] == ["accelerator", "software", "precision", "communication", "memory", "storage"]
    assert "seed" not in (envcheck.__doc__ or "").lower() and "Q&A" in envcheck.__doc__


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-mapping counts (smaps) are Linux-only")
def test_mmap_loaders_share_one_page_cache_and_loaders_that_load_each_hold_a_copy(tmp_path):
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 8000, 8 * 2**20 // 2, dtype=np.uint16).tofile(path)   # 8 MiB
    size = path.stat().st_size / 2**20
    mmap = memprobe.loader_memory(path, "mmap", 2, samples=20_000)
    load = memprobe.loader_memory(path, "load", 2, samples=200)
    for row in mmap:
        assert row["file_mib"] <= size + 0.01                              # never more than the file
        assert row["file_mib"] > 0.5 * size                                # random reads touched most of it
        assert row["file_pss_mib"] == pytest.approx(row["file_mib"] / 2, rel=0.2)   # shared by the two
    for a, m in zip(load, mmap):
        assert a["private_mib"] - m["private_mib"] > 0.9 * size             # each loader holds its own copy
    with pytest.raises(RuntimeError, match="mode must be"):
        memprobe.loader_memory(path, "copy", 1)


def test_starvation_arithmetic():
    # 6·N + 12·L·d·T FLOPs per token (PaLM appendix B) at 40 % of 989 TFLOPS; GPT-3 6.7B: L = 32, d = 4096
    assert figures.flops_per_token(6.7e9) == pytest.approx(6 * 6.7e9 + 12 * 32 * 4096 * 4096)
    assert figures.gpu_tokens_per_second(6.7e9) == pytest.approx(0.4 * 989e12 / (6 * 6.7e9 + 12 * 32 * 4096 ** 2))
    assert figures.flops_per_token(125e6, seq_length=2048) == pytest.approx(6 * 125e6 + 12 * 12 * 768 * 2048)
    assert figures.flops_per_token(70e9) > 6 * 70e9                        # the attention term is never dropped
    n = figures.crossing_params(3.0e5)
    assert figures.gpu_tokens_per_second(n) == pytest.approx(3.0e5)
    n8 = figures.crossing_params(3.0e5, gpus=8)
    assert 8 * figures.gpu_tokens_per_second(n8) == pytest.approx(3.0e5) and n8 > n
    assert np.isnan(figures.crossing_params(1.0e9))                    # faster than any GPU model eats
