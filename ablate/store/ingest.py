"""Ingesting a run's ``result.json``: its status, summary, curves, scores, probes, histograms and events, in
place of the rows an earlier ingest left (so ingesting twice leaves the same rows).

Every function takes a Session and never commits: the caller owns ``Session.begin()``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from ablate.errors import StoreError
from ablate.metrics import COLUMNS
from ablate.result import RunResult, curve_step
from ablate.store.records import CHUNK, config_columns, id_version, number, update_run, upsert, utcnow
from ablate.store.schema import Event, Histogram, Metric, Probe, Run, Score

# summary keys stored as columns of ``runs`` (ablate.metrics: column=True); every other one is a row of
# ``scores``
COLUMN_SUMMARY = tuple(m for m in COLUMNS if m.in_summary)


def _time(value: str | None, what: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise StoreError(f"result of run: {what} {value!r} is not an ISO 8601 time") from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def ingest(session: Session, result: RunResult) -> str:
    """Record a run's ``result.json``: its status, summary, curves, scores, probes, histograms and events.

    Idempotent: the run's earlier rows are replaced, so ingesting twice leaves the same rows. A run the store
    has never seen is created from ``result.config``. Returns the run id.
    """
    run_id = result.run_id
    config = dict(result.config)
    version, stem = id_version(run_id, config)
    ins = upsert(session, Run.__table__).values(run_id=run_id, config=config, **config_columns(config),
                                                  status=result.status, created=utcnow(),
                                                  config_version=version, stem_id=stem)
    session.execute(ins.on_conflict_do_nothing())
    # lock the run's row: a concurrent ingest of the same run waits here instead of mixing its child rows in
    session.execute(select(Run.run_id).where(Run.run_id == run_id).with_for_update(key_share=True))
    summary = dict(result.summary)
    values: dict[str, Any] = {m.name: number(summary.pop(m.name, None), m.kind) for m in COLUMN_SUMMARY}
    scores = {k: number(v, float) for k, v in summary.items()}
    if values["val_ppl"] is None:
        sets = [v for k, v in scores.items() if k.startswith("ppl/") and v is not None]
        values["val_ppl"] = sum(sets) / len(sets) if sets else None
    for key in ("params", "added_params"):  # keep the planned counts when the run did not measure them
        if values[key] is None:
            values.pop(key)
    known = {"started": _time(result.started, "started"), "host": result.host, "device": result.device,
             "provenance": result.provenance or None}
    values.update({k: v for k, v in known.items() if v is not None})  # else keep what mark_running recorded
    update_run(session, run_id, status=result.status, finished=_time(result.finished, "finished"),
                resumed_from=result.resumed_from, error=result.error, **values)
    for table in (Score, Metric, Probe, Histogram, Event):
        session.execute(delete(table).where(table.run_id == run_id))
    _insert(session, Score, [{"run_id": run_id, "name": k, "value": v} for k, v in sorted(scores.items())])
    _insert(session, Metric, _metric_rows(result))
    _insert(session, Probe, [{"run_id": run_id, "name": name, "layer": i, "value": number(v, float)}
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
    rows: list[dict[str, Any]] = []
    for name, idx, values in result.curves():
        rows.extend({"run_id": result.run_id, "name": name, "step": curve_step(result.run_id, s),
                     "value": number(v, float)}
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
