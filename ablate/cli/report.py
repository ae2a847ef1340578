"""The paper's tables and figures from the store: ``ablate report``."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from ablate.cli.common import HomeOpt, StoreOpt, app, handles_errors, open_store, warn
from ablate.reports.names import REPORT_HELP

if TYPE_CHECKING:
    from ablate.reports.registry import Request

# the choices are the reports' names (ablate.reports.names.REPORT_HELP; each made by ablate.reports.registry)
# (mypy reads an enum's members only from literals: these are data, so it knows the class, not its members)
ReportTarget = StrEnum("ReportTarget", {name: name for name in REPORT_HELP})  # type: ignore[misc]


@app.command("report")
@handles_errors
def report_cmd(
    target: Annotated[ReportTarget, typer.Argument(
        help="; ".join(f"{name}: {text}" for name, text in REPORT_HELP.items()),
        show_default=False, metavar="TABLE")],
    grid: Annotated[str | None, typer.Option("--grid", help="the grid to report (if not given: the store's "
                                             "only grid, else the one run last, said on stderr)")] = None,
    paper: Annotated[bool,
                     typer.Option("--paper", help="add the paper's own number beside each measured one")]
    = False,
    fmt: Annotated[Literal["markdown", "latex", "csv", "html", "json"] | None, typer.Option(
        "--format", help="markdown, latex, csv, json or html (tables and compare); markdown, json, csv or "
                         "html (scorecard) [default: at a terminal, a table that fits its width; else "
                         "markdown]", show_default=False)]
    = None,
    out: Annotated[Path | None, typer.Option("--out", help="file for a table (if not given: stdout); "
                                             "directory for figures/all (if not given: ./report) and for "
                                             "ladder (the report and its figure; if not given: stdout, no "
                                             "figure)")] = None,
    where: Annotated[str | None, typer.Option("--where", help="report only the runs for which this is true "
                                              "(the expression language of `ablate runs --where`); a grid "
                                              "with runs at several configurations shows the one with the "
                                              "most finished runs, then the latest, and says on stderr what "
                                              "it left out")] = None,
    ladder_target: Annotated[str, typer.Option("--target", help="ladder: where to predict: paper (1.7B dense "
                                               "at 400B and 3.5T tokens, 15B-A2.5B MoE at 3.5T) or FLOPs, "
                                               "comma-separated")] = "paper",
    reference: Annotated[str | None, typer.Option(
        "--reference", help="compare, all: the arm every other arm is compared with (default: baseline)")]
    = None,
    metrics: Annotated[list[str] | None, typer.Option(
        "--metric", help="compare, all: a metric to show (repeat for more; default: every outcome metric "
                         "the runs have, as ablate.metrics declares them)")] = None,
    interval: Annotated[Literal["t", "bootstrap"], typer.Option(
        "--interval", help="the deltas' 95% CI: t (paired Student t, n-1 df) or bootstrap (BCa, only from 20 "
                           "seeds; below that t, and the table says so)")] = "t",
    correction: Annotated[Literal["holm", "bh", "none"], typer.Option(
        "--correction", help="the correction over a grid's family (for one metric, every arm against the "
                             "reference in every cell; every page reads the same verdict) and over the "
                             "scorecard's other claims: holm (family-wise error), bh (Benjamini-Hochberg, "
                             "false discovery rate) or none")] = "holm",
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Rebuild the paper's tables and figures from a grid's runs (mean ± std over seeds, paired deltas with t
    CIs and p-values corrected over the grid's family, the same on every page; bold: significant after that
    correction, nothing else); ends with one line per unresolved comparison and the seeds it needs.

    "needs ≈ N seeds": the paired seeds at which a true effect the size of the one observed would be
    significant after the family's correction with 80% power; with no spread yet, the pairs of one sign
    whose exact sign-flip p would be."""
    from ablate.reports.registry import Request, make_report
    from ablate.stats import Stats

    request = Request(grid=grid, paper=paper, fmt=fmt or "markdown", out=out, where=where, warn=warn,
                      stats=Stats(interval, correction), target=ladder_target, reference=reference,
                      metrics=tuple(metrics or ()))
    if fmt is None and out is None:  # asked for nothing: at a terminal, a table that fits it
        request = _at_terminal(request)
    with open_store(home, store) as opened:
        output = make_report(opened, str(target.value), request, say=lambda line: typer.echo(line, err=True))
    if output.note:
        typer.echo(output.note, err=output.note_err)
    if output.text is None:
        return
    text = output.text
    if out is None:
        typer.echo(text, nl=False)
    else:
        from ablate.layout import atomic_write

        atomic_write(out, text)
        typer.echo(f"wrote {out}", err=True)


def _at_terminal(request: Request) -> Request:
    """``request`` for a terminal's width when stdout is one (``reports.terminal``); else as it is
    (markdown)."""
    from dataclasses import replace

    from rich.console import Console

    from ablate.reports.cells import TERMINAL

    console = Console()
    return replace(request, fmt=TERMINAL, width=console.width) if console.is_terminal else request
