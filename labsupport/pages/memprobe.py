"""Memory of several data-loader processes reading one token file (chapter 2, §6.2.9 "load everything").

``loader_memory(bin_path, mode, workers)`` starts ``workers`` fresh Python processes that each read
random windows from the same ``.bin`` — after ``np.fromfile`` (``mode="load"``: every process holds
its own copy) or through ``np.memmap`` (``mode="mmap"``: every process maps the same page-cache
pages) — and, while all of them are alive, asks each for its memory:

* ``private_mib``: USS, memory only this process holds (psutil ``memory_full_info().uss``);
* ``file_mib``: resident pages of *this* ``.bin``'s mapping (Linux ``/proc/<pid>/smaps`` via
  psutil ``memory_maps``), so it can never exceed the file size; ``None`` where the OS has no
  per-mapping counts (macOS);
* ``file_pss_mib``: the same pages divided among the processes that share them (PSS) — with W
  processes mapping a fully cached file it is about ``file size / W``.

Run as ``python -m labsupport.pages.memprobe MODE BIN WINDOW SAMPLES`` it is one such worker
(it prints ``ready``, then one JSON line when it reads ``m`` on stdin, then exits on ``x``).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MIB = 2 ** 20


def _measure(bin_path: str) -> dict:
    import psutil  # noqa: PLC0415 - runs in the bare probe subprocess, whose memory is measured

    proc = psutil.Process()
    row = {"private_mib": proc.memory_full_info().uss / MIB, "file_mib": None, "file_pss_mib": None}
    try:
        target = str(Path(bin_path).resolve())
        for m in proc.memory_maps(grouped=True):
            if m.path == target:
                row["file_mib"] = m.rss / MIB
                row["file_pss_mib"] = getattr(m, "pss", m.rss) / MIB
        if row["file_mib"] is None:
            row["file_mib"] = row["file_pss_mib"] = 0.0
    except (AttributeError, NotImplementedError, psutil.AccessDenied):
        pass                                            # no per-mapping counts on this OS
    return row


def _worker(mode: str, bin_path: str, window: int, samples: int) -> None:
    import numpy as np  # noqa: PLC0415 - runs in the bare probe subprocess, whose memory is measured

    if mode == "load":
        tokens = np.fromfile(bin_path, dtype=np.uint16)          # the whole file in private memory
    elif mode == "mmap":
        tokens = np.memmap(bin_path, dtype=np.uint16, mode="r")  # what IndexedDataset does
    else:
        raise SystemExit(f"memprobe: mode must be 'load' or 'mmap', got {mode!r}")
    rng = np.random.default_rng(0)
    total = 0
    for start in rng.integers(0, tokens.size - window, samples):
        total += int(tokens[start:start + window].sum())
    print("ready", flush=True)
    for line in sys.stdin:
        if line.startswith("m"):
            print(json.dumps(_measure(bin_path)), flush=True)
        else:
            break


def loader_memory(bin_path, mode: str, workers: int, *, window: int = 1025, samples: int = 20_000,
                  timeout: float = 120.0) -> list[dict]:
    """Memory of ``workers`` concurrent loader processes (one dict per process, see the module docstring).

    ``window``: tokens per random read; ``samples``: reads per process before measuring (enough to
    touch every page of a small file). Raises RuntimeError with the worker's stderr if one fails.
    """
    cmd = [sys.executable, "-m", "labsupport.pages.memprobe", mode, str(bin_path), str(window), str(samples)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(workers)]
    try:
        for p in procs:                                    # all have read and still hold their memory
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"memprobe worker failed: {p.communicate(timeout=timeout)[1].strip()[-500:]}")
        for p in procs:
            p.stdin.write("m\n")
            p.stdin.flush()
        rows = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            try:
                p.communicate("x\n", timeout=timeout)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                p.kill()
    return rows


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
