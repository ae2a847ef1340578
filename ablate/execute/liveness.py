"""Is a ``running`` run's process alive? The one rule, used by ``ablate run``'s triage and by ``ablate
status``, and the executors' jobs the store knows of, which it asks about.

A run an executor's job holds carries that job in the store (``runs.executor``, ``runs.job_id``: a Slurm
array task ``<array>_<index>``, a Ray task); ``grid_jobs`` lists them, and their executor answers for them
(``Executor.alive``, ``states``, ``cancel``): squeue and scancel for Slurm, Ray's state API for Ray.

The rule (``Liveness``): a run whose directory lock is held on this machine is alive (the lock file names its
pid); one held by an executor's job is alive while its executor lists the job as alive, and gone once it does
not (an executor that cannot tell from here leaves it to the rules below); one recorded on this host whose
lock file is there but free was cut off (the kernel dropped the lock with its process, however it died); any
other is alive until its heartbeat is ``stale_after_s`` old (another host, or another home). A run whose
process is gone but whose ``result.json`` is complete ended; it was not cut off (``ablate status`` says so;
the triage ingests it).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from sqlalchemy import select

from ablate import layout
from ablate.execute.executor import executor_name, executors
from ablate.execute.last_attempt import crashed, finished_result
from ablate.execute.locks import LOCK_FILE, holder_pid, is_locked
from ablate.store.api import Store
from ablate.store.queries import _grid_filter
from ablate.store.schema import GridRun, RegisteredGrid, Run

UNFINISHED = ("queued", "running")


class JobRow(TypedDict):
    """A run that carries an executor's job (``grid_jobs``); ``ablate status`` adds the job in its executor's
    words (``job``) and its state as the executor says it (``state``)."""

    run_id: str
    grid: str | None
    variant: str
    seed: int
    status: str
    executor: str | None
    job_id: str
    state: NotRequired[str | None]
    job: NotRequired[str]


def grid_jobs(store: Store, grid: str | None = None, *, unfinished: bool = False) -> list[JobRow]:
    """The runs (of ``grid``, or all; only the queued and running ones with ``unfinished``) that carry an
    executor's job, ordered by executor and job. An unknown grid is a UserInputError."""
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
        rows = [JobRow(run_id=rid, grid=name, variant=variant, seed=seed, status=str(status),
                       executor=executor, job_id=str(job_id))
                for rid, name, variant, seed, status, executor, job_id in s.execute(q)]
    seen: dict[str, JobRow] = {}
    for r in rows:
        seen.setdefault(r["run_id"], r)  # a run in several grids: once
    return sorted(seen.values(), key=lambda r: (r["executor"] or "", _job_key(r["job_id"]), r["run_id"]))


def _job_key(job_id: str) -> tuple[int, int, str]:
    """Slurm's ``<array>_<index>`` in numeric order; any other id by its text."""
    array, _, index = job_id.partition("_")
    if array.isdigit():
        return int(array), int(index) if index.isdigit() else -1, ""
    return 0, 0, job_id


@dataclass(frozen=True)
class Holder:
    """Who trains a run now: a process on this machine (``pid``), an executor's job (``job``: its name in
    the executor's words, ``Slurm job 12_3``), or a process on another host."""

    host: str | None = None
    pid: int | None = None
    job: str | None = None

    def __str__(self) -> str:
        if self.job:
            return self.job
        if self.pid:
            return f"pid {self.pid}"
        return f"host {self.host}" if self.host else "another process"


class Liveness:
    """Whether the process of a ``running`` run is alive (see the module docstring).

    ``running``: the store's running rows (``status_summary()["running"]``: ``run_id``, ``host``, ``stale``);
    ``jobs``: ``{run_id: (executor, job id)}`` of runs an executor's job holds; ``live``: ``{executor: the job
    ids it lists as alive}``, or None for an executor that cannot tell from here; ``names``: ``{run_id: its
    job in the executor's words}``.
    """

    def __init__(self, home: Path, running: Iterable[Mapping[str, object]] = (), *, host: str | None = None,
                 jobs: Mapping[str, tuple[str, str]] | None = None,
                 live: Mapping[str, set[str] | None] | None = None, names: Mapping[str, str] | None = None):
        self.home = Path(home)
        self.host = host or socket.gethostname()
        self.running = {str(r["run_id"]): r for r in running}
        self.jobs = dict(jobs or {})
        self.live = dict(live or {})
        self.names = dict(names or {})

    def holder(self, run_id: str) -> Holder | None:
        """Who holds ``run_id`` now, or None when nobody does (a ``running`` record of it was cut off)."""
        run_dir = layout.run_dir(self.home, run_id)
        if is_locked(run_dir):
            return Holder(self.host, holder_pid(run_dir))
        if (held := self.jobs.get(run_id)) is not None and (live := self.live.get(held[0])) is not None:
            # its executor can tell: alive while it lists the job
            return Holder(job=self.names.get(run_id, held[1])) if held[1] in live else None
        row = self.running.get(run_id)
        if row is None:
            return None  # not running
        if row.get("host") == self.host and (run_dir / LOCK_FILE).exists():
            return None  # on this host a free lock means its process is gone, however it died
        host = row.get("host")
        return None if row.get("stale") else Holder(host if isinstance(host, str) else None)

    def is_alive(self, run_id: str) -> bool:
        """Whether a live process trains ``run_id`` now."""
        return self.holder(run_id) is not None

    def mark(self, running: list[dict[str, object]]) -> list[dict[str, object]]:
        """``ablate status``'s running rows with ``stale`` set by this rule (``gone``: True where the process
        is known to be gone at once, on this host or from its executor, not just quiet; ``ended``: True where
        it is gone because the run finished: its complete ``result.json`` waits to be recorded, by its own
        ``ablate run`` a moment later, else by the next ``ablate run`` or ``ablate ingest``, and nothing was
        cut off; ``failed``: True where it crashed while the store could not be told: its ``error.txt`` says
        how, and the next ``ablate run`` records it failed)."""
        for row in running:
            run_id = str(row["run_id"])
            alive = self.is_alive(run_id)
            run_dir = layout.run_dir(self.home, run_id)
            row["ended"] = ended = not alive and finished_result(run_dir) is not None
            row["failed"] = failed = not alive and not ended and crashed(run_dir) is not None
            row["gone"] = not alive and not ended and not failed and not row.get("stale")
            row["stale"] = not alive and not ended
        return running


def job_liveness(store: Store, home: Path, running: Sequence[Mapping[str, object]],
                 run_ids: Iterable[str] | None = None) -> Liveness:
    """The liveness rule with the jobs holding the unfinished runs among ``run_ids`` (all runs when None)
    asked of their executors (``squeue``, Ray's state API)."""
    wanted = None if run_ids is None else set(run_ids)
    rows = [r for r in grid_jobs(store, unfinished=True) if wanted is None or r["run_id"] in wanted]
    live = {ex.name: ex.alive([r["job_id"] for r in rows if r["executor"] == ex.name])
            for ex in executors({r["executor"] for r in rows})}
    names = {r["run_id"]: executor_name(str(r["executor"]), r["job_id"]) for r in rows}
    return Liveness(home, running, jobs={r["run_id"]: (str(r["executor"]), r["job_id"]) for r in rows},
                    live=live, names=names)
