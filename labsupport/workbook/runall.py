"""Run every chapter headless and print a table — what an instructor runs before class.

    python -m labsupport runall                       # papermill → runs/NN_topic.ipynb
    python -m labsupport runall -p seed 1 01 03       # chapters 01 and 03 with a parameter
    python -m labsupport runall --in-place notebooks solutions   # regenerate committed outputs

The table lists chapter, seconds and status; it is also written to ``<out>/summary.md``.
A ``-p NAME`` that a chapter's ``parameters`` cell does not define, or a value of another type than
its default (``-p seed abc`` where the cell says ``seed = 0``), is refused before anything runs
(papermill itself would only warn and run); ``--dry-run`` stops there.  Each run is written under a
temporary name and renamed when it ends, so a Ctrl-C never leaves a half-run notebook that looks finished.

Exit status: 0 every notebook ran; 1 a notebook failed, or an error (no such chapter, an output
folder that cannot be written — one line on stderr); 2 a usage error (a bad option, an unknown
parameter); 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import ast
import time
import argparse
import os
import sys
import tempfile
from pathlib import Path

from labsupport.workbook.nbrun import (KERNEL, RunResult, first_line, execute_notebook, headless_env,
                                       kernel_manager_with_stderr, process_env, write_notebook)
from labsupport.cli import run_command
from labsupport.paths import REPO_ROOT


def _notebooks(selectors: list[str], default_dir: Path) -> list[Path]:
    if not selectors:
        return sorted(default_dir.glob("[0-9][0-9]_*.ipynb"))
    found: list[Path] = []
    for sel in selectors:
        p = Path(sel)
        if p.is_dir():
            found += sorted(p.glob("[0-9][0-9]_*.ipynb"))
        elif p.suffix == ".ipynb":
            if not p.is_file():
                raise UsageError(f"no notebook {sel}")
            found.append(p)
        else:  # a chapter number such as "02" or "2"
            matches = sorted(default_dir.glob(f"{int(sel):02d}_*.ipynb")) if sel.isdigit() else []
            if not matches:
                raise UsageError(f"no chapter {sel!r} in {default_dir.name}/ (give a number such as 02, "
                                 "a notebook path or a folder)")
            found += matches
    return found


def _papermill(nb: Path, out_dir: Path, params: dict, timeout: int) -> RunResult:

    import papermill as pm  # noqa: PLC0415 - papermill only when a notebook runs (start-up time)

    out = out_dir / nb.name
    # papermill saves its output after every cell: run under a temporary name, so that a Ctrl-C or
    # a kill never leaves a half-run notebook under the chapter's name (it would look finished)
    partial = out_dir / f".{nb.stem}.{os.getpid()}.running.ipynb"
    start = time.perf_counter()
    # the kernel's stderr goes to a file, shown after the run: a Ctrl-C shuts the kernel down in
    # the middle of a cell, and ipykernel then logs a ZMQ traceback that is not runall's one line
    interrupted = False
    with tempfile.TemporaryFile() as kernel_err:
        try:
            with process_env(headless_env()):
                pm.execute_notebook(str(nb), str(partial), parameters=params, kernel_name=KERNEL,
                                    cwd=str(nb.parent), progress_bar=False, execution_timeout=timeout,
                                    kernel_manager_class=kernel_manager_with_stderr(kernel_err))
            os.replace(partial, out)
            return RunResult(nb, time.perf_counter() - start, True)
        except Exception as exc:  # noqa: BLE001 - PapermillExecutionError and kernel failures
            if partial.exists():   # a failed run is kept: papermill marked the failing cell in it
                os.replace(partial, out)
            ename = getattr(exc, "ename", type(exc).__name__)
            evalue = getattr(exc, "evalue", None) or first_line(str(exc))
            return RunResult(nb, time.perf_counter() - start, False, f"{ename}: {evalue}"[:200])
        except KeyboardInterrupt:
            interrupted = True       # the kernel's shutdown traceback is not shown
            raise
        finally:
            partial.unlink(missing_ok=True)   # interrupted (Ctrl-C): nothing under the chapter's name
            if not interrupted:
                _relay(kernel_err)


def _relay(kernel_err) -> None:
    """What the kernel wrote on its stderr (warnings, a crash), after the run, on runall's stderr."""
    kernel_err.seek(0)
    text = kernel_err.read().decode("utf-8", "replace")
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


