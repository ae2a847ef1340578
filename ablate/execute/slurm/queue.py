"""What Slurm says about a grid's jobs, and ``ablate cancel``: ``squeue`` and ``scancel``, no accounting
needed.

A run submitted through ``ablate run --executor slurm`` carries its Slurm job id in the store
(``slurm_job_id``: ``<array id>_<task index>``, or a plain job id when one run was submitted). ``squeue``
answers for jobs that are still pending or running (and for a few minutes after they end, ``MinJobAge``); a
job it no longer knows is gone.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ablate.errors import RunError

if TYPE_CHECKING:
    from ablate.store.api import Store

# Job states in which a job still holds (or will hold) its run: it may yet train it.
ALIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                   "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})


def have_slurm() -> bool:
    """Whether the Slurm client commands (``sbatch``, ``squeue``, ``scancel``) are on the PATH."""
    return all(shutil.which(c) for c in ("sbatch", "squeue", "scancel"))


def _run(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RunError(f"{cmd[0]} not found: the Slurm client commands must be on the PATH") from None
    except subprocess.TimeoutExpired:
        raise RunError(f"{' '.join(cmd)} did not answer within 60 s: is slurmctld up?") from None
    if check and proc.returncode != 0:
        raise RunError(f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def job_states(job_ids: Iterable[str] | None = None) -> dict[str, str]:
    """``{job id: state}`` from ``squeue`` (one entry per array task, ``<array>_<index>``), for the given ids
    (an array id stands for all its tasks) or for every job squeue knows."""
    proc = _run(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T"])
    states = {}
    for line in proc.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state.strip()
    if job_ids is None:
        return states
    wanted = set(job_ids)
    arrays = {j for j in wanted if "_" not in j}
    return {j: s for j, s in states.items() if j in wanted or j.split("_", 1)[0] in arrays}


def alive(job_ids: Iterable[str]) -> set[str]:
    """The given job ids whose jobs are still pending or running (an empty set when Slurm is not
    installed)."""
    ids = [j for j in job_ids if j]
    if not ids or not have_slurm():
        return set()
    states = job_states(ids)
    return {j for j in ids if states.get(j) in ALIVE}


def grid_slurm_runs(store: Store, grid: str | None = None) -> list[dict[str, Any]]:
    """The runs (of ``grid``, or all) that carry a Slurm job id: ``{"run_id", "grid", "variant", "seed",
    "status", "slurm_job_id"}``, ordered by job id. An unknown grid is a UserInputError."""
    from sqlalchemy import select

    from ablate.store.queries import _grid_filter
    from ablate.store.schema import Grid, GridRun, Run

    with store.session(write=False) as s:
        members = _grid_filter(s, grid)
        q = (select(Run.run_id, Grid.name, Run.variant, Run.seed, Run.status, Run.slurm_job_id)
             .outerjoin(GridRun, GridRun.run_id == Run.run_id).outerjoin(Grid, Grid.id == GridRun.grid_id)
             .where(Run.slurm_job_id.is_not(None)))
        if members is not None:
            q = q.where(Run.run_id.in_(members), Grid.name == grid)
        columns = ("run_id", "grid", "variant", "seed", "status", "slurm_job_id")
        rows: list[dict[str, Any]] = [dict(zip(columns, r, strict=True)) for r in s.execute(q)]
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(r["run_id"], r)  # a run in several grids: once
    return sorted(seen.values(), key=lambda r: (_job_key(r["slurm_job_id"]), r["run_id"]))


def _job_key(job_id: str) -> tuple[int, int]:
    array, _, index = job_id.partition("_")
    return (int(array) if array.isdigit() else 0, int(index) if index.isdigit() else -1)


def slurm_rows(store: Store, grid: str | None = None) -> list[dict[str, Any]]:
    """What ``ablate status`` shows about Slurm: each unfinished run that carries a job id, with the job's
    state from ``squeue`` (``"gone"`` when squeue no longer knows it, ``None`` when Slurm is not installed
    here)."""
    rows = [r for r in grid_slurm_runs(store, grid) if r["status"] in ("queued", "running")]
    if not rows:
        return []
    states = job_states(r["slurm_job_id"] for r in rows) if have_slurm() else None
    for r in rows:
        r["slurm_state"] = None if states is None else states.get(r["slurm_job_id"], "gone")
    return rows


@dataclass
class CancelReport:
    """What ``ablate cancel`` did: the Slurm jobs it cancelled and the runs it put back in the queue."""

    grid: str
    cancelled: list[str] = field(default_factory=list)  # array (or job) ids passed to scancel
    requeued: list[str] = field(default_factory=list)  # run ids now `queued`
    # job ids squeue still listed when we stopped waiting
    still_alive: list[str] = field(default_factory=list)


def cancel_grid(store: Store, grid: str, *, wait_s: float = 120.0, poll_s: float = 0.5) -> CancelReport:
    """Cancel the Slurm jobs of ``grid``'s unfinished runs (``scancel`` of their arrays), wait until squeue no
    longer lists them as alive, then mark those runs ``queued`` and forget their job ids.

    Finished runs (done, diverged, failed) keep their status and job id.
    """
    report = CancelReport(grid=grid)
    runs = [r for r in grid_slurm_runs(store, grid) if r["status"] in ("queued", "running")]
    if not runs:
        return report
    if not have_slurm():
        raise RunError("scancel not found: the Slurm client commands must be on the PATH to cancel jobs")
    job_ids = [r["slurm_job_id"] for r in runs]
    arrays = sorted({j.split("_", 1)[0] for j in alive(job_ids)}, key=int)
    if arrays:
        _run(["scancel", *arrays])
        report.cancelled = arrays
    deadline = time.monotonic() + wait_s
    while (left := alive(job_ids)) and time.monotonic() < deadline:
        time.sleep(poll_s)
    report.still_alive = sorted(left)
    for r in runs:
        if r["slurm_job_id"] in left:
            continue  # still shutting down: it records its own end
        current = store.statuses(run_ids=[r["run_id"]]).get(r["run_id"])
        if current in ("queued", "running"):  # a task may have finished while it was being cancelled
            store.mark_queued(run_id=r["run_id"])
            store.set_slurm_job_id(run_id=r["run_id"], slurm_job_id=None)
            report.requeued.append(r["run_id"])
    return report
