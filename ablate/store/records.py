"""Writes: register grids and runs, move runs through their lifecycle, ingest ``result.json``.

Every function takes a Session and never commits: the caller owns ``Session.begin()``. Inserts that can race
(two processes registering the same run, or ingesting it) use the backend's ``ON CONFLICT`` and touch rows in
``run_id`` order, so concurrent writers neither fail nor deadlock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from ablate.config import CONFIG_VERSION, total_steps
from ablate.errors import StoreError
from ablate.metrics import COLUMNS
from ablate.result import RunResult, RunStatus, curve_step
from ablate.store.chunks import IN_CHUNK, in_chunks
from ablate.store.schema import Event, GridRun, Histogram, Metric, Probe, RegisteredGrid, Run, Score

# summary keys stored as columns of ``runs`` (ablate.metrics: column=True); every other one is a row of
# ``scores``
COLUMN_SUMMARY = tuple(m for m in COLUMNS if m.in_summary)
CHUNK = 5000  # rows per executemany batch


def utcnow() -> datetime:
    """Now, as the naive UTC datetime the tables store."""
    return datetime.now(UTC).replace(tzinfo=None)


def _upsert(session: Session, table: Any) -> Any:
    """The dialect's INSERT, which has ``on_conflict_do_nothing/_update``."""
    name = session.get_bind().dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    raise StoreError(f"unsupported database backend {name!r}; use sqlite or postgresql")


def _config_dict(config: Any) -> dict[str, Any]:
    if hasattr(config, "model_dump"):
        dumped: dict[str, Any] = config.model_dump(mode="json")
        return dumped
    if isinstance(config, Mapping):
        return dict(config)
    raise StoreError(f"a run's config must be a RunConfig or a dict, not {type(config).__name__}")


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
    """The config fields that are columns of ``runs`` (for filtering in SQL), and the flattened config."""
    model, data, train = (config.get(k) or {} for k in ("model", "data", "train"))
    return {
        "config_flat": flatten(config),
        "variant": str(config.get("variant", "baseline")),
        "seed": int(config.get("seed", 0)),
        "model_preset": model.get("preset"),
        "n_layers": model.get("n_layers"),
        "d_model": model.get("d_model"),
        "lr": train.get("lr"),
        "train_steps": total_steps(config),  # over every training stage: the progress total
        "batch_size": train.get("batch_size"),
        "seq_len": data.get("seq_len"),
    }


