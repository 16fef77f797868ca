"""Pages that fit a laptop (issue #29, item 5): chapters 0–6's tables fit a 960 px output area without hiding a
column, and the checks' feedback wraps at word boundaries — the HTML and text forms here, and one page measured in
headless Chromium by scripts/browser_check.py (skipped where no Chromium is installed)."""
from __future__ import annotations

import importlib.util
import re

import nbformat
import pytest

from labsupport import stack_facts
from labsupport.env import PAGE_WIDTH, fold, for_the_page, say
from labsupport.pages.tables import FIT_STYLE, Table
from labsupport.paths import REPO_ROOT
from labsupport.training import generations

SCRIPT = REPO_ROOT / "scripts" / "browser_check.py"


def _browser_check():
    spec = importlib.util.spec_from_file_location("browser_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _key_table() -> Table:
    """Chapter 6's config key table (the widest of the workbook: 1,311 px in the old HTML)."""
    rows = [[nemo1, "…", mcore, nemo2, bridge] for _, nemo1, mcore, nemo2, bridge in generations.key_table()]
    return Table(["NeMo 1.x key (this file)", "value here", "GPTDatasetConfig", "NeMo 2.0", "Megatron-Bridge"], rows,
                 caption="configs/megatron_gpt_tiny.yaml with 6 overrides")


# ----------------------------------------------------------------------------- the HTML form

def test_the_table_sits_in_a_box_that_scrolls_sideways_and_wraps_at_words():
    html = Table(["key", "GB"], [["model.tensor_model_parallel_size", "30.1"]], numeric=["GB"])._repr_html_()
    assert html.startswith(f'<div class="labsupport-table" style="{FIT_STYLE}"><table>')
    assert html.endswith("</table></div>")
    for rule in ("max-width:100%", "overflow-x:auto", "overflow-wrap:break-word", "word-break:normal"):
        assert rule in FIT_STYLE


def test_names_get_a_break_opportunity_after_their_separators_numbers_do_not():
    t = Table(["key", "path", "GB"], [["model.tensor_model_parallel_size", "work/indexed/web_text_document", "30.1"]],
              numeric=["GB"])
    html = t._repr_html_()
    assert "model.<wbr>tensor_<wbr>model_<wbr>parallel_<wbr>size" in html
    assert "work/<wbr>indexed/<wbr>web_<wbr>text_<wbr>document" in html
    assert 'style="text-align:right; vertical-align:top">30.1</td>' in html, "no break inside a number"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html)
    assert [c.replace("<wbr>", "") for c in cells] == ["model.tensor_model_parallel_size",
                                                         "work/indexed/web_text_document", "30.1"]


def test_the_text_form_is_unchanged():
    t = Table(["key", "GB"], [["model.tensor_model_parallel_size", "30.1"], ["<b>", "7"]], numeric=["GB"],
              caption="cost", notes=["a note"])
    assert str(t) == ("cost\n"
                      "key                                 GB\n"
                      "--------------------------------  ----\n"
                      "model.tensor_model_parallel_size  30.1\n"
                      "<b>                                  7\n"
                      "a note")
    assert repr(t) == str(t)


# ----------------------------------------------------------------------------- printed feedback

def test_fold_leaves_short_lines_alone_and_breaks_long_ones_between_words():
    assert fold("✅ q1 passed — 25 random cases") == "✅ q1 passed — 25 random cases"
    long = ("❌ q3 failed — model.data.data_prefix entry 3: prefix '/data/code_text_document' has no .bin or .idx "
            "file; preprocess the corpus first (.venv/bin/python -m labsupport preprocess "
            "--tokenizer-library sentencepiece)")
    folded = fold(long)
    lines = folded.split("\n")
    assert len(lines) > 1 and all(len(x) <= PAGE_WIDTH for x in lines)
    assert all(x.startswith("   ") for x in lines[1:]), "continuation lines are indented"
    assert folded.split() == long.split(), "the same words, none cut, in the same order"
    indented = fold("   hint: " + long)
    assert indented.split("\n")[1].startswith("      ")


def test_only_a_notebook_gets_the_folded_form(capsys):
    long = "x " * 80
    assert for_the_page(long) == long, "pytest's capture is not a notebook: one line per message"
    say("a", long)
    assert capsys.readouterr().out == f"a {long}\n"


