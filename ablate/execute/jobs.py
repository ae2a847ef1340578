"""The executors' jobs the store knows of, what ``ablate status`` shows of them, and ``ablate cancel``.

A run an executor's job holds carries that job in the store (``runs.executor``, ``runs.job_id``: a Slurm
array task ``<array>_<index>``, a Ray task). Its executor answers for it (``Executor.alive``, ``states``,
``cancel``): squeue and scancel for Slurm, Ray's state API for Ray.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.store.api import Store

UNFINISHED = ("queued", "running")
COLUMNS = ("run_id", "grid", "variant", "seed", "status", "executor", "job_id")


def grid_jobs(store: Store, grid: str | None = None, *, unfinished: bool = False) -> list[dict[str, Any]]:
    """The runs (of ``grid``, or all; only the queued and running ones with ``unfinished``) that carry an
    executor's job: ``{"run_id", "grid", "variant", "seed", "status", "executor", "job_id"}``, ordered by
    executor and job. An unknown grid is a UserInputError."""
    from sqlalchemy import select

    from ablate.store.queries import _grid_filter
    from ablate.store.schema import GridRun, RegisteredGrid, Run

    with store.session(write=False) as s:
        members = _grid_filter(s, grid)
        q = (select(Run.run_id, RegisteredGrid.name, Run.variant, Run.seed, Run.status, Run.executor,
                    Run.job_id)
             .outerjoin(GridRun, GridRun.run_id == Run.run_id)
             .outerjoin(RegisteredGrid, RegisteredGrid.id == GridRun.grid_id)
             .where(Run.job_id.is_not(None)))
        if unfinished:
            q = q.where(Run.status.in_(UNFINISHED))
        if members is not None:
            q = q.where(Run.run_id.in_(members), RegisteredGrid.name == grid)
        rows: list[dict[str, Any]] = [dict(zip(COLUMNS, r, strict=True)) for r in s.execute(q)]
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        r["status"] = str(r["status"])
        seen.setdefault(r["run_id"], r)  # a run in several grids: once
    return sorted(seen.values(), key=lambda r: (r["executor"] or "", _job_key(r["job_id"]), r["run_id"]))


def _job_key(job_id: str) -> tuple[int, int, str]:
    """Slurm's ``<array>_<index>`` in numeric order; any other id by its text."""
    array, _, index = job_id.partition("_")
    if array.isdigit():
        return int(array), int(index) if index.isdigit() else -1, ""
    return 0, 0, job_id


def job_rows(store: Store, grid: str | None = None) -> list[dict[str, Any]]:
    """What ``ablate status`` shows of the executors' jobs: each unfinished run that carries one, with the
    job in its executor's words (``job``) and its state as the executor says it (``state``: ``"gone"`` when
    the executor no longer knows it, None when it cannot tell from here)."""
    from ablate.execute.executor import executor_name, executors

    rows = grid_jobs(store, grid, unfinished=True)
    for ex in executors({r["executor"] for r in rows}):
        mine = [r for r in rows if r["executor"] == ex.name]
        states = ex.states([r["job_id"] for r in mine])
        for r in mine:
            r["state"] = None if states is None else states.get(r["job_id"], "gone")
    for r in rows:
        r.setdefault("state", None)
        r["job"] = executor_name(r["executor"], r["job_id"])
    return rows


@dataclass
class CancelReport:
    """What ``ablate cancel`` did: the jobs it cancelled (in their executors' words), how many of their runs
    were training and how many waited to start, the runs it put back in the queue, and the grid's counts by
    status once it had (read as ``ablate status`` reads them, so the two agree the moment it prints)."""

    grid: str
    cancelled: list[str] = field(default_factory=list)  # e.g. "Slurm job(s) 12", "3 Ray task(s)"
    training: int = 0  # of the cancelled jobs' runs, those `running` when cancel began
    waiting: int = 0  # ... and those `queued` in a job that had not started them
    requeued: list[str] = field(default_factory=list)  # run ids now `queued`, their jobs forgotten
    still_alive: list[str] = field(default_factory=list)  # jobs still alive when we stopped waiting
    counts: dict[str, int] = field(default_factory=dict)  # the grid's runs by status at the end

    def lines(self) -> list[str]:
        """What ``ablate cancel`` prints: the jobs cancelled, the runs back in the queue, the grid now.

        >>> report = CancelReport("g", ["4 Ray task(s)"], 2, 2, ["a", "b", "c", "d"],
        ...                       counts={"queued": 4, "running": 0, "done": 1, "failed": 0, "total": 5})
        >>> for line in report.lines():
        ...     print(line)
        cancelled 4 Ray task(s) of grid g (2 training, 2 waiting to start)
        4 run(s) of g back in the queue
        grid g now: 4 queued, 0 running, 1 done of 5 (as ablate status counts them)
        """
        out = []
        if self.cancelled:
            out.append(f"cancelled {'; '.join(self.cancelled)} of grid {self.grid} "
                       f"({self.training} training, {self.waiting} waiting to start)")
        out.append(f"{len(self.requeued)} run(s) of {self.grid} back in the queue")
        if self.counts:
            n = self.counts
            shown = [f"{n.get(k, 0)} {k}" for k in ("queued", "running")]
            shown += [f"{n[k]} {k}" for k in ("done", "diverged", "pruned", "failed") if n.get(k)]
            out.append(f"grid {self.grid} now: {', '.join(shown)} of {n.get('total', 0)} "
                       "(as ablate status counts them)")
        return out


def cancel_grid(store: Store, grid: str, *, wait_s: float = 120.0, poll_s: float = 0.5) -> CancelReport:
    """Cancel the jobs holding ``grid``'s unfinished runs (each through its executor), wait until none is
    alive, then mark those runs ``queued`` and forget their jobs. Finished runs (done, diverged, failed) keep
    their status and job."""
    from ablate.execute.executor import executors

    report = CancelReport(grid=grid)
    runs = grid_jobs(store, grid, unfinished=True)
    chosen = list(executors({r["executor"] for r in runs}))
    ids = {ex.name: [r["job_id"] for r in runs if r["executor"] == ex.name] for ex in chosen}
    for ex in chosen:
        report.cancelled += ex.cancel(ids[ex.name])
    report.training = sum(r["status"] == "running" for r in runs)
    report.waiting = len(runs) - report.training
    deadline = time.monotonic() + wait_s
    while (left := _alive(chosen, ids)) and time.monotonic() < deadline:
        time.sleep(poll_s)
    report.still_alive = sorted(job for _, job in left)
    for r in runs:
        if (r["executor"], r["job_id"]) in left:
            continue  # still shutting down: it records its own end
        current = store.statuses(run_ids=[r["run_id"]]).get(r["run_id"])
        if current in UNFINISHED:  # a job may have finished while it was being cancelled
            store.mark_queued(run_id=r["run_id"])
            store.set_job(run_id=r["run_id"], executor=None, job_id=None)
            report.requeued.append(r["run_id"])
    rows = store.status_summary(grid)["grids"]
    report.counts = {k: v for k, v in rows[0].items() if isinstance(v, int)} if rows else {}
    return report


def _alive(chosen: Iterable[Any], ids: dict[str, list[str]]) -> set[tuple[str, str]]:
    """``(executor, job id)`` of the jobs still alive (an executor that cannot tell counts none)."""
    return {(ex.name, job) for ex in chosen for job in (ex.alive(ids[ex.name]) or ())}
