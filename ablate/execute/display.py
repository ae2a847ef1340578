"""What the user sees while a grid runs, and the summary at the end. Only the executor's process draws.

At a terminal: overall progress and each active job's step, loss and tokens/s (rich Live), and a line per run
as it ends. Without one (nohup, CI, a log file): the same line per run as it ends (variant, seed, time), and
every ``every_s`` seconds one plain progress line: runs ended / total, each running run's step, and an ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ablate.execute.messages import StepRow

PROGRESS_EVERY_S = 30.0
WIDE = 1000  # off a terminal: columns enough that rich never cuts a cell to '…'
# how each outcome looks; an outcome missing here is drawn plain (never a markup error)
STYLE = {"done": "green", "diverged": "yellow", "pruned": "cyan", "failed": "red", "interrupted": "magenta",
         "skipped": "dim", "reused": "dim", "busy": "dim", "running elsewhere": "dim"}
LABEL = {"busy": "running elsewhere"}  # an outcome as the user reads it


def styled(outcome: str, text: str | None = None) -> Text:
    """``text`` (default: the outcome's label) in the outcome's style."""
    return Text(text if text is not None else LABEL.get(outcome, outcome), style=STYLE.get(outcome, ""))


def duration(seconds: float) -> str:
    """A short duration: ``45s``, ``3m20s``, ``1h02m``.

    >>> [duration(s) for s in (45, 200, 3720)]
    ['45s', '3m20s', '1h02m']
    """
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def stdout_console() -> Console:
    """The console for what a command prints on stdout: at a terminal, the terminal's width; off one (a pipe,
    a file, a CI log) wide enough that no cell is cut, so a script or a log gets whole run ids, variants and
    steps."""
    console = Console()
    return console if console.is_terminal else Console(width=WIDE)


@dataclass
class _Active:
    label: str
    device: str
    total: int
    step: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    since: float = field(default_factory=time.monotonic)
    first_step: int | None = None  # the first step it reported (a resumed run starts mid-way)
    first_at: float | None = None  # when: its pace is measured from there, not from its start-up


class GridDisplay:
    """Live progress of one ``ablate run``; a context manager (the live area exists while inside)."""

    def __init__(self, grid: str, total: int, console: Console | None = None, *, workers: int = 1,
                 every_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.console = console or Console(stderr=True)
        self.clock = clock
        self.grid, self.total, self.workers = grid, total, max(1, workers)
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console)
        self.task = self.progress.add_task(f"grid {grid}", total=total)
        self.active: dict[str, _Active] = {}
        self.ended_n = 0
        self.took: list[float] = []  # seconds of each run that ended after training here
        self._last_line = clock()
        self._live = Live(console=self.console, refresh_per_second=4, transient=True,
                          get_renderable=self._render, redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> GridDisplay:
        if self.console.is_terminal:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live.is_started:
            self._live.stop()

    def _render(self) -> RenderableType:
        table = Table(box=None, pad_edge=False, header_style="dim")
        for col in ("run", "variant", "seed", "device", "step", "loss", "tok/s"):
            table.add_column(col, justify="right" if col in ("step", "loss", "tok/s", "seed") else "left")
        for run_id, a in self.active.items():
            step = f"{a.step}/{a.total}" if a.step is not None else "starting"
            table.add_row(run_id, *a.label.split(" ", 1), a.device, step,
                          f"{a.loss:.3f}" if a.loss is not None else "",
                          f"{a.tokens_per_s:,.0f}" if a.tokens_per_s else "")
        return Group(self.progress, table) if self.active else self.progress

    def expect(self, n: int) -> None:
        """``n`` more jobs are coming (tune deals its trials in rounds)."""
        self.total += n
        self.progress.update(self.task, total=self.total)

    def started(self, run_id: str, *, variant: str, seed: int, device: str, total_steps: int) -> None:
        """A job started training (or resuming)."""
        self.active[run_id] = _Active(f"{variant} {seed}", device, total_steps, since=self.clock())

    def step(self, run_id: str, data: StepRow) -> None:
        """A job reported progress (its latest step's row)."""
        if (a := self.active.get(run_id)) is not None and data:
            step = data.get("step")
            a.step = None if step is None else int(step)
            a.loss, a.tokens_per_s = data.get("loss"), data.get("tokens_per_s")
            if a.first_step is None:
                a.first_step, a.first_at = a.step, self.clock()

    def ended(self, run_id: str, outcome: str, note: str = "", *, label: str | None = None,
              took: float | None = None) -> None:
        """A job ended: one line above the live area (variant, seed, time), and the bar moves on. ``label``
        (``variant seed``) and ``took`` (its seconds, as the process that trained it measured them) stand in
        for what this display saw of it: a Ray task may start and end between two looks at the store."""
        a = self.active.pop(run_id, None)
        line = Text.assemble(styled(outcome, f"{LABEL.get(outcome, outcome):>11}"), f" {run_id}")
        took = took if took is not None else self.clock() - a.since if a is not None else None
        if took is not None and outcome in ("done", "diverged"):
            self.took.append(took)
        if a is not None or label:
            line.append(f" {a.label if a is not None else label}")
        if took is not None:
            line.append(f" in {duration(took)}")
        if note:
            line.append(f"  {note}")
        self.console.print(line, highlight=False, soft_wrap=not self.console.is_terminal)
        self.ended_n += 1
        self.progress.advance(self.task)

    def message(self, text: str) -> None:
        """A line for the user (start-up, interrupts, warnings; rich markup); one line in a log."""
        self.console.print(text, highlight=False, soft_wrap=not self.console.is_terminal)

    def tick(self) -> None:
        """Without a terminal, every ``every_s`` seconds: one plain progress line (``progress_line``)."""
        if self.console.is_terminal or self.clock() - self._last_line < self.every_s:
            return
        self._last_line = self.clock()
        # one line in a log
        self.console.print(self.progress_line(), highlight=False, markup=False, soft_wrap=True)

    def progress_line(self) -> str:
        """``progress: 3/12 ended; running: baseline 0 step 40/60, ...; ETA 2m10s`` (or "starting
        workers")."""
        now = self.clock()
        parts = [f"progress {self.grid}: {self.ended_n}/{self.total} ended"]
        running = [f"{a.label} step {a.step}/{a.total}" if a.step is not None else f"{a.label} starting"
                   for a in self.active.values()]
        parts.append(f"running: {', '.join(running)}" if running else "starting workers" if not self.ended_n
                     else "running: none")
        if (eta := self.eta(now)) is not None:
            parts.append(f"ETA {duration(eta)}")
        return "; ".join(parts)

    def eta(self, now: float) -> float | None:
        """Seconds until every expected job has ended, from the steps measured so far (None before two steps
        of a run are).

        A run's pace is its steps per second since its first reported step (its start-up, data and first
        step, is not a step's time); a run's time is the mean of those that ended, else the running ones'
        start-up plus their steps at that pace; the remaining work (queued runs, and what running runs have
        left) is shared by the workers.
        """
        # (steps measured, their seconds, the start-up before them) of each running run past its first step
        paced = [(a.step - (a.first_step or 0), now - a.first_at, a.first_at - a.since)
                 for a in self.active.values()
                 if a.step is not None and a.first_at is not None and now > a.first_at
                 and a.step > (a.first_step or 0)]
        rates = [steps / seconds for steps, seconds, _ in paced]
        per_step = 1.0 / (sum(rates) / len(rates)) if rates else None
        if self.took:
            per_run = sum(self.took) / len(self.took)
        elif per_step is not None:
            start_up = sum(s for _, _, s in paced) / len(paced)
            per_run = start_up + per_step * max((a.total for a in self.active.values()), default=0)
        else:
            return None
        left = 0.0
        for a in self.active.values():
            if per_step is not None and a.step is not None:
                left += per_step * max(0, a.total - a.step)
            else:
                left += per_run
        queued = max(0, self.total - self.ended_n - len(self.active))
        return (left + queued * per_run) / self.workers


def summary_table(grid: str, counts: dict[str, int], totals: dict[str, int], wall_s: float) -> Table:
    """The end-of-run table: what this command did (``counts`` by outcome) and the grid's runs by status."""
    table = Table(title=f"ablate run {grid}", title_justify="left")
    table.add_column("")
    table.add_column("this run", justify="right")
    table.add_column("grid", justify="right")
    rows = [("done", "done"), ("diverged", "diverged"), ("pruned", "pruned"), ("failed", "failed"),
            ("interrupted", "queued"), ("skipped", None), ("running elsewhere", "running")]
    for outcome, status in rows:
        n, total = counts.get(outcome, 0), totals.get(status, 0) if status else None
        if n or total:
            label = f"{outcome} / queued" if outcome == "interrupted" else None
            table.add_row(styled(outcome, label), str(n), "" if total is None else str(total))
    for outcome in sorted(set(counts) - {o for o, _ in rows}):  # anything else this command did, plainly
        table.add_row(styled(outcome), str(counts[outcome]), "")
    table.add_row("time", f"{wall_s:.1f}s", "")
    return table
