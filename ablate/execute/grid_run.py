"""``ablate run``: a grid from its file to every run recorded, on an executor that trains in rounds (the local
worker pool, Ray tasks).

1. The grid is expanded once (``opening.expand_grid``), and the executor's session made ready
   (``Executor.session``): the checks it can make before anything starts (a run that cannot fit in a
   device's memory, one asking for more GPUs than a Ray node has: one line, exit 2), the workers or the
   cluster.
2. The opening every executor shares (``opening.open_grid``): expand the grid, look every run up in the store,
   register the grid, decide (``triage``) what trains; runs another process is training are skipped (one line
   says which), or waited for with ``wait``.
3. The session's runner: the jobs, resumed ones first; every run's life goes through the run lifecycle
   (``lifecycle.Lifecycle``), which records it in the store and MLflow, in this process or in the task that
   trains it.
4. The summary: counts by outcome and by status, and an exit code (0 all done/diverged/pruned, 1 some failed
   or the store went away, 130 when interrupted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ablate import layout
from ablate.execute.display import LABEL, stdout_console, summary_table
from ablate.execute.executor import RunOptions, Session, check_flags, executor
from ablate.execute.large import confirm_large
from ablate.execute.lifecycle import Lifecycle, mlflow_ids, unmirrored
from ablate.execute.liveness import job_liveness
from ablate.execute.messages import Job
from ablate.execute.mirror import MirrorThread
from ablate.execute.opening import Opened, expand_grid, open_grid, planning

log = logging.getLogger(__name__)

WAIT_POLL_S = 2.0


@dataclass
class GridReport:
    """What one ``ablate run`` did: each run's outcome, the grid's statuses after it, and the time it took."""

    grid: str
    # run_id -> done/diverged/failed/interrupted/skipped/...
    outcomes: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)  # run_id -> status in the store at the end
    errors: dict[str, str] = field(default_factory=dict)  # run_id -> error (failed this time)
    interrupted: bool = False
    wall_s: float = 0.0
    pool_started: float | None = None  # time.monotonic() when the workers were started
    # run_id -> (started, ended), monotonic
    job_times: dict[str, tuple[float, float]] = field(default_factory=dict)
    # run_id -> seconds inside run_one (in the worker)
    run_one_s: dict[str, float] = field(default_factory=dict)
    worker_pids: dict[str, int] = field(default_factory=dict)  # run_id -> pid of the worker that trained it
    warnings: list[str] = field(default_factory=list)
    held: str | None = None  # "2 running in another process (pid 123), skipped"
    failed_before: int = 0  # failed runs skipped (without --retry-failed)
    store_error: str | None = None  # the store went away and stayed away: how to resume
    home: Path | None = None

    def counts(self) -> dict[str, int]:
        """Runs per outcome of this command."""
        out: dict[str, int] = {}
        for outcome in self.outcomes.values():
            out[outcome] = out.get(outcome, 0) + 1
        return out

    def totals(self) -> dict[str, int]:
        """The grid's runs per status in the store."""
        out: dict[str, int] = {}
        for status in self.statuses.values():
            out[status] = out.get(status, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """CLI.md: 0 every run done, diverged or pruned; 1 some run failed (or the store went away); 130 when
        interrupted."""
        if self.store_error is not None:
            return 1
        if self.interrupted:
            return 130
        return 1 if any(s == "failed" for s in self.statuses.values()) else 0


def run_grid(path: str | Path, sets: Sequence[str] = (), options: RunOptions | None = None) -> GridReport:
    """Run the grid at ``path`` (with ``--set`` overrides) on ``options.executor``: train what is new or cut
    off, skip what is done. What the executor can check before anything starts (runs that cannot fit in
    ``options.device_memory``, else a local GPU's memory; a Ray cluster that cannot be reached) is refused
    first (exit 2)."""
    opts = options or RunOptions()
    chosen = executor(opts.executor)
    check_flags(chosen, opts.own)
    console = opts.console or Console(stderr=True)
    t0 = time.monotonic()
    # once: the checks, the session, the openings (Ctrl-C meanwhile: one line, nothing registered)
    with planning():
        expanded = expand_grid(path, sets, home=Path(opts.home), extra=opts.extra)
    report: GridReport | None = None
    with ExitStack() as stack:
        with planning():
            session = stack.enter_context(chosen.session(expanded, opts))
            # a large grid: its count, disk and time in one line, and the user's yes, before anything is made
            confirm_large(expanded.grid.name, expanded.planned, home=Path(opts.home), store=opts.store,
                          workers=session.width, yes=opts.yes, ask=opts.ask, retry_failed=opts.retry_failed,
                          say=lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True))
        while True:
            with planning() if report is None else nullcontext():  # after a round, something may have run
                opening = open_grid(expanded, home=Path(opts.home), store=opts.store,
                                    retry_failed=opts.retry_failed, stale_after_s=opts.stale_after_s,
                                    append=opts.append, remote=session.remote)
            with opening as opened:
                report = _run_opened(opened, session, opts, console, report)
                waiting = opts.wait and opened.held and not report.interrupted and report.store_error is None
                if waiting:
                    console.print(f"ablate run {opened.name}: waiting for {len(opened.held)} run(s) another "
                                  "process is training", highlight=False)
                    _wait_for(opened)
            if not waiting:
                break
    report.wall_s = time.monotonic() - t0
    return report


