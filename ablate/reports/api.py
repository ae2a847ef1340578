"""What the reports of ``ablate report`` (``reports.registry.REPORTS``, which sits above this module) call
for a text: a table, the scorecard, the comparison, from a store. The reports written as files (the
figures, the whole report directory) are ``files.py``'s."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ablate.errors import UserInputError, one_of
from ablate.reports.cells import TERMINAL, Table
from ablate.reports.compare import REFERENCE, build_compare
from ablate.reports.compare_render import FORMATS as COMPARE_FORMATS
from ablate.reports.compare_render import render_compare, to_table
from ablate.reports.data import GridData, load_grid_data
from ablate.reports.family import families
from ablate.reports.registry import Output, Request
from ablate.reports.render import FORMATS, render
from ablate.reports.scorecard import Verdict, scorecard
from ablate.reports.scorecard_render import (
    SCORECARD_FORMATS,
    scorecard_table,
    unresolved_lines,
)
from ablate.reports.scorecard_render import TERMINAL_LEAVES as SCORECARD_LEAVES
from ablate.reports.spec import TABLES
from ablate.reports.tables import build_table
from ablate.reports.terminal import to_terminal
from ablate.stats import DEFAULT, Stats

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)
Warn = Callable[[str], None]


def table_number(target: str) -> int:
    """``table3`` -> 3; a clear error for anything else."""
    names = {f"table{n}": n for n in TABLES}
    if target not in names:
        raise UserInputError(one_of(target, list(names), what="table"))
    return names[target]


def grid_table(data: GridData, number: int, *, paper: bool = False, stats: Stats = DEFAULT) -> Table:
    """Table ``number`` of the grid in ``data``."""
    return build_table(number, data.runs, data.catalogue, grid=data.grid, paper=paper,
                       added_params=data.added_params, stats=stats, decisions=data.decisions,
                       families=families(data, REFERENCE, stats))


def grid_scorecard(data: GridData, stats: Stats = DEFAULT) -> list[Verdict]:
    """The scorecard of the grid in ``data``, its claims read through the grid's families."""
    return scorecard(data.runs, data.catalogue, stats=stats, decisions=data.decisions,
                     families=families(data, REFERENCE, stats))


def _tell(lines: list[str], fmt: str, warn: Warn | None) -> None:
    """The unresolved comparisons' lines, on stderr for a machine format (CSV, JSON) so stdout stays
    parseable; the other formats carry them under the table."""
    if warn is not None and fmt in ("csv", "json"):
        for line in lines:
            warn(f"unresolved: {line}")


def report_table(store: Store, target: str, *, grid: str | None = None, paper: bool = False,
                 fmt: str = "markdown", where: str | None = None, warn: Warn | None = None,
                 stats: Stats = DEFAULT, width: int = 100) -> str:
    """``ablate report tableN``: the table as text in ``fmt`` (markdown, latex, csv, html, or ``terminal``:
    ``width`` columns wide), of the runs that satisfy ``where``, at one configuration (``warn`` gets the line
    naming what was left out, and for CSV the unresolved deltas' lines), read with ``stats`` (interval method,
    family correction)."""
    number = table_number(target)
    if fmt not in FORMATS and fmt != TERMINAL:  # before any query
        raise UserInputError(one_of(fmt, FORMATS, what="format") + " (option --format)")
    table = grid_table(load_grid_data(store, grid, where=where, warn=warn), number, paper=paper, stats=stats)
    _tell(table.unresolved, fmt, warn)
    return render(table, fmt, width=width)


def report_scorecard(store: Store, *, grid: str | None = None, fmt: str = "markdown",
                     where: str | None = None, warn: Warn | None = None, stats: Stats = DEFAULT,
                     width: int = 100) -> str:
    """``ablate report scorecard``: every claim the grid can test, in ``fmt`` (markdown, json, csv, html, or
    ``terminal``: ``width`` columns wide), the claims' p-values corrected together (``stats``)."""
    if fmt not in SCORECARD_FORMATS and fmt != TERMINAL:  # before any query
        raise UserInputError(one_of(fmt, SCORECARD_FORMATS, what="scorecard format") + " (option --format)")
    data = load_grid_data(store, grid, where=where, warn=warn)
    verdicts = grid_scorecard(data, stats)
    _tell(unresolved_lines(verdicts), fmt, warn)
    if fmt == TERMINAL:
        return to_terminal(scorecard_table(verdicts, stats), width, leave_out=SCORECARD_LEAVES,
                           said_by="detail")
    return SCORECARD_FORMATS[fmt](verdicts, stats)


def report_compare(store: Store, *, grid: str | None = None, reference: str | None = None,
                   metrics: Sequence[str] = (), fmt: str = "markdown", where: str | None = None,
                   warn: Warn | None = None, stats: Stats = DEFAULT, width: int = 100) -> str:
    """``ablate report compare``: every arm against ``reference`` (``baseline`` when None), in ``fmt``
    (markdown, latex, csv, json, html, or ``terminal``: ``width`` columns wide); the unresolved comparisons'
    lines go to ``warn`` for CSV and JSON."""
    if fmt not in COMPARE_FORMATS and fmt != TERMINAL:  # before any query
        raise UserInputError(one_of(fmt, COMPARE_FORMATS, what="compare format") + " (option --format)")
    data = load_grid_data(store, grid, where=where, warn=warn)
    report = build_compare(data, reference=reference or REFERENCE, metrics=metrics, stats=stats)
    _tell(to_table(report).unresolved, fmt, warn)
    return render_compare(report, fmt, width=width)


def table_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report tableN`` (the registry's maker)."""
    return Output(report_table(store, name, grid=r.grid, paper=r.paper, fmt=r.fmt, where=r.where, warn=r.warn,
                               stats=r.stats, width=r.width))


def scorecard_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report scorecard`` (the registry's maker)."""
    return Output(report_scorecard(store, grid=r.grid, fmt=r.fmt, where=r.where, warn=r.warn, stats=r.stats,
                                   width=r.width))


def compare_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report compare`` (the registry's maker)."""
    return Output(report_compare(store, grid=r.grid, reference=r.reference, metrics=r.metrics, fmt=r.fmt,
                                 where=r.where, warn=r.warn, stats=r.stats, width=r.width))
