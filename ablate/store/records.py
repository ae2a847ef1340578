"""Writes to a run's row: its config as columns, and its lifecycle (running, heartbeats, live progress,
queued, failed, pruned, the MLflow run and job that hold it, scores). A grid's runs are registered by
``registration``, a run's ``result.json`` ingested by ``ingest``; both build on the helpers here.

Every function takes a Session and never commits: the caller owns ``Session.begin()``. Inserts that can race
(two processes registering the same run, or ingesting it) use the backend's ``ON CONFLICT`` and touch rows in
``run_id`` order, so concurrent writers neither fail nor deadlock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from ablate.config import CONFIG_VERSION
from ablate.errors import StoreError
from ablate.grid.planning import run_planner
from ablate.result import RunStatus
from ablate.store.schema import Event, Metric, Run, Score

CHUNK = 5000  # rows per executemany batch


def utcnow() -> datetime:
    """Now, as the naive UTC datetime the tables store."""
    return datetime.now(UTC).replace(tzinfo=None)


def upsert(session: Session, table: Any) -> Any:
    """The dialect's INSERT, which has ``on_conflict_do_nothing/_update``."""
    name = session.get_bind().dialect.name
    if name == "postgresql":  # its dialect is imported only by a PostgreSQL store: `ablate runs` stays light
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    if name == "sqlite":
        return sqlite_insert(table)
    raise StoreError(f"unsupported database backend {name!r}; use sqlite or postgresql")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{dotted.path: value}``; lists become compact JSON text (one cell each). The one
    flattening: the store's ``config_flat``, the runs table's columns, ``ablate diff`` and MLflow's params
    (``mlflow_mirror.mlflow_params``) all read it.

    >>> flatten({"train": {"lr": 0.003}, "seed": 0})
    {'train.lr': 0.003, 'seed': 0}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        elif isinstance(value, list):
            out[path] = json.dumps(value, separators=(",", ":"))
        else:
            out[path] = value
    return out


def config_columns(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields that are columns of ``runs`` (for filtering in SQL; the run's trainer's planner says
    which, ``GridPlanner.columns``), and the flattened config."""
    return {"config_flat": flatten(config), **run_planner(config).columns(config)}


def id_version(run_id: str, config: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """``(CONFIG_VERSION, stem id)`` when ``run_id`` is today's id of ``config`` (``GridPlanner.ids``), else
    ``(None, None)`` (an id from an older scheme, or a config this version cannot read: ``ablate db rehash``
    says which)."""
    ids = run_planner(config).ids(config)
    return (CONFIG_VERSION, ids[1]) if ids is not None and ids[0] == run_id else (None, None)


def update_run(session: Session, run_id: str, **values: Any) -> None:
    result = session.execute(update(Run).where(Run.run_id == run_id).values(**values))
    if result.rowcount != 1:  # type: ignore[attr-defined]  # an UPDATE gives a CursorResult; the stubs say Result
        raise StoreError(
            f"run {run_id!r} is not in the store; register its grid first (or ingest its result)"
        )


def number(value: Any, kind: type) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return kind(value)


def mark_running(session: Session, *, run_id: str, host: str | None, device: str | None,
                 executor: str | None = None, job_id: str | None = None) -> None:
    """The run started (or restarted) on ``host``/``device``, in ``executor``'s job ``job_id`` (None: no job
    holds it but its process): status ``running``, a fresh heartbeat."""
    now = utcnow()
    update_run(session, run_id, status=RunStatus.RUNNING, started=now, heartbeat=now, finished=None,
                host=host, device=device, error=None, executor=executor if job_id is not None else None,
                job_id=job_id)


def heartbeat(session: Session, *, run_id: str, step: int | None = None) -> None:
    """The run is alive at ``step``."""
    update_run(session, run_id, heartbeat=utcnow(), step=step)


def record_progress(session: Session, progress: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Live records of running runs: for each, a fresh heartbeat, its latest ``step`` (and ``steps``,
    ``train_loss``, ``tokens_per_s``, ``val_ppl`` as far as the rows tell) on its row, and the rows' points in
    the step table (upserted, so a resumed run reporting a step again leaves one point). A run that is no
    longer ``running`` (its ingest came first) is left alone: its ingest replaced the step table with the
    whole curve."""
    now = utcnow()
    for run_id in sorted(progress):  # one lock order for every writer
        rows = progress[run_id]
        values: dict[str, Any] = {"heartbeat": now}
        if rows:
            last = max(rows, key=lambda r: r["step"])
            values.update(step=int(last["step"]), steps=int(last["step"]) + 1)
        # a training command names its loss train_loss (the column's own name)
        for key, column in (("loss", "train_loss"), ("train_loss", "train_loss"),
                            ("tokens_per_s", "tokens_per_s"), ("val_ppl", "val_ppl")):
            latest = next((r[key] for r in reversed(rows) if number(r.get(key), float) is not None), None)
            if latest is not None:
                values[column] = float(latest)
        done = session.execute(update(Run).where(Run.run_id == run_id,
                                                 Run.status == "running").values(**values))
        points = {(name, int(r["step"])): number(v, float) for r in rows for name, v in r.items()
                  if name != "step" and v is not None}
        if done.rowcount != 1 or not points:  # type: ignore[attr-defined]  # as above: a CursorResult
            continue
        ins = upsert(session, Metric.__table__)
        ins = ins.on_conflict_do_update(index_elements=["run_id", "name", "step"],
                                        set_={"value": ins.excluded.value})
        session.execute(ins, [{"run_id": run_id, "name": n, "step": s, "value": v}
                              for (n, s), v in sorted(points.items())])