def run_and_report(path: str | Path, sets: Sequence[str], options: RunOptions) -> int:
    """``run_grid`` and its summary (``print_summary``): an executor's ``run`` when it trains in rounds
    (local, Ray); its exit status."""
    report = run_grid(path, sets, options)
    print_summary(report, idle_table=options.idle_table)
    return report.exit_code


def _run_opened(o: Opened, session: Session, opts: RunOptions, console: Console, report: GridReport | None
                ) -> GridReport:
    """One pass over an opened grid: train its ``todo`` on the executor, then read the statuses back."""
    report = report or GridReport(grid=o.name, home=o.home)
    for rid, status in o.reused.items():
        report.outcomes[rid] = status
    for rid in o.skipped:
        report.outcomes.setdefault(rid, "running elsewhere" if rid in o.held else "skipped")
    report.held, report.failed_before = o.held_line(), len(o.failed_before)
    report.warnings += [w for w in o.warnings if w not in report.warnings]
    if report.held:  # the one line about them
        hint = "" if opts.wait else "; --wait waits for them"
        console.print(f"ablate run {o.name}: {report.held}{hint}", highlight=False, soft_wrap=True)
    finished = [d.run_id for d in o.decisions if d.status in ("done", "diverged")] + list(o.reused)
    mirror = _mirror(o, finished, bool(o.todo), opts.mlflow_experiment) if opts.mlflow else None
    lifecycle = Lifecycle(o.store, home=o.home, mirror=mirror, patience_s=opts.store_patience_s)
    try:
        if o.todo:
            _run_jobs(o, lifecycle, session, opts, console, report)
    finally:
        # after a second Ctrl-C do not wait long: the next `ablate run` mirrors what is left
        lifecycle.close(mirror_s=5.0 if report.interrupted else 300.0)
    report.warnings += lifecycle.warnings()
    report.store_error = report.store_error or lifecycle.recorder.still_away()
    if report.store_error is None:
        report.statuses = o.store.statuses(run_ids=[p.run_id for p in o.planned])
    return report