def id_version(run_id: str, config: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """``(CONFIG_VERSION, stem id)`` when ``run_id`` is today's id of ``config``, else ``(None, None)`` (an id
    from an older scheme, or a config this version cannot read: ``ablate db rehash`` says which)."""
    from pydantic import ValidationError

    from ablate.config import RunConfig
    from ablate.grid.identity import stem_id
    from ablate.grid.ids import run_id as make_id

    try:
        cfg = RunConfig.model_validate(dict(config))
    except (ValidationError, ValueError):
        return None, None
    return (CONFIG_VERSION, stem_id(cfg)) if make_id(cfg) == run_id else (None, None)


# the runs columns that a run shares with its other seeds: what narrows the runs whose configs are compared
_CELL_COLUMNS = ("variant", "model_preset", "n_layers", "d_model", "lr", "train_steps", "batch_size",
                 "seq_len")


def other_seeds(session: Session, grid_id: int, rows: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The grid's members that are not among ``rows`` (run id -> its ``runs`` row: ``config`` and the
    ``config_columns``) but are one of them at another seed: the same arm in the same cell, every field but
    ``seed`` equal (whether or not an earlier registration left them current: the current configuration is a
    function of what the file plans). Only members whose columns match a row's at a seed no such row has are
    read and compared, so a grid's older configurations cost no config validation. One statement when the
    grid has no other members."""

    members = sorted(set(session.scalars(select(GridRun.run_id).where(GridRun.grid_id == grid_id)))
                     - set(rows))
    if not members:
        return set()
    seeds: dict[tuple[Any, ...], set[int]] = {}
    for row in rows.values():
        seeds.setdefault(_cell(row), set()).add(row["seed"])
    cols = [getattr(Run, c) for c in _CELL_COLUMNS]
    candidates = {rid: tuple(cell) for rid, seed, *cell
                  in in_chunks(session, select(Run.run_id, Run.seed, *cols), Run.run_id, members)
                  if seed not in seeds.get(tuple(cell), {seed})}
    if not candidates:
        return set()
    cells = set(candidates.values())
    wanted = {_seedless(r["config"]) for r in rows.values() if _cell(r) in cells} - {None}
    found = in_chunks(session, select(Run.run_id, Run.config), Run.run_id, sorted(candidates))
    return {rid for rid, config in found if _seedless(config) in wanted}


def _cell(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in _CELL_COLUMNS)


def _seedless(config: Mapping[str, Any]) -> str | None:
    """What runs of one arm and cell at different seeds share: the run id the config has at seed 0 (an id,
    not the stored text, so a field a later ablate added at its default changes nothing); None for a config
    this version cannot read."""
    from pydantic import ValidationError

    from ablate.config import RunConfig
    from ablate.grid.ids import run_id

    try:
        return run_id(RunConfig.model_validate({**config, "seed": 0}))
    except (ValidationError, ValueError, TypeError):
        return None


def _stem(planned: Any, config: Mapping[str, Any]) -> str | None:
    """A planned run's stem id: its own (a PlannedRun), else computed from its config."""
    stem = _field(planned, "stem_id")
    if stem is not None:
        return str(stem)
    from ablate.config import RunConfig
    from ablate.grid.identity import stem_id

    cfg = _field(planned, "config")
    return stem_id(cfg if isinstance(cfg, RunConfig) else RunConfig.model_validate(dict(config)))


def _field(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


def register_grid(session: Session, *, name: str, text: str, runs: Iterable[Any], whole: bool = True) -> int:
    """Record a grid (its text replaces an earlier one of the same name) and its runs; return the grid's id.

    ``runs``: PlannedRun-like objects or mappings with ``run_id``, ``config`` (RunConfig or dict), ``params``,
    ``added_params`` and optionally ``axes`` and ``stem_id``. A run already in the store keeps its status and
    results. ``whole``: these runs are the grid's whole current configuration, and its other members are kept
    as runs of older ones (``grid_runs.current``), but for the members that are these runs at other seeds
    (``other_seeds``: the seeds ``--until-resolved`` added stay in the study when the file runs again); else
    they join the current ones (``--set``, ``--until-resolved``'s seeds, tune's trials).
    """
    now = utcnow()
    ins = _upsert(session, RegisteredGrid.__table__).values(name=name, text=text, created=now)
    ins = ins.on_conflict_do_update(index_elements=["name"], set_={"text": ins.excluded.text})
    grid_id: int = session.execute(ins.returning(RegisteredGrid.__table__.c.id)).scalar_one()
    # each run's row is made when its batch is written (_Rows), not all at once: 100,000 rows with their
    # configs and flattened configs held 1.7 GB
    rows = _Rows({str(_field(planned, "run_id")): planned for planned in runs}, now)
    if whole:

        kept = other_seeds(session, grid_id, rows)
        session.execute(update(GridRun).where(GridRun.grid_id == grid_id, GridRun.current.is_(True))
                        .values(current=False))
        again = sorted(kept)  # this grid's runs at more seeds: part of it, whenever they ran
        for i in range(0, len(again), IN_CHUNK):
            session.execute(update(GridRun).where(GridRun.grid_id == grid_id,
                                                  GridRun.run_id.in_(again[i:i + IN_CHUNK]))
                            .values(current=True))
    if rows:
        ordered = sorted(rows)  # one lock order for every writer
        ins = _upsert(session, Run.__table__)
        c = Run.__table__.c
        ins = ins.on_conflict_do_update(index_elements=["run_id"], set_={
            "params": _coalesce(c.params, ins.excluded.params),
            "added_params": _coalesce(c.added_params, ins.excluded.added_params),
            "stem_id": _coalesce(c.stem_id, ins.excluded.stem_id)})
        for i in range(0, len(ordered), CHUNK):
            session.execute(ins, [rows[k] for k in ordered[i:i + CHUNK]])
        ins = _upsert(session, GridRun.__table__)
        ins = ins.on_conflict_do_update(index_elements=["grid_id", "run_id"], set_={"current": True})
        for i in range(0, len(ordered), CHUNK):
            session.execute(ins, [rows.member(k, grid_id) for k in ordered[i:i + CHUNK]])
    return grid_id


class _Rows(Mapping[str, dict[str, Any]]):
    """The ``runs`` rows of planned runs (run id -> planned run), each made when it is read: a grid's rows
    are written a batch at a time, and ``other_seeds`` reads them one at a time."""

    def __init__(self, planned: dict[str, Any], now: datetime):
        self._planned, self._now = planned, now

    def __getitem__(self, run_id: str) -> dict[str, Any]:
        planned = self._planned[run_id]
        config = _config_dict(_field(planned, "config"))
        return {"run_id": run_id, "config": config, **config_columns(config), "status": RunStatus.QUEUED,
                "config_version": CONFIG_VERSION, "stem_id": _stem(planned, config), "created": self._now,
                "params": _field(planned, "params"), "added_params": _field(planned, "added_params")}

    def __iter__(self) -> Iterator[str]:
        return iter(self._planned)

    def __len__(self) -> int:
        return len(self._planned)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._planned

    def member(self, run_id: str, grid_id: int) -> dict[str, Any]:
        """The run's ``grid_runs`` row in grid ``grid_id``: current, with the values its axes gave it."""
        axes = _field(self._planned[run_id], "axes")
        return {"grid_id": grid_id, "run_id": run_id, "axes": dict(axes) if axes else None, "current": True}


def _coalesce(a: Any, b: Any) -> Any:
    from sqlalchemy import func

    return func.coalesce(a, b)


def _update_run(session: Session, run_id: str, **values: Any) -> None:
    result = session.execute(update(Run).where(Run.run_id == run_id).values(**values))
    if result.rowcount != 1:  # type: ignore[attr-defined]  # an UPDATE gives a CursorResult; the stubs say Result
        raise StoreError(
            f"run {run_id!r} is not in the store; register its grid first (or ingest its result)"
        )


def mark_running(session: Session, *, run_id: str, host: str | None, device: str | None,
                 executor: str | None = None, job_id: str | None = None) -> None:
    """The run started (or restarted) on ``host``/``device``, in ``executor``'s job ``job_id`` (None: no job
    holds it but its process): status ``running``, a fresh heartbeat."""
    now = utcnow()
    _update_run(session, run_id, status=RunStatus.RUNNING, started=now, heartbeat=now, finished=None,
                host=host, device=device, error=None, executor=executor if job_id is not None else None,
                job_id=job_id)


def heartbeat(session: Session, *, run_id: str, step: int | None = None) -> None:
    """The run is alive at ``step``."""
    _update_run(session, run_id, heartbeat=utcnow(), step=step)


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
        for key, column in (("loss", "train_loss"), ("tokens_per_s", "tokens_per_s"), ("val_ppl", "val_ppl")):
            latest = next((r[key] for r in reversed(rows) if _num(r.get(key), float) is not None), None)
            if latest is not None:
                values[column] = float(latest)
        done = session.execute(update(Run).where(Run.run_id == run_id,
                                                 Run.status == "running").values(**values))
        points = {(name, int(r["step"])): _num(v, float) for r in rows for name, v in r.items()
                  if name != "step" and v is not None}
        if done.rowcount != 1 or not points:  # type: ignore[attr-defined]  # as above: a CursorResult
            continue
        ins = _upsert(session, Metric.__table__)
        ins = ins.on_conflict_do_update(index_elements=["run_id", "name", "step"],
                                        set_={"value": ins.excluded.value})
        session.execute(ins, [{"run_id": run_id, "name": n, "step": s, "value": v}
                              for (n, s), v in sorted(points.items())])


def mark_queued(session: Session, *, run_id: str) -> None:
    """Back to the queue (interrupted, or to be retried): clears the heartbeat and the error."""
    _update_run(session, run_id, status=RunStatus.QUEUED, heartbeat=None, error=None, finished=None)


def mark_failed(session: Session, *, run_id: str, error: str) -> None:
    """The run failed with ``error`` (its text is kept for ``ablate runs``)."""
    _update_run(session, run_id, status=RunStatus.FAILED, error=error, finished=utcnow())


def mark_pruned(session: Session, *, run_id: str, step: int | None, value: float | None,
                metric: str | None = None) -> None:
    """The run was stopped on purpose by a pruner at ``step``, having reported ``value`` of ``metric``: status
    ``pruned`` (no error), ``steps`` = the steps it trained, and one ``pruned`` event holding what the pruner
    saw."""
    _update_run(session, run_id, status=RunStatus.PRUNED, error=None, finished=utcnow(), step=step,
                steps=step)
    session.execute(delete(Event).where(Event.run_id == run_id, Event.kind == "pruned"))
    data = {"value": _num(value, float)} | ({"metric": metric} if metric else {})
    events = insert(Event.__table__)  # type: ignore[arg-type]  # the stubs type __table__ as a FromClause; it is a Table
    session.execute(events, [{"run_id": run_id, "kind": "pruned", "step": step or 0, "data": data}])


def mark_ids_current(session: Session, *, stems: Mapping[str, str]) -> None:
    """These runs' ids are today's: ``config_version`` = ``CONFIG_VERSION``, and ``stems`` their stem ids."""
    for run_id in sorted(stems):
        session.execute(update(Run).where(Run.run_id == run_id).values(config_version=CONFIG_VERSION,
                                                                      stem_id=stems[run_id]))


def set_mlflow_run_id(session: Session, *, run_id: str, mlflow_run_id: str) -> None:
    """Remember the MLflow run that mirrors this run."""
    _update_run(session, run_id, mlflow_run_id=mlflow_run_id)


def set_job(session: Session, *, run_id: str, executor: str | None, job_id: str | None) -> None:
    """Remember the job (of ``executor``, e.g. a Slurm array task or a Ray task) that trains this run; None
    forgets it."""
    _update_run(session, run_id, executor=executor if job_id is not None else None, job_id=job_id)


def set_scores(session: Session, *, run_id: str, scores: Mapping[str, float | None]) -> None:
    """Set named scores of a run (``bench/<task>`` from ``ablate eval``), replacing those of the same names;
    the run's other scores are kept. A run the store does not know is a StoreError."""
    if session.get(Run, run_id) is None:
        raise StoreError(f"no run {run_id!r} in the store; `ablate ingest` its directory first")
    rows = [{"run_id": run_id, "name": k, "value": _num(v, float)} for k, v in sorted(scores.items())]
    if rows:
        stmt = _upsert(session, Score.__table__)
        session.execute(stmt.on_conflict_do_update(index_elements=["run_id", "name"],
                                                   set_={"value": stmt.excluded.value}), rows)


def _time(value: str | None, what: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise StoreError(f"result of run: {what} {value!r} is not an ISO 8601 time") from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _num(value: Any, kind: type) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return kind(value)


def ingest(session: Session, result: RunResult) -> str:
    """Record a run's ``result.json``: its status, summary, curves, scores, probes, histograms and events.

    Idempotent: the run's earlier rows are replaced, so ingesting twice leaves the same rows. A run the store
    has never seen is created from ``result.config``. Returns the run id.
    """
    run_id = result.run_id
    config = dict(result.config)
    version, stem = id_version(run_id, config)
    ins = _upsert(session, Run.__table__).values(run_id=run_id, config=config, **config_columns(config),
                                                  status=result.status, created=utcnow(),
                                                  config_version=version, stem_id=stem)
    session.execute(ins.on_conflict_do_nothing())
    # lock the run's row: a concurrent ingest of the same run waits here instead of mixing its child rows in
    session.execute(select(Run.run_id).where(Run.run_id == run_id).with_for_update(key_share=True))
    summary = dict(result.summary)
    values: dict[str, Any] = {m.name: _num(summary.pop(m.name, None), m.kind) for m in COLUMN_SUMMARY}
    scores = {k: _num(v, float) for k, v in summary.items()}
    if values["val_ppl"] is None:
        sets = [v for k, v in scores.items() if k.startswith("ppl/") and v is not None]
        values["val_ppl"] = sum(sets) / len(sets) if sets else None
    for key in ("params", "added_params"):  # keep the planned counts when the run did not measure them
        if values[key] is None:
            values.pop(key)
    known = {"started": _time(result.started, "started"), "host": result.host, "device": result.device,
             "provenance": result.provenance or None}
    values.update({k: v for k, v in known.items() if v is not None})  # else keep what mark_running recorded
    _update_run(session, run_id, status=result.status, finished=_time(result.finished, "finished"),
                resumed_from=result.resumed_from, error=result.error, **values)
    for table in (Score, Metric, Probe, Histogram, Event):
        session.execute(delete(table).where(table.run_id == run_id))
    _insert(session, Score, [{"run_id": run_id, "name": k, "value": v} for k, v in sorted(scores.items())])
    _insert(session, Metric, _metric_rows(result))
    _insert(session, Probe, [{"run_id": run_id, "name": name, "layer": i, "value": _num(v, float)}
                             for name, vals in result.probes.items() for i, v in enumerate(vals)])
    _insert(
        session,
        Histogram,
        [
            {"run_id": run_id, "name": name, "layer": i, "counts": counts, "edges": result.histogram_edges}
            for name, layers in result.histograms.items()
            for i, counts in enumerate(layers)
        ],
    )
    _insert(session, Event, [{"run_id": run_id, "kind": e.kind, "step": e.step, "data": e.data}
                             for e in result.events])
    return run_id


def _metric_rows(result: RunResult) -> list[dict[str, Any]]:
    metrics = result.metrics
    steps = metrics.get("step")
    val_steps = metrics.get("val_step")
    rows: list[dict[str, Any]] = []
    for name, values in metrics.items():
        if name in ("step", "val_step"):
            continue
        candidates = [val_steps, steps] if name.startswith("val_") else [steps]
        idx = next((c for c in candidates if c is not None and len(c) == len(values)), None)
        if idx is None and steps is None and val_steps is None:
            idx = list(range(len(values)))
        if idx is None:
            raise StoreError(f"result of run {result.run_id}: metric {name!r} has {len(values)} values for "
                             f"{len(steps or [])} steps")
        rows.extend({"run_id": result.run_id, "name": name, "step": curve_step(result.run_id, s),
                     "value": _num(v, float)}
                    for s, v in zip(idx, values, strict=True))
    return rows


def _insert(session: Session, table: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    if table is Metric and session.get_bind().dialect.name == "postgresql":
        _copy_metrics(session, rows)
        return
    for i in range(0, len(rows), CHUNK):
        session.execute(insert(table.__table__), rows[i:i + CHUNK])


def _copy_metrics(session: Session, rows: list[dict[str, Any]]) -> None:
    """PostgreSQL's COPY for curves (several times faster than batched INSERTs), in the session's
    transaction."""
    cursor = session.connection().connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once detached
    with cursor.copy("COPY metrics (run_id, name, step, value) FROM STDIN") as copy:
        for r in rows:
            copy.write_row((r["run_id"], r["name"], r["step"], r["value"]))
