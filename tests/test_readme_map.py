"""The README is a map (issue #28): short, the chapter table near the top with a row per lesson,
and every relative link in README.md, CONTRIBUTING.md and docs/*.md names a file of this repository
(no link leaves it, e.g. to ``../shared``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCUMENTS = [README, REPO_ROOT / "CONTRIBUTING.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CHAPTER_TABLE_HEADER = "| lesson | exercise · solution | book | helper modules | check | tests |"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces → -)."""
    anchors = set()
    in_code = False
    for line in _lines(path):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_readme_is_short():
    lines = _lines(README)
    assert len(lines) <= 140, f"README.md has {len(lines)} lines: move manuals to docs/"
    assert len(README.read_text(encoding="utf-8").split()) < 1200


def test_the_chapter_table_comes_early_with_a_row_per_lesson():
    lines = _lines(README)
    assert CHAPTER_TABLE_HEADER in lines, "README.md: no chapter table"
    start = lines.index(CHAPTER_TABLE_HEADER)
    assert start < 60, f"README.md: the chapter table starts at line {start + 1}"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    lessons = sorted(p.stem for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert lessons, "no notebooks/NN_*.ipynb"
    named = [re.match(r"\| \[`(\w+)`\]\(notebooks/\1\.ipynb\) \|", row) for row in rows]
    assert all(named), [row[:60] for row, m in zip(rows, named) if not m]
    assert [m.group(1) for m in named] == lessons
    for row, lesson in zip(rows, lessons):
        assert f"(exercises/{lesson}.ipynb)" in row and f"(solutions/{lesson}.ipynb)" in row, lesson
        number = lesson[:2]
        assert f"`check/ch{number}`" in row and (REPO_ROOT / "labsupport" / "check" / f"ch{number}.py").is_file()


def _broken_links(document: Path, root: Path = REPO_ROOT) -> list[str]:
    """The relative links of ``document`` that name no file (or heading) inside ``root``."""
    broken = []
    for target in LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):          # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document.resolve()
        if not file.exists() or root.resolve() not in [file, *file.parents]:
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_names_a_file_here(document):
    assert "../shared" not in document.read_text(encoding="utf-8"), \
        f"{document.name} sends the reader outside the repository"
    broken = _broken_links(document)
    assert not broken, f"{document.relative_to(REPO_ROOT)}: links to nothing here: {broken}"


def test_the_link_checker_sees_broken_links(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n", encoding="utf-8")
    doc = tmp_path / "repo" / "x.md"
    doc.write_text("# The title\n[a](x.md#the-title) [b](missing.md) [c](x.md#nothing) [d](../outside.md) "
                   "[e](#the-title) [f](https://example.org/y)\n", encoding="utf-8")
    assert _broken_links(doc, root=tmp_path / "repo") == ["missing.md", "x.md#nothing", "../outside.md"]
