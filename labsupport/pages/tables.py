"""Tables the chapter notebooks show (chapters 0–6): rendered HTML in JupyterLab, fixed-width text elsewhere.

A :class:`Table` is displayed with IPython's rich display: JupyterLab renders its ``text/html`` (cells wrap at
word boundaries inside their column, so a long identifier never breaks a row in two; a table still wider than the
output scrolls sideways in its own box, so no column is hidden: ``make browser-check`` measures it at 960 px),
while ``text/plain`` — what a terminal, papermill's log and nbval's comparison read — is the same table as aligned
text. Both are built from the rows alone, so a committed output is reproducible.

    show_table(["key", "value"], [["model.num_layers", 32]], caption="the book's config")
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["Table", "show_table"]


def _cell_text(value: Any) -> str:
    return "" if value is None else str(value)


# The HTML form fits an output area of any width (a 960 px one on a laptop) without hiding a column: the table sits
# in a box that scrolls sideways when the table is still wider than the output, and its cells wrap at word
# boundaries (word-break:normal; JupyterLab's own output CSS breaks anywhere), with an extra break opportunity
# (<wbr>) after each '.', '_' and '/' that a letter follows, so model.data.data_prefix or work/indexed/web wraps at
# its dots and slashes, never mid-name. text/plain is not touched by any of this.
FIT_STYLE = "max-width:100%; overflow-x:auto; overflow-wrap:break-word; word-break:normal"
_BREAK_AFTER = re.compile(r"([._/])(?=[A-Za-z])")


def _html_cell(text: str) -> str:
    """``text`` escaped for HTML, with a <wbr> after the separators of a dotted, snake_case or path name."""
    return _BREAK_AFTER.sub(r"\1<wbr>", html.escape(text))


@dataclass(frozen=True)
class Table:
    """Rows of cells under named columns.

    columns: the header, one name per column. rows: one sequence per row, as many cells as columns
    (numbers are shown as given: format them before). numeric: names of right-aligned columns.
    caption: a line above the table; notes: lines below it (shown in full, not as columns).
    """

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str | None = None
    numeric: Sequence[str] = ()
    notes: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"Table row {i} has {len(row)} cells for {len(self.columns)} columns "
                                 f"{list(self.columns)}: "
                                 "give one cell per column")

    def _text_rows(self) -> list[list[str]]:
        return [[_cell_text(v) for v in row] for row in self.rows]

    def __str__(self) -> str:
        rows = self._text_rows()
        widths = [max([len(c)] + [len(r[k]) for r in rows]) for k, c in enumerate(self.columns)]

        def line(cells):
            return "  ".join(cell.rjust(w) if name in self.numeric else cell.ljust(w)
                             for cell, w, name in zip(cells, widths, self.columns)).rstrip()

        out = [self.caption] if self.caption else []
        out += [line(list(self.columns)), "  ".join("-" * w for w in widths)]
        out += [line(r) for r in rows]
        out += list(self.notes)
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def td(tag, name, text):
            align = "right" if name in self.numeric else "left"
            return f'<{tag} style="text-align:{align}; vertical-align:top">{_html_cell(text)}</{tag}>'

        head = "".join(td("th", c, c) for c in self.columns)
        body = "".join("<tr>" + "".join(td("td", c, v) for c, v in zip(self.columns, r)) + "</tr>"
                       for r in self._text_rows())
        caption = f"<caption style=\"text-align:left\">{html.escape(self.caption)}</caption>" if self.caption else ""
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        return (f'<div class="labsupport-table" style="{FIT_STYLE}">'
                f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{notes}")


def show_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str | None = None,
               numeric: Sequence[str] = (), notes: Sequence[str] = ()) -> None:
    """Display a :class:`Table` in the notebook (HTML in JupyterLab, aligned text headless). Returns None, so a
    call on a cell's last line is not shown twice."""
    from IPython.display import display  # noqa: PLC0415 - IPython only when shown in a notebook (start-up time)

    table = Table(list(columns), [list(r) for r in rows], caption=caption, numeric=tuple(numeric), notes=tuple(notes))
    display(table)
