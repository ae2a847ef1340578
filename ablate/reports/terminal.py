"""A report ``Table`` on a terminal: a rich table that fits the terminal's width.

The same Table the other formats read (its cells as the builders wrote them), laid out for a reader at a
terminal of 80 or 100 columns, where the markdown's 150-300-column lines would wrap into noise:

- each column is as wide as its widest cell when every column fits; else the headers wrap first, then the
  descriptors at spaces, then the rows' labels, then the numbers, only between their parts (a mean, its ±
  spread, its interval, the words of its note), never inside a number; the columns that wrap share the room
  so that their tallest cells take the fewest lines (``fit_widths``);
- where a row would still be taller than ``TALL`` lines, or even the longest pieces do not fit, columns
  leave: those the report names first (``leave_out``: for the comparison table the pairing's reading, then
  the reference's mean), else the descriptors, the rightmost first; and a note names them;
- a paper table shows the rows the grid ran, and a note says how many of the paper's rows have none;
- a group (a metric and cell, a block of the paper's rows) is a line of its own above its rows;
- the notes follow, wrapped to the width, less what a shown column already says row by row
  (``said_by``); bold is a significant delta, as in every other format.

Off a terminal (a pipe, a file) and with ``--format markdown`` the reports print markdown, unchanged.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ablate.reports.cells import TERMINAL, Column, Row, Table, bold, caption

__all__ = ["TERMINAL", "fit_widths", "layout", "shown_rows", "to_terminal", "wrap_number"]
GAP = 2  # spaces between two columns
FOLDED = 5  # where nothing else fits, a header's words break after this many cells ("(pape", "r)")
TALL = 6  # lines: a row taller than this has its text squeezed to a word a line; columns leave first


def fit_widths(lo: Sequence[int], hi: Sequence[int], budget: int) -> list[int] | None:
    """Column widths that sum to at most ``budget``: each column ``hi`` (its widest cell) when they fit;
    else the widths at which the widest cells take the fewest lines, each column ``ceil(hi / lines)`` wide
    (so a long text gets more room than a short one) and never below ``lo`` (its longest word). None when
    the ``lo`` do not fit.

    >>> fit_widths([3, 5, 4], [10, 5, 30], 60)
    [10, 5, 30]
    >>> fit_widths([3, 5, 4], [10, 5, 30], 30)  # each cell in 2 lines, then what is left to the widest
    [7, 5, 18]
    >>> fit_widths([3, 5, 4], [10, 5, 30], 11) is None
    True
    """
    if sum(lo) > budget:
        return None
    if sum(hi) <= budget:
        return list(hi)

    def at(lines: int) -> list[int]:
        return [min(h, max(low, -(-h // lines))) for low, h in zip(lo, hi, strict=True)]

    fewest, most = 2, max(hi)
    while fewest < most:  # the fewest lines a cell takes, at widths that fit
        mid = (fewest + most) // 2
        fewest, most = (fewest, mid) if sum(at(mid)) <= budget else (mid + 1, most)
    widths = at(fewest)
    spare = budget - sum(widths)
    while spare and widths != list(hi):  # what is left, a column each in turn, widest first
        for i in sorted(range(len(hi)), key=lambda i: -hi[i]):
            if spare and widths[i] < hi[i]:
                widths[i] += 1
                spare -= 1
    return widths


# a number cell breaks only between its parts: the number, an interval ``[lo, hi]``, a spread ``± s``, the
# words of a note (as the HTML's ``render.wrappable``)
_PARTS = re.compile(r"\[[^\]]*\]|± \S+|\S+")


@dataclass(frozen=True)
class Span:
    """What a column needs: its longest unbreakable piece (``lo``), its widest cell (``cells``), its widest
    cell or header (``whole``), and which columns keep their cells whole the longest (``rank``: 0 numbers,
    1 the rows' labels, 2 descriptors). A number wraps only between its parts."""

    lo: int
    cells: int
    whole: int
    rank: int


def _pieces(text: str, number: bool) -> list[str]:
    return _PARTS.findall(text) if number else text.split()


def _span(header: str, texts: Sequence[str], rank: int, *, fold_header: bool = False) -> Span:
    """A column's span; with ``fold_header`` its header's words may break after ``FOLDED`` cells."""
    pieces = [cell_len(p) for t in texts for p in _pieces(t, rank == 0)]
    head = [min(cell_len(w), FOLDED) if fold_header else cell_len(w) for w in header.split()]
    cells = max((cell_len(t) for t in texts), default=1)
    return Span(max([*pieces, *head], default=1), max([cells, *pieces, *head]), max(cells, cell_len(header)),
                rank)


def _widths(spans: Sequence[Span], budget: int) -> list[int] | None:
    """Widths for columns of ``spans`` in ``budget`` cells: nothing wrapped when all fit; else the headers
    wrap first (the longest the most), then the descriptors at spaces, then the rows' labels, then the
    numbers between their parts: the columns that may wrap share the room so that their tallest cells take
    the fewest lines (``fit_widths``). None when even the longest pieces do not fit."""
    cells = [s.cells for s in spans]
    if sum(cells) <= budget:
        return fit_widths(cells, [s.whole for s in spans], budget)
    for whole_below in (2, 1, 0):  # the ranks below this keep their cells whole
        bounds = [s.cells if s.rank < whole_below else s.lo for s in spans]
        if sum(bounds) <= budget:
            return fit_widths(bounds, cells, budget)
    return None


def shown_rows(table: Table) -> tuple[list[Row], int]:
    """The rows a terminal shows: a paper table's rows the grid ran (and the rows it does not have), every row
    of another table. Also how many of the paper's rows were left out."""
    kept = [r for r in table.rows if r.paper_row is None or r.run_ids]
    return kept, len(table.rows) - len(kept)


def layout(table: Table, rows: Sequence[Row], width: int, leave_out: Sequence[str] = ()
           ) -> tuple[list[Column], list[int], list[Column]]:
    """The columns that fit ``width``, their widths (the label column's first), and the columns left out for
    room. First those ``leave_out`` names by key, in its order (else the descriptor columns, the rightmost
    first) leave, while even the longest pieces do not fit or while a row would be more than ``TALL`` lines
    high (a text squeezed to a word a line); then the headers' words may break; then the other columns leave,
    the rightmost first (a delta last), rather than break a number inside its digits. A column with no text in
    ``rows`` is left out too."""
    columns = [c for c in table.columns if any(r.cells[c.key].text for r in rows)]
    if leave_out:
        spare = sorted((c for c in columns if c.key in leave_out), key=lambda c: list(leave_out).index(c.key))
    else:
        spare = [c for c in reversed(columns) if c.kind == "descriptor"]
    dropped: list[Column] = []

    def fitted(fold_header: bool = False) -> list[int] | None:
        spans = [_span(table.row_header, [r.label for r in rows], 1, fold_header=fold_header)]
        spans += [_span(c.label, [r.cells[c.key].text for r in rows], 2 if c.kind == "descriptor" else 0,
                        fold_header=fold_header) for c in columns]
        return _widths(spans, width - GAP * len(columns))

    while spare:
        widths = fitted()
        if widths is not None and _tallest(rows, columns, widths) <= TALL:
            return columns, widths, dropped
        dropped.append(spare.pop(0))
        columns.remove(dropped[-1])
    others = sorted(reversed(columns), key=lambda c: c.kind == "delta")
    while True:
        widths = fitted() or fitted(fold_header=True)
        if widths is not None or not others:
            break
        dropped.append(others.pop(0))
        columns.remove(dropped[-1])
    if widths is None:  # a terminal narrower than a label and a number: everything folds
        budget = width - GAP * len(columns)
        widths = [max(1, budget // (len(columns) + 1))] * (len(columns) + 1)
    return columns, widths, dropped


def _tallest(rows: Sequence[Row], columns: Sequence[Column], widths: Sequence[int]) -> int:
    """The most lines a row takes at ``widths``."""
    def lines(col: Column | None, text: str, w: int) -> int:
        if col is not None and col.kind != "descriptor":
            return wrap_number(text, w).count("\n") + 1
        return max(1, len(textwrap.wrap(text, w)))

    return max((max(lines(None, r.label, widths[0]),
                    *(lines(c, r.cells[c.key].text, w) for c, w in zip(columns, widths[1:], strict=True)))
                for r in rows), default=1)


def wrap_number(text: str, width: int) -> str:
    """A number cell's text in lines of at most ``width``, broken only between its parts.

    >>> print(wrap_number("-1.77 [-2.83, -0.71] (n=2)", 15))
    -1.77
    [-2.83, -0.71]
    (n=2)
    """
    lines: list[str] = []
    for piece in _PARTS.findall(text):
        if lines and cell_len(lines[-1]) + 1 + cell_len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return "\n".join(lines)


def _groups(rows: Sequence[Row]) -> Iterator[tuple[str | None, list[Row]]]:
    """The rows in runs of one group, in order."""
    group: list[Row] = []
    for row in rows:
        if group and row.group != group[0].group:
            yield group[0].group, group
            group = []
        group.append(row)
    if group:
        yield group[0].group, group


def _grid(columns: Sequence[Column], widths: Sequence[int], header: str | None) -> RichTable:
    """A borderless rich table of fixed column widths: the header alone (``header``: the label column's
    head), or (None) the body."""
    out = RichTable(box=None, padding=(0, 1), pad_edge=False, show_edge=False, show_header=header is not None,
                    header_style="bold")
    out.add_column(Text(header or ""), width=widths[0], overflow="fold")
    for col, w in zip(columns, widths[1:], strict=True):
        right = col.kind != "descriptor"
        out.add_column(Text(col.label, justify="right" if right else "left"), width=w, overflow="fold",
                       justify="right" if right else "left")
    return out


def _cell(col: Column, row: Row, width: int) -> Text:
    cell = row.cells[col.key]
    text = cell.text if col.kind == "descriptor" else wrap_number(cell.text, width)
    return Text(text, style="bold" if bold(col, cell) else "")


def to_terminal(table: Table, width: int, *, styled: bool = True, leave_out: Sequence[str] = (),
                said_by: str | None = None, column_notes: Mapping[str, str] | None = None) -> str:
    """``table`` as text for a terminal ``width`` columns wide (no line longer), with ANSI styles when
    ``styled`` (``NO_COLOR`` keeps bold, drops colour). ``leave_out``: the columns to leave out first where
    not all fit, by key (else the descriptors, rightmost first); ``said_by``: the column whose cells say what
    the table's unresolved lines say (the lines are left out while it is shown); ``column_notes``: notes that
    explain one column (by its key), left out with it."""
    rows, hidden = shown_rows(table)
    columns, widths, dropped = layout(table, rows, width, leave_out)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=styled,
                      color_system="standard" if styled else None, markup=False, highlight=False, emoji=False,
                      legacy_windows=False)
    console.print(Text(caption(table), style="bold"))
    console.print(_grid(columns, widths, table.row_header))
    console.print(Text("─" * min(width, sum(widths) + GAP * len(columns)), style="dim"))
    for group, members in _groups(rows):
        if group is not None:
            console.print(Text(group, style="bold italic"))
        body = _grid(columns, widths, None)
        for row in members:
            cells = (_cell(c, row, w) for c, w in zip(columns, widths[1:], strict=True))
            body.add_row(Text(row.label), *cells)
        console.print(body)
    if not rows:
        console.print(Text("no runs of this table's rows in the grid"))
    shown = {c.key for c in columns}
    unexplained = {note for key, note in (column_notes or {}).items() if key not in shown}
    notes = [n for n in table.notes if n not in unexplained] + ([] if said_by in shown else table.unresolved)
    if hidden:
        paper = sum(r.paper_row is not None for r in table.rows)
        notes.append(f"{hidden} of the paper's {paper} rows have no runs in this grid and are not shown "
                     "(--format markdown shows every row)")
    if dropped:
        notes.append(f"left out to fit {width} columns: {'; '.join(c.label for c in dropped)} (--format "
                     "markdown has every column, or widen the terminal)")
    if notes:
        console.print()
    for note in notes:
        console.print(Text(note, style="dim"))
    return buf.getvalue()
