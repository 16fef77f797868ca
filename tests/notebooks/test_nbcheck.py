"""The project's own static notebook check (labsupport/workbook/nbcheck.py, `make nbcheck`): the committed
notebooks pass it, and each problem it looks for is found when planted in a copy."""
from __future__ import annotations

import shutil

import nbformat
import pytest

from labsupport.paths import REPO_ROOT
from labsupport.workbook import nbcheck


def test_the_committed_notebooks_have_no_problem():
    assert nbcheck.problems(REPO_ROOT) == []
    counted = sum(len(list((REPO_ROOT / f).glob("*.ipynb"))) for f in nbcheck.FOLDERS)
    assert counted >= 21, "the check found fewer notebooks than the workbook has"


@pytest.fixture()
def workbook(tmp_path):
    """A copy of chapter 0 in all three folders."""
    for folder in nbcheck.FOLDERS:
        (tmp_path / folder).mkdir()
        shutil.copy(REPO_ROOT / folder / "00_orientation.ipynb", tmp_path / folder)
    assert nbcheck.problems(tmp_path) == []
    return tmp_path


def _edit(path, change):
    nb = nbformat.read(path, as_version=4)
    change(nb)
    nbformat.write(nb, path)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


PLANTS = {
    "error output": ("notebooks", lambda nb: _code(nb)[1].outputs.append(nbformat.v4.new_output(
        "error", ename="ValueError", evalue="x", traceback=[]))),
    "never executed": ("solutions", lambda nb: _code(nb)[2].__setitem__("execution_count", None)),
    "are not 1..n": ("notebooks", lambda nb: _code(nb)[0].__setitem__("execution_count", 7)),
    "machine path": ("solutions", lambda nb: _code(nb)[1].outputs.append(nbformat.v4.new_output(
        "stream", name="stdout", text="/home/someone/work/x.bin\n"))),
    "cells tagged 'parameters'": ("notebooks", lambda nb: _code(nb)[3].metadata.setdefault("tags", []).append(
        "parameters")),
    "has outputs": ("exercises", lambda nb: _code(nb)[0].__setitem__("execution_count", 1)),
}


@pytest.mark.parametrize("what", PLANTS)
def test_a_planted_problem_is_found_with_what_to_do(workbook, what):
    folder, change = PLANTS[what]
    _edit(workbook / folder / "00_orientation.ipynb", change)
    found = nbcheck.problems(workbook)
    assert len(found) == 1 and what in found[0] and found[0].startswith(f"{folder}/00_orientation.ipynb: "), found
    assert ":" in found[0].split(what, 1)[1], f"no 'what to do' part: {found[0]}"


def test_the_checkout_path_is_a_leak_too(workbook):
    _edit(workbook / "notebooks" / "00_orientation.ipynb", lambda nb: _code(nb)[1].outputs.append(
        nbformat.v4.new_output("stream", name="stdout", text=f"{workbook}/data/x\n")))
    assert any("machine path" in p for p in nbcheck.problems(workbook))


def test_a_broken_file_is_one_problem_and_the_command_exits_1(workbook, capsys):
    (workbook / "solutions" / "00_orientation.ipynb").write_text("{not json", encoding="utf-8")
    assert nbcheck.main([str(workbook)]) == 1
    out = capsys.readouterr().out
    assert "solutions/00_orientation.ipynb: not a valid notebook" in out and "1 problem(s)" in out


def test_a_folder_without_notebooks_is_refused_with_exit_2(tmp_path, capsys):
    assert nbcheck.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
