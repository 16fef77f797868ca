"""Tables the chapter notebooks show (chapters 0–5): rendered HTML in JupyterLab, fixed-width text elsewhere.

A :class:`Table` is displayed with IPython's rich display: JupyterLab renders its ``text/html`` (cells wrap at
word boundaries inside their column, so a long identifier never breaks a row in two), while ``text/plain`` — what a
terminal, papermill's log and nbval's comparison read — is the same table as aligned text. Both are built from
the rows alone, so a committed output is reproducible.

    show_table(["key", "value"], [["model.num_layers", 32]], caption="the book's config")
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["Table", "show_table"]


def _cell_text(value: Any) -> str:
    return "" if value is None else str(value)


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
            return f'<{tag} style="text-align:{align}; vertical-align:top">{html.escape(text)}</{tag}>'

        head = "".join(td("th", c, c) for c in self.columns)
        body = "".join("<tr>" + "".join(td("td", c, v) for c, v in zip(self.columns, r)) + "</tr>"
                       for r in self._text_rows())
        caption = f"<caption style=\"text-align:left\">{html.escape(self.caption)}</caption>" if self.caption else ""
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"


def show_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str | None = None,
               numeric: Sequence[str] = (), notes: Sequence[str] = ()) -> None:
    """Display a :class:`Table` in the notebook (HTML in JupyterLab, aligned text headless). Returns None, so a
    call on a cell's last line is not shown twice."""
    from IPython.display import display  # noqa: PLC0415 - IPython only when shown in a notebook (start-up time)

    table = Table(list(columns), [list(r) for r in rows], caption=caption, numeric=tuple(numeric), notes=tuple(notes))
    display(table)
