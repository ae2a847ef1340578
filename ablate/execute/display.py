"""What the user sees while a grid runs: overall progress, each active job's step, loss and tokens/s (rich Live),
a line per run as it ends, and a summary table at the end. Only the executor's process draws."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

STYLE = {"done": "green", "diverged": "yellow", "failed": "red", "interrupted": "magenta", "skipped": "dim"}


@dataclass
class _Active:
    label: str
    device: str
    total: int
    step: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    since: float = field(default_factory=time.monotonic)


class GridDisplay:
    """Live progress of one ``ablate run``; a context manager (the live area exists while inside)."""

    def __init__(self, grid: str, total: int, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console)
        self.task = self.progress.add_task(f"grid {grid}", total=total)
        self.active: dict[str, _Active] = {}
        self._live = Live(console=self.console, refresh_per_second=4, transient=True,
                          get_renderable=self._render, redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> GridDisplay:
        if self.console.is_terminal:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live.is_started:
            self._live.stop()

    def _render(self) -> Any:
        table = Table(box=None, pad_edge=False, header_style="dim")
        for col in ("run", "variant", "seed", "device", "step", "loss", "tok/s"):
            table.add_column(col, justify="right" if col in ("step", "loss", "tok/s", "seed") else "left")
        for run_id, a in self.active.items():
            step = f"{a.step}/{a.total}" if a.step is not None else "starting"
            table.add_row(run_id[:10], *a.label.split(" ", 1), a.device, step,
                          f"{a.loss:.3f}" if a.loss is not None else "",
                          f"{a.tokens_per_s:,.0f}" if a.tokens_per_s else "")
        return Group(self.progress, table) if self.active else self.progress

    def started(self, run_id: str, *, variant: str, seed: int, device: str, total_steps: int) -> None:
        """A job started training (or resuming)."""
        self.active[run_id] = _Active(f"{variant} {seed}", device, total_steps)

    def step(self, run_id: str, data: dict[str, Any]) -> None:
        """A job reported progress."""
        if (a := self.active.get(run_id)) is not None:
            a.step, a.loss, a.tokens_per_s = data.get("step"), data.get("loss"), data.get("tokens_per_s")

    def ended(self, run_id: str, outcome: str, note: str = "") -> None:
        """A job ended: one line above the live area, and the bar moves on."""
        a = self.active.pop(run_id, None)
        took = f" in {time.monotonic() - a.since:.1f}s" if a else ""
        label = f" {a.label}" if a else ""
        style = STYLE.get(outcome, "")
        self.console.print(f"[{style}]{outcome:>11}[/] {run_id[:10]}{label}{took}{'  ' + note if note else ''}",
                           highlight=False)
        self.progress.advance(self.task)

    def message(self, text: str) -> None:
        """A line for the user (interrupts, warnings)."""
        self.console.print(text, highlight=False)


def summary_table(grid: str, counts: dict[str, int], totals: dict[str, int], wall_s: float) -> Table:
    """The end-of-run table: what this command did (``counts`` by outcome) and the grid's runs by status."""
    table = Table(title=f"ablate run {grid}", title_justify="left")
    table.add_column("")
    table.add_column("this run", justify="right")
    table.add_column("grid", justify="right")
    rows = [("done", "done"), ("diverged", "diverged"), ("failed", "failed"), ("interrupted", "queued"),
            ("skipped", None), ("running elsewhere", "running")]
    for outcome, status in rows:
        n, total = counts.get(outcome, 0), totals.get(status, 0) if status else None
        if n or total:
            label = f"{outcome} / queued" if outcome == "interrupted" else outcome
            table.add_row(f"[{STYLE.get(outcome, '')}]{label}[/]", str(n), "" if total is None else str(total))
    table.add_row("time", f"{wall_s:.1f}s", "")
    return table
