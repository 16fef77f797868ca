"""Grade submitted exercise notebooks automatically (workbook tooling, every chapter).

    python -m labsupport.grade submissions/*.ipynb --out grades.csv

Each notebook is executed headless (errors do not stop it); every ``check.qN`` it calls is
recorded; the latest attempt per question counts. The CSV has one row per notebook and
question: status, points, max points, and free-text answers flagged for manual grading.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

from labsupport.workbook.nbrun import execute_notebook, headless_env


def grade_notebook(path: Path, timeout: int = 600) -> tuple[list[dict], str]:
    """Execute one notebook; return (latest check results as dicts, run error or "")."""
    fd, report = tempfile.mkstemp(prefix="labsupport-checks-", suffix=".jsonl")
    os.close(fd)
    try:
        _, run = execute_notebook(Path(path), timeout=timeout, allow_errors=True,
                                  env=headless_env(LABSUPPORT_CHECK_REPORT=report))
        with open(report, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    finally:
        os.unlink(report)
    latest: dict[tuple[str, str], dict] = {}
    for row in rows:
        latest[(row["chapter"], row["question"])] = row
    return list(latest.values()), ("" if run.ok else run.error)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labsupport.grade", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="+", help="submitted .ipynb files")
    ap.add_argument("--out", default="grades.csv", help="CSV gradebook to write (default grades.csv)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    fields = ["notebook", "chapter", "question", "status", "points", "max_points", "manual_grading", "run_error"]
    rows: list[dict] = []
    for nb in args.notebooks:
        p = Path(nb)
        if not p.is_file():
            print(f"grade: {nb}: no such notebook", file=sys.stderr)
            return 2
        results, error = grade_notebook(p, args.timeout)
        for r in results:
            rows.append({"notebook": str(p), "chapter": r["chapter"], "question": r["question"],
                         "status": r["status"], "points": r["points"], "max_points": r["max_points"],
                         "manual_grading": json.dumps(r.get("manual") or {}, ensure_ascii=False),
                         "run_error": error})
        got = sum(r["points"] for r in results)
        total = sum(r["max_points"] for r in results)
        print(f"{p}: {got:g}/{total:g}" + (f"  (run stopped early: {error})" if error else ""))
        if not results:
            rows.append({"notebook": str(p), "chapter": "", "question": "", "status": "no checks ran",
                         "points": 0, "max_points": 0, "manual_grading": "{}", "run_error": error})
    tmp = Path(args.out).with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({len(rows)} rows)")
    return 0

