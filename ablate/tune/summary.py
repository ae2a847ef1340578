"""What ``ablate tune`` shows at the end: per cell, the best and the largest stable value, and the trials'
fates."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ablate.execute.display import stdout_console
from ablate.tune.options import TuneReport
from ablate.tune.protocol import worse_cell, worse_header

STYLE = {"done": "green", "diverged": "yellow", "pruned": "cyan", "failed": "red", "interrupted": "magenta",
         "reused": "dim"}


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def summary_table(report: TuneReport, param: str, metric: str | None = None) -> Table:
    """One row per cell: best value and its metric, largest stable value, the first value above it that did
    worse (diverged, or ended more than the tolerance over the best), and how its trials ended (ok /
    diverged / pruned / failed). ``metric``: the report's own when None."""
    metric = metric or report.metric
    table = Table(title=f"ablate tune {report.grid}: {param} per cell (metric {metric})",
                  title_justify="left")
    # headers wrap at their spaces and cells fold rather than end in '…' on a narrow terminal
    for col in ("cell", f"best {param}", metric, "largest stable", worse_header(report.tolerance),
                "trials ok / diverged / pruned / failed"):
        table.add_column(col, justify="left" if col == "cell" else "right", overflow="fold")
    for c in report.cells:
        n = {k: sum(p.outcome == k for p in c.points) for k in ("ok", "diverged", "pruned", "failed")}
        table.add_row(c.label, _num(c.best.value if c.best else None),
                      _num(c.best.metric if c.best else None, ".4g"),
                      _num(c.stable.value if c.stable else None),
                      worse_cell(c.unstable, c.best), "/".join(str(v) for v in n.values()))
    return table


def print_summary(report: TuneReport, param: str, metric: str | None = None, console: Console | None = None
                  ) -> None:
    """The table, this command's counts, notes about the bracketing search, and warnings."""
    console = console or stdout_console()  # off a terminal: nothing cut to '…'
    console.print(summary_table(report, param, metric))
    counts = ", ".join(f"[{STYLE.get(k, '')}]{v} {k}[/]" for k, v in sorted(report.counts.items()))
    console.print(f"this time: {counts or 'nothing to run'} in {report.wall_s:.1f}s; trials are the runs of "
                  f"grid '{report.tune_grid}': ablate runs --grid '{report.tune_grid}', ablate report lr "
                  f"--grid '{report.tune_grid}'", highlight=False)
    for c in report.cells:
        if c.note:
            console.print(f"[yellow]{c.label}:[/] {c.note}", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if report.interrupted:
        console.print("interrupted: run the same command again to resume", highlight=False)