def mark_queued(session: Session, *, run_id: str) -> None:
    """Back to the queue (interrupted, or to be retried): clears the heartbeat and the error."""
    update_run(session, run_id, status=RunStatus.QUEUED, heartbeat=None, error=None, finished=None)


def mark_failed(session: Session, *, run_id: str, error: str) -> None:
    """The run failed with ``error`` (its text is kept for ``ablate runs``)."""
    update_run(session, run_id, status=RunStatus.FAILED, error=error, finished=utcnow())


def mark_pruned(session: Session, *, run_id: str, step: int | None, value: float | None,
                metric: str | None = None) -> None:
    """The run was stopped on purpose by a pruner at ``step``, having reported ``value`` of ``metric``: status
    ``pruned`` (no error), ``steps`` = the steps it trained, and one ``pruned`` event holding what the pruner
    saw."""
    update_run(session, run_id, status=RunStatus.PRUNED, error=None, finished=utcnow(), step=step,
                steps=step)
    session.execute(delete(Event).where(Event.run_id == run_id, Event.kind == "pruned"))
    data = {"value": number(value, float)} | ({"metric": metric} if metric else {})
    events = insert(Event.__table__)  # type: ignore[arg-type]  # the stubs type __table__ as a FromClause; it is a Table
    session.execute(events, [{"run_id": run_id, "kind": "pruned", "step": step or 0, "data": data}])


def mark_ids_current(session: Session, *, stems: Mapping[str, str]) -> None:
    """These runs' ids are today's: ``config_version`` = ``CONFIG_VERSION``, and ``stems`` their stem ids."""
    for run_id in sorted(stems):
        session.execute(update(Run).where(Run.run_id == run_id).values(config_version=CONFIG_VERSION,
                                                                      stem_id=stems[run_id]))


def set_mlflow_run_id(session: Session, *, run_id: str, mlflow_run_id: str) -> None:
    """Remember the MLflow run that mirrors this run."""
    update_run(session, run_id, mlflow_run_id=mlflow_run_id)


def set_job(session: Session, *, run_id: str, executor: str | None, job_id: str | None) -> None:
    """Remember the job (of ``executor``, e.g. a Slurm array task or a Ray task) that trains this run; None
    forgets it."""
    update_run(session, run_id, executor=executor if job_id is not None else None, job_id=job_id)


def set_scores(session: Session, *, run_id: str, scores: Mapping[str, float | None]) -> None:
    """Set named scores of a run (``bench/<task>`` from ``ablate eval``), replacing those of the same names;
    the run's other scores are kept. A run the store does not know is a StoreError."""
    if session.get(Run, run_id) is None:
        raise StoreError(f"no run {run_id!r} in the store; `ablate ingest` its directory first")
    rows = [{"run_id": run_id, "name": k, "value": number(v, float)} for k, v in sorted(scores.items())]
    if rows:
        stmt = upsert(session, Score.__table__)
        session.execute(stmt.on_conflict_do_update(index_elements=["run_id", "name"],
                                                   set_={"value": stmt.excluded.value}), rows)