def _run_jobs(o: Opened, lifecycle: Lifecycle, session: Session, opts: RunOptions, console: Console,
              report: GridReport) -> None:
    jobs = [Job(d.run_id, str(lifecycle.run_dir(d.run_id)),
                d.run.config.model_dump(mode="json")) for d in o.todo]
    where, warning = session.describe(len(jobs))
    console.print(f"ablate run {o.name}: {len(jobs)} to run ({sum(d.action == 'resume' for d in o.todo)} "
                  f"resuming), {len(o.planned) - len(jobs)} skipped; {where}", highlight=False,
                  soft_wrap=True)  # one line, however narrow the console: logs and `head -1` read it
    if warning:
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"), highlight=False, soft_wrap=True)
    with session.runner(lifecycle, title=o.name, console=console, job_fn=opts.job_fn or o.trainer.job,
                        progress_every_s=opts.progress_every_s, jobs=len(jobs)) as runner:
        ended = runner.run(jobs)
    for rid, e in ended.items():
        report.outcomes[rid] = LABEL.get(e.kind, e.kind)
        if e.kind == "failed":
            report.errors[rid] = e.error or ""
    report.interrupted = report.interrupted or runner.interrupted
    report.store_error = runner.store_error
    report.pool_started = runner.pool_started
    report.job_times.update(runner.job_times)
    report.run_one_s.update(runner.run_one_s)
    report.worker_pids.update(runner.worker_pids)


def _wait_for(o: Opened) -> None:
    """Until no run another process held at the opening is held any more."""
    assert o.liveness is not None
    held = set(o.held)
    while held:
        time.sleep(WAIT_POLL_S)
        running = o.store.status_summary()["running"]
        liveness = job_liveness(o.store, o.home, running, held)
        held = {rid for rid in held if liveness.is_alive(rid)}


# ------------------------------------------------------------ MLflow
def _mirror(o: Opened, finished: list[str], will_train: bool, experiment: str | None) -> MirrorThread | None:
    """The MLflow mirror thread, with the grid's finished runs MLflow never got queued first (e.g. the last
    ``ablate run`` was killed); None when nothing will be logged (MLflow is then not even imported). Into an
    experiment the user named, the finished runs it does not hold yet (mirrored into the grid's own, say) are
    queued too: that asks MLflow, so it is opened whenever the grid has finished runs."""
    if experiment is not None:
        stored = mlflow_ids(o.store, o.home, o.name, finished) if finished else {}
        if not stored and not will_train:
            return None
        mirror = MirrorThread(home=o.home, grid=o.name, experiment=experiment)
        if stored:
            mirror.backfill(stored)
        return mirror
    missing = unmirrored(o.store, o.home, o.name, finished) if finished else []
    if not missing and not will_train:
        return None
    mirror = MirrorThread(home=o.home, grid=o.name)
    for result in missing:
        mirror.submit(result)
    return mirror


def print_summary(report: GridReport, console: Console | None = None, *, idle_table: bool = True) -> None:
    """The end-of-run table; for each run that failed this time, its error's first line; hints and
    warnings. ``idle_table=False``: no table when nothing was trained (a look of ``--until-resolved`` whose
    runs were all done or found finished: a table of what was skipped says nothing its look line does not)."""
    console = console or stdout_console()  # off a terminal: nothing cut to '…'
    if idle_table or report.pool_started is not None:  # a worker pool started: something trained
        console.print(summary_table(report.grid, report.counts(), report.totals(), report.wall_s))

    # as it is, never read as markup
    def line(style: str, head: str, text: str, to: Console = console) -> None:
        to.print(Text.assemble((head, style), f" {text}"), highlight=False, soft_wrap=True)

    for rid, error in report.errors.items():
        line("red", "failed", f"{rid}: {error.splitlines()[0] if error else ''}")
    if report.failed_before:
        console.print(f"{report.failed_before} run(s) failed before and were skipped: --retry-failed would "
                      "rerun them (from their last checkpoint)", highlight=False, markup=False)
    for warning in report.warnings:
        line("yellow", "warning:", warning)
    if report.store_error is not None:
        runs = layout.runs_dir(report.home) if report.home else "$ABLATE_HOME/runs"
        line("red", "error:", f"{report.store_error}; finished runs are kept in {runs}: when the store is "
             f"back, run the same command again (or `ablate ingest {runs}`)", to=Console(stderr=True))
    elif report.interrupted:
        console.print("interrupted: run the same command again to resume", highlight=False)
