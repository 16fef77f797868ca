"""Static checks of the committed notebooks, without running them (every chapter; ``make nbcheck``).

* ``notebooks/`` and ``solutions/``: committed executed, top to bottom (execution counts 1..n), with
  no error output;
* ``notebooks/``: exactly one cell tagged ``parameters`` (papermill injects after it);
* ``exercises/``: committed without outputs or execution counts;
* everywhere: valid nbformat 4, no machine path in any output (the checkout, a home folder,
  ``/tmp/tmp…``, ``site-packages/``), and no notebook over :data:`MAX_BYTES`.

``python -m labsupport.workbook.nbcheck [ROOT]`` prints one ``nbcheck: <notebook>: <problem>: <what to
do>`` line per problem and a count; exit status 1 when there is any problem, 2 when ROOT has no
notebook folder.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Iterator

import nbformat

from labsupport.paths import REPO_ROOT

FOLDERS = ("notebooks", "solutions", "exercises")
MAX_BYTES = 3_000_000


def _leak_pattern(root: Path) -> re.Pattern[str]:
    return re.compile("(" + re.escape(str(root)) + r"|/root/|/home/[^/\s]+/|/tmp/tmp|site-packages/)")


def _output_texts(cell: dict) -> Iterator[str]:
    for out in cell.get("outputs", []):
        text = out.get("text")
        if text is not None:
            yield "".join(text) if isinstance(text, list) else text
        for mime, value in out.get("data", {}).items():
            if mime.startswith("text/"):
                yield "".join(value) if isinstance(value, list) else str(value)
        if out.get("output_type") == "error":
            yield f"{out.get('ename', '')}: {out.get('evalue', '')}"


def _executed_problems(code: list[dict], leak: re.Pattern[str]) -> Iterator[str]:
    counts = [c.get("execution_count") for c in code if "".join(c.get("source", "")).strip()]
    if any(n is None for n in counts):
        yield (f"{sum(n is None for n in counts)} code cell(s) never executed: "
               "re-run it top to bottom (make outputs) before committing")
    elif counts != list(range(1, len(counts) + 1)):
        yield f"execution counts {counts[:8]} are not 1..n: re-run it top to bottom (make outputs)"
    for i, cell in enumerate(code):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                yield (f"code cell {i} has an error output ({out.get('ename')}): print intended errors with "
                       "try/except instead")
        for text in _output_texts(cell):
            found = leak.search(text)
            if found:
                yield f"code cell {i} shows a machine path ({found.group(0)}…): print it with labsupport.display_path"
                break


def notebook_problems(path: Path, folder: str, root: Path) -> list[str]:
    """Every problem of one notebook, as ``'<what>: <what to do>'`` texts (empty: none)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        nbformat.validate(nbformat.from_dict(nb))
    except (ValueError, nbformat.ValidationError) as exc:
        return [f"not a valid notebook ({str(exc).splitlines()[0][:120]}): repair or regenerate it"]
    if nb.get("nbformat") != 4:
        return [f"nbformat is {nb.get('nbformat')}: save it as nbformat 4"]
    problems = []
    size = path.stat().st_size
    if size > MAX_BYTES:
        problems.append(f"{size / 1e6:.1f} MB: keep committed notebooks small (lower figure dpi, fewer outputs)")
    cells = nb.get("cells", [])
    code = [c for c in cells if c.get("cell_type") == "code"]
    if folder == "exercises":
        if any(c.get("outputs") or c.get("execution_count") for c in code):
            problems.append("has outputs: exercises are generated without outputs (make exercises)")
        return problems
    problems += _executed_problems(code, _leak_pattern(root))
    if folder == "notebooks":
        tagged = sum("parameters" in c.get("metadata", {}).get("tags", []) for c in cells)
        if tagged != 1:
            problems.append(f"{tagged} cells tagged 'parameters': papermill needs exactly one")
    return problems


def problems(root: Path = REPO_ROOT) -> list[str]:
    """``'<notebook>: <problem>'`` for every problem under ``root``'s notebook folders."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}: {p}" for p in notebook_problems(path, folder, root)]
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]).resolve() if args else REPO_ROOT
    if not any((root / f).is_dir() for f in FOLDERS):
        print(f"error: {root}: no notebooks/, solutions/ or exercises/ folder: name the workbook's root",
              file=sys.stderr)
        return 2
    found = problems(root)
    for line in found:
        print(f"nbcheck: {line}")
    print(f"nbcheck: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