def test_a_word_longer_than_the_page_stays_whole():
    word = "work/indexed/" + "x" * 150
    assert fold(f"see {word} now").split("\n") == ["see", f"   {word}", "   now"]


# ----------------------------------------------------------------------------- in a real browser

def _chromium(bc):
    chromium = bc.find_chromium()
    if chromium is None:
        pytest.skip("no Chromium on this machine (set CHROMIUM=...): the browser check needs one")
    return chromium


def _table_cell(table_html: str, text: str):
    return nbformat.v4.new_code_cell("show_table(...)", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/html": table_html, "text/plain": text})])


def test_in_chromium_the_new_table_fits_and_the_old_one_hides_columns(tmp_path):
    bc = _browser_check()
    chromium = _chromium(bc)
    new, ch0 = _key_table(), Table(["stack", "setting = default", "what it does here", "source (checked)"],
                                   stack_facts.default_rows())
    digest = "8d220b4e00567a1738da755272e1a6f66eb43fb084b7174ace9a4deb10920af0"   # one word: cannot wrap, scrolls
    hashes = Table([f"fingerprint {i}" for i in range(4)], [[digest] * 4])
    old = re.sub(r'^<div[^>]*>|</div>$', "", new._repr_html_()).replace("<wbr>", "")   # the committed form
    feedback = fold("❌ q3 failed — " + "model.data.data_prefix entry 3 has no .bin or .idx file; " * 6)
    nb = nbformat.v4.new_notebook()
    for table in (new, ch0):
        nb.cells.append(nbformat.v4.new_code_cell("show_table(...)", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/html": table._repr_html_(), "text/plain": str(table)})]))
    nb.cells.append(nbformat.v4.new_code_cell("check.q3(answer)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=feedback + "\n")]))
    nb.cells.append(nbformat.v4.new_code_cell("old", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/html": old, "text/plain": str(new)})]))
    nb.cells.append(nbformat.v4.new_code_cell("hashes", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/html": hashes._repr_html_(), "text/plain": str(hashes)})]))
    path = tmp_path / "fit.ipynb"
    nbformat.write(nb, path)

    entry = bc.check_notebook(chromium, path, tmp_path)
    assert entry["output_area_px"] == bc.OUTPUT_WIDTH
    assert entry["output_tables"] == 4
    by_cell = {t["cell"]: t for t in entry["hidden_columns"]}
    assert set(by_cell) == {3}, f"only the old HTML hides a column: {entry['hidden_columns']}"
    assert "Megatron-Bridge" in by_cell[3]["columns"]
    wide = {t["cell"]: t["scrolls"] for t in entry["tables_wider_than_area"]}
    assert wide == {3: False, 4: True}, "the old table runs off the page; the new one too wide to wrap scrolls"
    assert not entry["table_cut_words"], entry["table_cut_words"]
    assert entry["text_lines_cut_mid_word"] == 0 and entry["text_lines_wrapped"] == 0
    assert bc.failures(entry) and not bc.failures({**entry, "hidden_columns": []})


def test_in_jupyterlab_itself_the_key_table_shows_every_column(tmp_path):
    """The same page in JupyterLab (served on localhost, the notebook untrusted, so its HTML sanitized): the
    sanitizer keeps the scrolling box and the <wbr>s, and the old HTML still runs off the page."""
    bc = _browser_check()
    chromium = _chromium(bc)
    new = _key_table()
    old = re.sub(r'^<div[^>]*>|</div>$', "", new._repr_html_()).replace("<wbr>", "")
    nb = nbformat.v4.new_notebook(cells=[_table_cell(new._repr_html_(), str(new)), _table_cell(old, str(new))])
    path = tmp_path / "fit_lab.ipynb"
    nbformat.write(nb, path)
    work = tmp_path / "lab"
    work.mkdir()
    with bc.JupyterLab(work) as lab:
        entry, _ = bc.check_notebook_in_lab(lab, chromium, path, work, 0, window_width=1392)   # 960 px: one load
    assert entry["renderer"].startswith("JupyterLab") and entry["output_area_px"] == bc.OUTPUT_WIDTH
    assert [t["cell"] for t in entry["hidden_columns"]] == [1], entry["hidden_columns"]
    assert [t["cell"] for t in entry["tables_wider_than_area"]] == [1]
