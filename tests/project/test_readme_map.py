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


# Targets the documents name that the test reorganisation of issue #28 adds to the Makefile; allowed
# to be missing only until it lands.
LANDING_WITH_28: set[str] = set()


def _code(document: Path) -> str:
    """The code a document shows: its fenced blocks and inline code spans."""
    text = document.read_text(encoding="utf-8")
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S))
    return "\n".join(fenced + inline)


def _make_targets() -> set[str]:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):(?!=)", makefile, re.M))


def test_every_make_target_the_documents_show_exists():
    targets = _make_targets()
    assert {"lab", "test", "setup", "run-all"} <= targets
    named = {t for doc in DOCUMENTS for t in re.findall(r"\bmake ([a-z][\w-]*)", _code(doc))}
    missing = named - targets - LANDING_WITH_28
    assert not missing, f"the documents show make targets the Makefile lacks: {sorted(missing)}"


def test_every_python_module_the_documents_run_exists():
    import importlib.util

    named = {m for doc in DOCUMENTS
             for m in re.findall(r"python -m ((?:labsupport|benchmarks)(?:\.[a-z_]+)*)", _code(doc))}
    assert "labsupport" in named
    missing = sorted(m for m in named if importlib.util.find_spec(m) is None)
    assert not missing, f"the documents run modules that do not exist: {missing}"


def test_every_labsupport_command_the_documents_run_exists():
    from labsupport.__main__ import ALIASES, COMMANDS

    named = {c for doc in DOCUMENTS for c in re.findall(r"-m labsupport ([a-z][\w-]*)", _code(doc))}
    assert {"grade", "train", "runall"} <= named
    missing = sorted(c for c in named if c not in COMMANDS and c not in ALIASES)
    assert not missing, f"the documents run commands python -m labsupport does not have: {missing}"


def test_only_code_is_read_as_commands(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Set it to make them fail; run `make lab`.\n\n```bash\nmake test  # all\n```\n", encoding="utf-8")
    assert re.findall(r"\bmake ([a-z][\w-]*)", _code(doc)) == ["test", "lab"]
