"""Every report ``ablate report`` can make, in one registry: ``REPORTS`` (name -> ``Report``).

The CLI's choices, its dispatch and ``report all``'s tables all derive from it: adding a report is one entry
here. A report's ``make(store, request)`` returns an ``Output``: ``text`` (for stdout, or the file ``--out``
names) and a ``note`` (what it wrote, where a report writes files itself: figures, ``all``, ``ladder --out
DIR``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.reports.cells import TERMINAL
from ablate.reports.spec import TABLES
from ablate.stats import DEFAULT, Stats

if TYPE_CHECKING:
    from ablate.store.api import Store

DEFAULT_DIR = Path("report")  # where figures and `all` write when --out is not given


@dataclass(frozen=True)
class Request:
    """What a report is asked for (``ablate report``'s options)."""

    grid: str | None = None
    paper: bool = False
    fmt: str = "markdown"
    out: Path | None = None
    where: str | None = None
    warn: Callable[[str], None] | None = None
    stats: Stats = DEFAULT
    target: str = "paper"  # ladder: where to predict
    reference: str | None = None  # compare (and all's compare table): the reference arm; None: baseline
    metrics: tuple[str, ...] = ()  # compare: the metrics shown; empty: every one the runs have
    width: int = 100  # fmt "terminal" (a rich table, what a terminal shows without --format): its columns


@dataclass(frozen=True)
class Output:
    """``text`` for stdout (or ``--out``'s file), and ``note``, a line on what the report wrote itself (on
    stderr when ``note_err``)."""

    text: str | None = None
    note: str | None = None
    note_err: bool = False


@dataclass(frozen=True)
class Report:
    """One report: its name, what it is (the CLI's help), and how to make it. ``table``: the paper table it
    is."""

    name: str
    help: str
    make: Callable[[Store, Request], Output]
    table: int | None = None


def _table(number: int) -> Callable[[Store, Request], Output]:
    def make(store: Store, r: Request) -> Output:
        from ablate.reports.api import report_table

        return Output(report_table(store, f"table{number}", grid=r.grid, paper=r.paper, fmt=r.fmt,
                                   where=r.where, warn=r.warn, stats=r.stats, width=r.width))

    return make


def _lr(store: Store, r: Request) -> Output:
    from ablate.reports.lr import report_lr

    return Output(report_lr(store, grid=r.grid, fmt=r.fmt, width=r.width))


def _scorecard(store: Store, r: Request) -> Output:
    from ablate.reports.api import report_scorecard

    return Output(report_scorecard(store, grid=r.grid, fmt=r.fmt, where=r.where, warn=r.warn, stats=r.stats,
                                   width=r.width))


def _compare(store: Store, r: Request) -> Output:
    from ablate.reports.api import report_compare

    return Output(report_compare(store, grid=r.grid, reference=r.reference, metrics=r.metrics, fmt=r.fmt,
                                 where=r.where, warn=r.warn, stats=r.stats, width=r.width))


def _ladder(store: Store, r: Request) -> Output:
    from ablate.reports.ladder_render import report_ladder

    fmt = "markdown" if r.fmt == TERMINAL else r.fmt  # the ladder has no terminal table of its own yet
    text, written = report_ladder(store, grid=r.grid, target=r.target, fmt=fmt, out=r.out, warn=r.warn)
    if r.out is None:
        return Output(text)
    return Output(note=f"wrote {', '.join(str(p) for p in written)}", note_err=True)


def _figures(store: Store, r: Request) -> Output:
    from ablate.reports.files import report_figures

    out = r.out or DEFAULT_DIR
    written = report_figures(store, out, grid=r.grid, where=r.where, warn=r.warn)
    return Output(note=f"wrote {len(written)} files to {out}")


def _all(store: Store, r: Request) -> Output:
    from ablate.reports.files import PAGE, report_all

    out = r.out or DEFAULT_DIR
    written = report_all(store, out, grid=r.grid, paper=r.paper, where=r.where, warn=r.warn, stats=r.stats,
                         reference=r.reference, metrics=r.metrics)
    return Output(note=f"wrote {len(written)} files to {out}: {out / PAGE}")


REPORTS: dict[str, Report] = {
    "compare": Report("compare", "every arm of the grid (plugin arms too) against a reference, per cell and "
                      "metric: paired Δ, corrected p, n, seeds needed, the pairing's correlation", _compare),
    **{f"table{n}": Report(f"table{n}", f"the paper's Table {n}", _table(n), table=n) for n in TABLES},
    "lr": Report("lr", "ablate tune's table: best and largest stable learning rate per arm", _lr),
    "scorecard": Report("scorecard", "the paper's claims: verdicts with CIs, corrected together", _scorecard),
    "ladder": Report("ladder", "a scaling ladder's fits and predictions", _ladder),
    "figures": Report("figures", "Figures 1-7 as PNG files", _figures),
    "all": Report("all", "the HTML page and every table, figure and the scorecard as files", _all),
}
TARGETS = tuple(REPORTS)  # every report's name
