"""Grading a class: 25 submissions of chapter 3 (the adversarial class of tests/, generated from
solutions/ and exercises/, escape attempts included), graded sequentially and with ``--jobs 2``
in the bubblewrap sandbox with its per-submission limits (the header of the run says which).

Both sides must write the same gradebook (same status and points for every student × question,
except where a limit fired: a memory hog is "failed" or "timed out" depending on load); the
numbers are the seconds per class and per submission.  Issue #22's target: a class of 25 in
under 5 minutes on 2 cores.

    python -m benchmarks grading
"""
from __future__ import annotations

import argparse
import csv
import io
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from benchmarks._common import machine_info, require, write_results
from labsupport.workbook import grade
from labsupport.workbook.grading.sandbox import sandbox_mode

RESULTS = Path(__file__).parent / "results" / "grading.json"


def _grade(folder: Path, out: Path, jobs: int) -> tuple[float, dict]:
    started = time.perf_counter()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        status = grade.main([str(folder), "--out", str(out), "--seed", "bench", "--jobs", str(jobs),
                             "--cell-timeout", "4", "--timeout", "6", "--memory-mb", "1536"])
    seconds = time.perf_counter() - started
    require(status == 0, f"grading with --jobs {jobs} exited {status}")
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    return seconds, {(r["student"], r["question"]): (r["status"].replace("timed out", "failed"), r["points"])
                     for r in rows}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks grading", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=25, help="submissions in the class (default 25)")
    args = ap.parse_args(argv)
    from tests.adversarial_class import build_class  # noqa: PLC0415 - the test suite's class builder (tests/ is not installed), only when this runs

    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        expected = build_class(tmp / "all")
        keep = sorted(expected)[: args.size]
        folder = tmp / "class"
        folder.mkdir()
        for student in keep:
            (tmp / "all" / student).rename(folder / student)
        serial, book1 = _grade(folder, tmp / "one" / "grades.csv", 1)
        parallel, book2 = _grade(folder, tmp / "two" / "grades.csv", 2)
    diff = sorted(k for k in set(book1) | set(book2) if book1.get(k) != book2.get(k))
    require(not diff, f"--jobs 1 and --jobs 2 graded differently: {diff[:5]}")
    result = {
        "machine": machine_info(sandbox=sandbox_mode()),
        "class_size": len(keep),
        "seconds_jobs_1": round(serial, 1),
        "seconds_jobs_2": round(parallel, 1),
        "seconds_per_submission_jobs_1": round(serial / len(keep), 2),
        "target_seconds": 300,
    }
    write_results(RESULTS, result)
    print(f"a class of {len(keep)}: {serial:.1f} s with --jobs 1, {parallel:.1f} s with --jobs 2 "
          f"(target: under 300 s on 2 cores)")
    return result


if __name__ == "__main__":
    main()
