"""``ablate cancel GRID``: the jobs holding a grid's unfinished runs cancelled, each through its executor
(``Executor.cancel``: scancel for Slurm, the cluster's mailbox for Ray), and their runs put back in the queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ablate.execute.executor import Executor, executors
from ablate.execute.liveness import UNFINISHED, grid_jobs
from ablate.store.api import Store


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
        if (str(r["executor"]), r["job_id"]) in left:
            continue  # still shutting down: it records its own end
        current = store.statuses(run_ids=[r["run_id"]]).get(r["run_id"])
        if current in UNFINISHED:  # a job may have finished while it was being cancelled
            store.mark_queued(run_id=r["run_id"])
            store.set_job(run_id=r["run_id"], executor=None, job_id=None)
            report.requeued.append(r["run_id"])
    rows = store.status_summary(grid)["grids"]
    report.counts = {k: v for k, v in rows[0].items() if isinstance(v, int)} if rows else {}
    return report


def _alive(chosen: Iterable[Executor], ids: dict[str, list[str]]) -> set[tuple[str, str]]:
    """``(executor, job id)`` of the jobs still alive (an executor that cannot tell counts none)."""
    return {(ex.name, job) for ex in chosen for job in (ex.alive(ids[ex.name]) or ())}
