"""How long a chapter takes a learner: a model of reading and running, from counts of the notebook itself.

Every chapter's title cell states **Time to complete** as this model's value (a test holds them equal, so
the number follows the text when the text changes):

    minutes = lesson words ÷ WORDS_PER_MINUTE + lesson code lines × SECONDS_PER_CODE_LINE ÷ 60
              + RUN_MINUTES_PER_CODE_CELL × lesson code cells,

rounded to the nearest 5 minutes.  The *lesson* is every cell before the ``## Under the hood`` appendix
(the appendix is extra reading); words are the markdown's whitespace-separated words; code lines are the
non-blank lines that are not comments.  The rates are assumptions, not measurements of learners:
180 words a minute is slower than the ~240 measured for silent reading of English non-fiction
(Brysbaert 2019, *J. Memory and Language* 109) because the text is technical and, for the book's
readers, in a second language; 6 s a line is the time to read a line of code and predict what it prints;
half a minute per code cell is running it and looking at its output.  Exercises are not counted.

    .venv/bin/python -m labsupport.workbook.reading_time            # print each chapter's counts
    .venv/bin/python -m labsupport.workbook.reading_time --write    # put the values into the title cells
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import nbformat

__all__ = ["WORDS_PER_MINUTE", "SECONDS_PER_CODE_LINE", "RUN_MINUTES_PER_CODE_CELL", "SENTENCE", "STATED", "Estimate",
           "estimate", "sentence", "stated", "write"]

WORDS_PER_MINUTE = 180
SECONDS_PER_CODE_LINE = 6
RUN_MINUTES_PER_CODE_CELL = 0.5
STATED = re.compile(r"\*\*Time to complete\*\* about \d+ minutes(?: \(a model: [^)]*\))?\.")


@dataclass(frozen=True)
class Estimate:
    """The counts of one chapter's lesson and the model's minutes (rounded to 5)."""

    words: int
    code_lines: int
    code_cells: int

    @property
    def minutes(self) -> int:
        raw = (self.words / WORDS_PER_MINUTE + self.code_lines * SECONDS_PER_CODE_LINE / 60
               + self.code_cells * RUN_MINUTES_PER_CODE_CELL)
        return max(5, 5 * round(raw / 5))


def _lesson(cells: Sequence[Any]) -> Sequence[Any]:
    ends = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Under the hood")]
    return cells[:ends[0]] if ends else cells


def estimate(path: str | Path) -> Estimate:
    """Count the lesson of the notebook at ``path`` (the title cell's own sentence is not counted)."""
    cells = _lesson(nbformat.read(path, as_version=4).cells)
    words = sum(len(STATED.sub("", c.source).split()) for c in cells if c.cell_type == "markdown")
    code = [c for c in cells if c.cell_type == "code"]
    lines = sum(1 for c in code for line in c.source.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return Estimate(words, lines, len(code))


#: the title cell's sentence; another edition translates this template (translations/ko/workbook.po)
SENTENCE = ("**Time to complete** about {minutes} minutes (a model: {words:,} words at {wpm} a minute, {lines} lines "
            "of code at {line_s} s, {cells} cells run at {cell_s:.0f} s; the appendix and the exercises are extra).")


def sentence(est: Estimate, template: str = SENTENCE) -> str:
    """The title cell's sentence for ``est`` (``template``: :data:`SENTENCE` or a translation of it)."""
    return template.format(minutes=est.minutes, words=est.words, wpm=WORDS_PER_MINUTE, lines=est.code_lines,
                           line_s=SECONDS_PER_CODE_LINE, cells=est.code_cells, cell_s=RUN_MINUTES_PER_CODE_CELL * 60)


def stated(path: str | Path) -> str | None:
    """The sentence the title cell states now (None when it has none)."""
    m = STATED.search(nbformat.read(path, as_version=4).cells[0].source)
    return m.group(0) if m else None


def write(path: str | Path) -> bool:
    """Put :func:`sentence` into the title cell; True when the file changed."""
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0]
    new = STATED.sub(sentence(estimate(path)), title.source, count=1)
    if new == title.source:
        return False
    title.source = new
    nbformat.write(nb, path)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the reading-and-running model of each chapter's time")
    parser.add_argument("--write", action="store_true", help="put the values into the title cells")
    args = parser.parse_args(argv)
    from labsupport.paths import REPO_ROOT  # noqa: PLC0415 - only the command needs the repository

    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        est = estimate(path)
        changed = write(path) if args.write else False
        print(f"{path.name}: {est.minutes} min ({est.words} words, {est.code_lines} code lines, "
              f"{est.code_cells} cells){' — written' if changed else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
