"""The Korean edition (한국어판) is generated from the English notebooks and translations/ko/*.po, and kept in step.

The Korean notebooks need no nbval run of their own: their code cells, tags, ids and outputs are the English
edition's (``test_code_tags_ids_and_outputs_are_the_english_editions`` holds them equal), and the English
notebooks are executed and compared by nbval.  So ``ko/`` is not in pytest's ``testpaths``.
"""
from __future__ import annotations

import re
import shutil

import nbformat
import polib
import pytest

from labsupport.check import texts
from labsupport.paths import REPO_ROOT
from labsupport.workbook import translations
from labsupport.workbook.translations import Edition, anchor

KO = Edition("ko")
PAIRS = [(folder, p.name) for folder in ("notebooks", "solutions", "exercises")
         for p in sorted((REPO_ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def test_the_committed_edition_is_what_make_translations_writes_and_every_cell_is_translated():
    """Fails naming the catalog entry or file, and what to do: a cell without a Korean entry, an entry that
    translates an older English text (fuzzy), a translation that drops a code span, link or {field}, a
    generated notebook that differs from what `make translations` writes."""
    found = translations.problems(KO)
    assert not found, "\n".join(found[:40]) + (f"\n… and {len(found) - 40} more" if len(found) > 40 else "")


@pytest.mark.parametrize("folder,name", PAIRS, ids=[f"{f}/{n[:2]}" for f, n in PAIRS])
def test_code_tags_ids_and_outputs_are_the_english_editions(folder, name):
    english = nbformat.read(REPO_ROOT / folder / name, as_version=4)
    korean = nbformat.read(KO.out / folder / name, as_version=4)
    assert [c.id for c in korean.cells] == [c.id for c in english.cells], f"ko/{folder}/{name}: cell ids differ"
    for en, ko in zip(english.cells, korean.cells):
        where = f"ko/{folder}/{name}, cell {en.id}"
        assert ko.cell_type == en.cell_type and ko.metadata == en.metadata, f"{where}: type or tags differ"
        if en.cell_type == "code":
            assert (ko.source, ko.outputs, ko.execution_count) == (en.source, en.outputs, en.execution_count), \
                f"{where}: code or outputs differ from the English edition"


@pytest.mark.parametrize("folder,name", PAIRS, ids=[f"{f}/{n[:2]}" for f, n in PAIRS])
def test_korean_markdown_is_korean_and_links_to_headings_resolve(folder, name):
    for root in (REPO_ROOT, KO.out):
        nb = nbformat.read(root / folder / name, as_version=4)
        md = [c for c in nb.cells if c.cell_type == "markdown"]
        targets = {anchor(line) for c in md for line in c.source.splitlines() if re.match(r"#{1,6} ", line)}
        for cell in md:
            for link in translations.ANCHOR_LINK.findall(cell.source):
                assert link in targets, f"{root.name}/{folder}/{name}, cell {cell.id}: no heading for #{link}"
            if root == KO.out and len(re.findall(r"[A-Za-z]{3,}", re.sub(r"`[^`]*`", "", cell.source))) > 3:
                assert HANGUL.search(cell.source), f"ko/{folder}/{name}, cell {cell.id}: no Korean in it"


def _tiny_repo(tmp_path):
    root = tmp_path / "repo"
    for folder in ("notebooks", "solutions"):
        (root / folder).mkdir(parents=True)
        shutil.copy(REPO_ROOT / folder / "03_blending.ipynb", root / folder)
    shutil.copytree(KO.catalogs, root / "translations" / "ko")
    (root / "labsupport" / "check" / "texts").mkdir(parents=True)
    shutil.copy(texts.TEXT_DIR / "ko.po", root / "labsupport" / "check" / "texts")
    return Edition("ko", root)


def _write(edition):
    for path, text in translations.generate(edition).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_an_english_change_marks_its_entry_stale_and_the_page_keeps_the_new_english(tmp_path):
    edition = _tiny_repo(tmp_path)
    _write(edition)
    assert not [p for p in translations.problems(edition) if "03_blending" in p]
    path = edition.root / "notebooks" / "03_blending.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and c.id != nb.cells[0].id)
    old_english = cell.source
    cell.source += "\n\nA sentence added to the English."
    nbformat.write(nb, path)
    found = translations.problems(edition)
    assert any(f"[notebooks/03_blending.ipynb#{cell.id}]" in p and "older English text (fuzzy)" in p
               for p in found), found
    assert any(p.startswith("ko/notebooks/03_blending.ipynb: not what") for p in found), found
    _write(edition)
    entry = next(e for e in polib.pofile(str(edition.catalog("03_blending"))) if e.msgctxt.endswith(cell.id))
    assert "fuzzy" in entry.flags and entry.previous_msgid == old_english and entry.msgstr
    page = nbformat.read(edition.out / "notebooks" / "03_blending.ipynb", as_version=4)
    assert next(c for c in page.cells if c.id == cell.id).source.endswith("A sentence added to the English.")
    assert not any("not what" in p for p in translations.problems(edition))


def test_a_new_english_cell_is_named_until_it_is_translated(tmp_path):
    edition = _tiny_repo(tmp_path)
    path = edition.root / "solutions" / "03_blending.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(3, nbformat.v4.new_markdown_cell("A new paragraph.", id="brand-new"))
    nbformat.write(nb, path)
    _write(edition)
    found = translations.problems(edition)
    assert any("[solutions/03_blending.ipynb#brand-new]: no translation" in p for p in found), found
    catalog = polib.pofile(str(edition.catalog("03_blending")))
    catalog.find("A new paragraph.", msgctxt="solutions/03_blending.ipynb#brand-new").msgstr = "새 문단."
    catalog.save()
    _write(edition)
    assert not translations.problems(edition)
    ko = nbformat.read(edition.out / "exercises" / "03_blending.ipynb", as_version=4)
    assert any(c.source == "새 문단." for c in ko.cells)


def test_a_translation_that_drops_a_code_span_or_a_field_is_named():
    entry = polib.POEntry(msgctxt="notebooks/x.ipynb#a", msgid="Run `make test` now.", msgstr="지금 실행하세요.")
    assert "drops 'make test'" in translations.entry_problems(entry, "x")[0]
    template = polib.POEntry(msgid="{call} returned {got}", msgstr="{call}의 결과는 {value}")
    assert "{fields}" in translations.entry_problems(template, "x")[0]


def test_feedback_follows_the_language_chosen(monkeypatch):
    from labsupport.check import ch01 as check  # noqa: PLC0415 - the chapter's check module, as a learner imports it
    from labsupport.check._core import _hint_for  # noqa: PLC0415
    from labsupport.check.rules import _render  # noqa: PLC0415

    rule = check.TEXTS["q1"].rules["tie_not_first"]
    facts = {"call": "merge_step([1, 2])", "pair": (1, 2), "want_pair": (2, 3), "times": "twice"}
    try:
        assert check.language() == "en" and _render(rule["symptom"], facts).startswith("merge_step([1, 2]) merged")
        assert check.language("ko") == "ko"
        korean = _render(rule["symptom"], facts)
        assert HANGUL.search(korean) and "merge_step([1, 2])" in korean and "(2, 3)" in korean
        assert HANGUL.search(_hint_for(check.TEXTS["q1"].hint, 1))
        with pytest.raises(ValueError, match="choose one of en, ko"):
            check.language("fr")
    finally:
        check.language("en")
    assert _render(rule["symptom"], facts).startswith("merge_step([1, 2]) merged")


def test_every_feedback_text_is_in_the_catalog_with_its_fields():
    catalog = polib.pofile(str(texts.TEXT_DIR / "ko.po"))
    translated = {e.msgid: e.msgstr for e in catalog if e.msgstr and "fuzzy" not in e.flags}
    for chapter in sorted(p.stem for p in texts.TEXT_DIR.glob("ch[0-9][0-9].toml")):
        for where, english in texts.text_leaves(chapter):
            if ".options." in f".{where}.":
                continue
            assert english in translated, f"labsupport/check/texts/ko.po: no translation of {chapter}.toml {where}"
            for value in ("x", 1.5):              # whatever fills the English template fills the Korean one
                try:
                    english.format_map(_Any(value))
                except (ValueError, TypeError, IndexError):
                    continue
                translated[english].format_map(_Any(value))


class _Any(dict):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def __missing__(self, key):
        return self.value


@pytest.mark.slow
def test_a_korean_submission_is_graded_as_the_english_one():
    from labsupport.workbook.grading.exercise import discover  # noqa: PLC0415 - the grader, as grade runs it
    from labsupport.workbook.grading.grader import Options, grade_file  # noqa: PLC0415

    chapters = discover()
    for folder in ("solutions", "exercises"):
        rows = {}
        for root in (REPO_ROOT, KO.out):
            graded = grade_file(root / folder / "03_blending.ipynb", chapters, Options(seed="tests", rounds=1))
            rows[root] = [(r.question, r.status, r.points, r.flags) for r in graded.rows]
        assert rows[KO.out] == rows[REPO_ROOT], f"{folder}: Korean {rows[KO.out]} != English {rows[REPO_ROOT]}"
        assert rows[REPO_ROOT]


def test_a_cell_removed_then_restored_gets_its_translation_back(tmp_path):
    edition = _tiny_repo(tmp_path)
    path = edition.root / "notebooks" / "03_blending.ipynb"
    original = path.read_text(encoding="utf-8")
    nb = nbformat.read(path, as_version=4)
    gone = next(c for c in nb.cells[1:] if c.cell_type == "markdown")
    nb.cells.remove(gone)
    nbformat.write(nb, path)
    _write(edition)
    catalog = polib.pofile(str(edition.catalog("03_blending")))
    entry = catalog.find(gone.source, msgctxt=f"notebooks/03_blending.ipynb#{gone.id}", include_obsolete_entries=True)
    assert entry is not None and entry.obsolete and entry.msgstr
    path.write_text(original, encoding="utf-8")
    _write(edition)
    assert not translations.problems(edition)


def test_a_solutions_title_without_the_replaced_words_is_named(tmp_path):
    edition = _tiny_repo(tmp_path)
    catalog = polib.pofile(str(edition.catalog("03_blending")))
    title = next(e for e in catalog if e.msgctxt.startswith("solutions/"))
    title.msgstr = title.msgstr.replace("연습 문제와 풀이", "풀이가 있는 연습 문제")
    catalog.save()
    _write(edition)
    assert any("the title lacks '연습 문제와 풀이'" in p for p in translations.problems(edition))
