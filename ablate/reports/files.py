"""The reports ``ablate report`` writes as files: ``figures`` (Figures 1-7 as PNG and PDF) and ``all`` (the
whole report directory: ``report.html``, the comparison, every paper table, the figures, the scorecard, and
``ablate tune``'s learning-rate table when the grid has tuning studies).

A command grid (the researcher's own training command) has its own figures, a curve per metric it reported
(``command_figures``), and its ``all`` has the comparison and those figures: the paper's tables and the
scorecard read ablate's own model."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import UserInputError
from ablate.reports.api import Warn, grid_scorecard, grid_table
from ablate.reports.command_figures import write_curve_figures
from ablate.reports.compare import REFERENCE, CompareReport, build_compare
from ablate.reports.compare_render import SUFFIX as COMPARE_SUFFIX
from ablate.reports.compare_render import render_compare, to_table
from ablate.reports.data import GridData, load_grid_data
from ablate.reports.figures import write_figures
from ablate.reports.lr import write_lr_report
from ablate.reports.page import report_page
from ablate.reports.registry import DEFAULT_DIR, Output, Request
from ablate.reports.render import SUFFIX, render
from ablate.reports.scorecard_render import scorecard_markdown
from ablate.reports.spec import TABLES
from ablate.stats import DEFAULT, Stats
from ablate.trainers.registry import MODEL

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)
PAGE = "report.html"


def grid_figures(data: GridData, out_dir: str | Path) -> dict[int, Path] | dict[str, Path]:
    """The grid's figures into ``out_dir``: Figures 1-7 (``{number: PNG path}``), or for a command grid a
    curve per metric it reported (``{metric: PNG path}``)."""
    return write_figures(data, out_dir) if data.trainer == MODEL else write_curve_figures(data, out_dir)


def report_figures(store: Store, out_dir: str | Path, *, grid: str | None = None, where: str | None = None,
                   warn: Warn | None = None) -> dict[int, Path] | dict[str, Path]:
    """``ablate report figures``: the grid's figures (``grid_figures``), PNG and PDF files in ``out_dir``."""
    return grid_figures(load_grid_data(store, grid, where=where, warn=warn), out_dir)


def _compare_or_note(data: GridData, reference: str | None, metrics: Sequence[str],
                     stats: Stats) -> CompareReport | str:
    """``report all``'s comparison table; where the grid has no default reference arm (``baseline``), the line
    that says so instead (a reference named with ``--reference`` must exist)."""
    try:
        return build_compare(data, reference=reference or REFERENCE, metrics=metrics, stats=stats)
    except UserInputError as exc:
        if reference is not None or metrics:
            raise
        return f"no comparison table: {exc}"


def write_report(data: GridData, out_dir: str | Path, *, paper: bool = False,
                 sections: tuple[str, ...] = (), stats: Stats = DEFAULT, reference: str | None = None,
                 metrics: Sequence[str] = (), compared: CompareReport | str | None = None) -> dict[str, Path]:
    """The whole report into ``out_dir``: ``report.html`` (self-contained), the comparison of every arm
    against the reference as .md/.tex/.csv/.json (``compared``, when the caller built it), each paper table as
    .md/.tex/.csv, the figures as PNG and the scorecard as markdown; for a command grid, the comparison and
    its figures only. Returns ``{name: path}``."""
    if compared is None:  # before anything is written: a --reference or --metric that cannot be is one line
        compared = _compare_or_note(data, reference, metrics, stats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = data.trainer == MODEL  # the paper's tables and the scorecard read ablate's own model
    tables = [grid_table(data, n, paper=paper, stats=stats) for n in TABLES] if model else []
    written: dict[str, Path] = {}
    if isinstance(compared, CompareReport):
        for fmt in ("markdown", "latex", "csv", "json"):
            path = out / f"compare{COMPARE_SUFFIX[fmt]}"
            path.write_text(render_compare(compared, fmt))
            written[path.name] = path
    for t in tables:
        for fmt in ("markdown", "latex", "csv"):
            path = out / f"{t.name}{SUFFIX[fmt]}"
            path.write_text(render(t, fmt))
            written[path.name] = path
    figures = grid_figures(data, out / "figures")
    written.update({p.name: p for p in figures.values()})
    verdicts = grid_scorecard(data, stats) if model else None
    if verdicts is not None:
        (out / "scorecard.md").write_text(scorecard_markdown(verdicts, stats))
        written["scorecard.md"] = out / "scorecard.md"
    counts = data.runs["status"].value_counts().to_dict() if len(data.runs) else {}
    page = out / PAGE
    shown = to_table(compared) if isinstance(compared, CompareReport) else compared
    page.write_text(report_page(data.grid, tables, figures, verdicts,
                                counts={str(k): int(v) for k, v in counts.items()}, sections=sections,
                                stats=stats, compare=shown))
    written[PAGE] = page
    log.info("report for grid %s -> %s", data.grid, page)
    return written


def report_all(store: Store, out_dir: str | Path, *, grid: str | None = None, paper: bool = False,
               where: str | None = None, warn: Warn | None = None, stats: Stats = DEFAULT,
               reference: str | None = None, metrics: Sequence[str] = ()) -> dict[str, Path]:
    """``ablate report all``: see ``write_report``; plus ``ablate tune``'s learning-rate table and figure when
    the grid has tuning studies."""
    data = load_grid_data(store, grid, where=where, warn=warn)
    compared = _compare_or_note(data, reference, metrics, stats)  # its bad input before anything is written
    lr_files, lr_section = write_lr_report(store, data.grid, out_dir)
    written = write_report(data, out_dir, paper=paper, sections=(lr_section,) if lr_section else (),
                           stats=stats, compared=compared)
    written.update(lr_files)
    return written


def figures_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report figures`` (the registry's maker)."""
    out = r.out or DEFAULT_DIR
    written = report_figures(store, out, grid=r.grid, where=r.where, warn=r.warn)
    return Output(note=f"wrote {len(written)} files to {out}")


def all_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report all`` (the registry's maker)."""
    out = r.out or DEFAULT_DIR
    written = report_all(store, out, grid=r.grid, paper=r.paper, where=r.where, warn=r.warn, stats=r.stats,
                         reference=r.reference, metrics=r.metrics)
    return Output(note=f"wrote {len(written)} files to {out}: {out / PAGE}")