class UsageError(Exception):
    """A bad selection or parameter; main() prints it as one line and exits 2."""


def _check_parameters(notebooks: list[Path], params: dict) -> None:
    """Refuse a parameter that papermill does not find in a notebook's ``parameters`` cell."""
    import papermill as pm  # noqa: PLC0415 - papermill only when a notebook runs (start-up time)

    for nb in notebooks:
        known = pm.inspect_notebook(str(nb))
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise UsageError(f"{nb.parent.name}/{nb.name} has no parameter {', '.join(map(repr, unknown))}; "
                             f"its parameters: {', '.join(known) or '(none)'}")
        for name, value in params.items():
            _check_type(nb, name, value, known[name])


def _default_type(spec: dict) -> type | None:
    """The type of a parameter's default as the cell writes it (``seed = 0`` → int), or None."""

    try:
        default = ast.literal_eval(str(spec.get("default")))
    except (ValueError, SyntaxError):
        return None
    return None if default is None else type(default)


def _check_type(nb: Path, name: str, value, spec: dict) -> None:
    """Refuse ``-p seed abc`` where the parameters cell says ``seed = 0`` (papermill would run it)."""
    kind = _default_type(spec)
    if kind is None:
        return
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}.get(
              kind, lambda v: isinstance(v, kind))
    if not ok(value):
        raise UsageError(f"-p {name} {value!r}: {nb.parent.name}/{nb.name}'s parameter {name} is {kind.__name__} "
                         f"(default {spec.get('default')}); give a value of that type")


def _parse_value(text: str):
    import yaml  # noqa: PLC0415 - PyYAML comes with papermill (not a declared dependency)

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def format_table(results: list[RunResult]) -> str:
    """A markdown table: chapter, seconds, status (and the first error line)."""
    rows = ["| notebook | seconds | status |", "|---|---:|---|"]
    for r in results:
        status = "ok" if r.ok else f"FAILED — {r.error}"
        rows.append(f"| {r.path.parent.name}/{r.path.name} | {r.seconds:.1f} | {status} |")
    total = sum(r.seconds for r in results)
    rows.append(f"| **total** ({sum(r.ok for r in results)}/{len(results)} ok) | {total:.1f} | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (see the module docstring)."""
    return run_command("runall", lambda: _main(argv), {UsageError: 2})


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labsupport runall", description=__doc__.split("\n\n")[0],
                                 epilog="exit status: 0 all ran, 1 a notebook failed or an error, 2 usage error, "
                                        "130 interrupted")
    ap.add_argument("targets", nargs="*",
                    help="chapter numbers, notebooks or folders (default: every notebooks/NN_*.ipynb)")
    ap.add_argument("--out", default="runs", help="output folder for papermill runs (default: runs/)")
    ap.add_argument("--in-place", action="store_true",
                    help="execute and overwrite the notebooks themselves (make outputs)")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="papermill parameter (YAML-typed value); repeatable")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    ap.add_argument("--dry-run", action="store_true",
                    help="find the chapters and check the parameters, run nothing (exit 0 when a run would start)")
    args = ap.parse_args(argv)

    notebooks = _notebooks(args.targets, REPO_ROOT / "notebooks")
    if not notebooks:
        print("runall: no notebooks found", file=sys.stderr)
        return 1
    params = {k: _parse_value(v) for k, v in args.parameter}
    if args.in_place and params:
        raise UsageError("--in-place regenerates committed outputs with default parameters; drop -p")
    _check_parameters(notebooks, params)
    if args.dry_run:
        for nb in notebooks:
            print(f"would run {nb.parent.name}/{nb.name} with {params or 'its default parameters'}")
        return 0
    results: list[RunResult] = []
    out_dir = Path(args.out)
    if not args.in_place:
        out_dir.mkdir(parents=True, exist_ok=True)
    for nb in notebooks:
        print(f"running {nb.parent.name}/{nb.name} ...", file=sys.stderr, flush=True)
        if args.in_place:
            executed, result = execute_notebook(nb, timeout=args.timeout)
            if result.ok:
                write_notebook(executed, nb)
        else:
            result = _papermill(nb, out_dir, params, args.timeout)
        results.append(result)
    table = format_table(results)
    print(table)
    if not args.in_place:
        (out_dir / "summary.md").write_text(table + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in results) else 1

