"""Reads: the runs table, curves, probes, histograms, events and the status summary, as pandas DataFrames.

Every function takes a Session and never commits. The runs table is one read of ``runs`` plus ``scores`` and
the grid names (summary values are stored on the run row at ingest), so 10,000 runs come back in well under a
second.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session

from ablate.ablations.config import GateSpec, SwitchSpec
from ablate.config import RunConfig
from ablate.errors import UserInputError, one_of
from ablate.metrics import COLUMNS, SUMMARY, metric
from ablate.metrics import order as summary_order
from ablate.store.chunks import IN_CHUNK, in_chunks
from ablate.store.records import flatten, utcnow
from ablate.store.schema import STATUSES, Event, GridRun, Histogram, Metric, Probe, RegisteredGrid, Run, Score

if TYPE_CHECKING:
    import pandas as pd

# CLI.md's `runs` columns, in order: who the run is, its summary metrics in their declared order
# (ablate.metrics; a family such as ppl/<set> where it is declared), then the error; then the lifecycle's
# extras
IDENTITY = ["run_id", "grid", "variant", "seed", "status"]
METRIC_COLUMNS = [m.name for m in COLUMNS]
EXTRA = ["host", "device", "started", "finished", "heartbeat", "heartbeat_step", "mlflow_run_id",
         "executor", "job_id"]
INT_COLUMNS = ["seed", "heartbeat_step", *(m.name for m in COLUMNS if m.kind is int)]
FLOAT_COLUMNS = [m.name for m in COLUMNS if m.kind is float]
_RUN_FIELDS = [c for c in [*IDENTITY, *METRIC_COLUMNS, "error", *EXTRA] if c not in ("grid",
                                                                                     "heartbeat_step")]


@cache
def config_fields() -> tuple[str, ...]:
    """Every config field by dotted path, including those of an optional gate and switch spec."""
    base = flatten(RunConfig().model_dump(mode="json"))
    extra = {f"model.gate.{k}" for k in GateSpec.model_fields} | {
        f"model.switch.{k}" for k in SwitchSpec.model_fields
    }
    return tuple(dict.fromkeys([*base, *sorted(extra)]))
OWN_METRICS = "own_metrics"  # runs_frame(...).attrs[OWN_METRICS]: the scores ablate.metrics does not declare


def result_columns(frame: pd.DataFrame) -> list[str]:
    """The results among a runs frame's columns: the summary metrics ``ablate.metrics`` declares (in their
    order), then the metrics a trainer named itself (a command's: ``attrs[OWN_METRICS]``)."""
    own = [c for c in frame.attrs.get(OWN_METRICS, []) if c in frame.columns]
    return [c for c in summary_order(list(frame.columns)) if metric(c) is not None] + own



def known_columns(frame: pd.DataFrame | None = None) -> list[str]:
    """Columns a ``--where`` may name: the runs table's own, every config field, and those of ``frame``."""
    cols = [*IDENTITY, *(m.name for m in SUMMARY if not m.family), "error", *EXTRA, *config_fields()]
    if frame is not None:
        cols += list(frame.columns)
    return list(dict.fromkeys(cols))


def grid_names(session: Session) -> list[str]:
    """The registered grids' names."""
    return list(session.scalars(select(RegisteredGrid.name).order_by(RegisteredGrid.name)))


def grids_by_activity(session: Session) -> list[str]:
    """The registered grids' names, the one whose runs last started, ended or joined first (a grid without
    runs: when it was registered); ties by name."""
    last = func.max(func.coalesce(Run.finished, Run.started, Run.created, RegisteredGrid.created))
    rows = session.execute(select(RegisteredGrid.name, last.label("last"))
                           .outerjoin(GridRun, GridRun.grid_id == RegisteredGrid.id)
                           .outerjoin(Run, Run.run_id == GridRun.run_id).group_by(RegisteredGrid.name)).all()
    return [name for name, _ in sorted(rows, key=lambda r: (-_stamp(r[1]), r[0]))]


def _stamp(value: Any) -> float:
    """A timestamp as seconds (SQLite returns the max of a datetime column as text)."""
    from datetime import datetime

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp() if value is not None else float("-inf")


def run_ids_like(session: Session, prefix: str, *, limit: int = 10) -> list[str]:
    """Run ids that start with ``prefix`` (at most ``limit``), sorted."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    q = select(Run.run_id).where(Run.run_id.like(f"{escaped}%",
                                                 escape="\\")).order_by(Run.run_id).limit(limit)
    return list(session.scalars(q))


def run_config(session: Session, run_id: str) -> dict[str, Any]:
    """The run's stored config (as resolved when it was registered or ingested)."""
    return dict(session.scalar(select(Run.config).where(Run.run_id == run_id)) or {})


def provenance(session: Session, run_ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """``{run_id: provenance}`` of the given runs (None: recorded before provenance was; see
    ablate.provenance)."""
    ids = list(run_ids)
    out: dict[str, dict[str, Any] | None] = {}
    for i in range(0, len(ids), IN_CHUNK):
        chunk = ids[i:i + IN_CHUNK]
        rows = session.execute(select(Run.run_id, Run.provenance).where(Run.run_id.in_(chunk)))
        out.update((run_id, prov) for run_id, prov in rows)
    return out


def grid_text(session: Session, name: str) -> str | None:
    """The text a grid was last registered with (None: no such grid)."""
    return session.scalar(select(RegisteredGrid.text).where(RegisteredGrid.name == name))


def older_runs(session: Session, grid: str) -> int:
    """How many runs of ``grid`` belong to older configurations of it (``grid_runs.current`` false)."""
    q = (select(func.count()).select_from(GridRun).join(RegisteredGrid)
         .where(RegisteredGrid.name == grid, GridRun.current.is_(False)))
    return int(session.scalar(q) or 0)


def same_stem(session: Session, stems: dict[str, str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """For planned runs the store does not hold (``{run id: stem id}``), a stored run of the same stem under
    another id: ``{run id: (stored id, its status, its config)}``, the latest one when there are several."""
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    by_stem: dict[str, list[str]] = defaultdict(list)
    for rid, stem in stems.items():
        by_stem[stem].append(rid)
    q = select(Run.stem_id, Run.run_id, Run.status, Run.config).order_by(Run.created, Run.run_id)
    for stem, rid, status, config in in_chunks(session, q, Run.stem_id, list(by_stem)):
        for planned in by_stem[stem]:
            if planned != rid:
                found[planned] = (rid, str(status), dict(config or {}))
    return found


def grid_axes(session: Session, grid: str) -> list[str]:
    """The config paths the grid varies on purpose: its runs' axes (from the grid file's ``grid``, ``zip`` and
    ``include`` keys), sorted."""
    q = select(GridRun.axes).join(RegisteredGrid).where(RegisteredGrid.name == grid)
    return sorted({k for axes in session.scalars(q) if axes for k in axes})


def _grid_filter(session: Session, grid: str | None, *, current: bool = False) -> Any:
    """The run ids of ``grid`` (of its current configuration only, with ``current``), as a subquery."""
    if grid is None:
        return None
    if session.scalar(select(RegisteredGrid.id).where(RegisteredGrid.name == grid)) is None:
        raise UserInputError(
            one_of(grid, grid_names(session), what="grid")
            if grid_names(session)
            else f"unknown grid {grid!r}: the store has no grids yet (run `ablate run GRID`)"
        )
    q = select(GridRun.run_id).join(RegisteredGrid).where(RegisteredGrid.name == grid)
    return q.where(GridRun.current.is_(True)) if current else q


def runs_frame(session: Session, *, grid: str | None = None, run_ids: Sequence[str] | None = None,
               current: bool = False) -> pd.DataFrame:
    """One row per run (of ``grid``, or all; only ``run_ids`` when given; with ``current`` only the runs of
    the grid's current configuration): CLI.md's ``runs`` columns, then extras, then config fields."""
    import pandas as pd

    rows, grids, scores = _runs_read(session, grid=grid, run_ids=run_ids, current=current)
    names = [*_RUN_FIELDS, "heartbeat_step"]
    frame = pd.DataFrame.from_records([r[:-1] for r in rows], columns=names)
    frame["status"] = frame["status"].map(str)  # RunStatus -> its value: a frame of plain strings
    frame["grid"] = [grid if grid is not None else (", ".join(grids[r[0]]) or None) for r in rows]
    score_names = sorted({n for s in scores.values() for n in s})
    score_frame = pd.DataFrame([[scores[r[0]].get(n) for n in score_names] for r in rows],
                               columns=score_names, dtype="float64")
    # config_flat: written with every row (migration 0002 backfilled)
    cfg = pd.DataFrame(json.loads("[" + ",".join(r[-1] or "{}" for r in rows) + "]"))
    # a config field named as a column of the run's own (variant, seed; a command config's empty params) is
    # the run's column
    taken = {*names, "grid", *score_names}
    cfg = cfg.drop(columns=[c for c in cfg.columns if c in taken])
    out = pd.concat([frame, score_frame, cfg], axis=1)
    columns, typed = _runs_columns(score_names, list(cfg.columns))
    out = out[columns]
    for c, dtype in typed.items():
        out[c] = _typed(out[c], dtype)
    out.attrs[OWN_METRICS] = [n for n in score_names if metric(n) is None]
    return out


def runs_records(session: Session, *, grid: str | None = None, run_ids: Sequence[str] | None = None,
                 current: bool = False) -> tuple[list[str], list[list[Any]], dict[str, str]]:
    """``runs_frame`` without pandas, for what is written out whole (``ablate runs --format csv``): its
    columns, one list of plain Python values per run (None where the frame has NA; ``status`` as text), and
    the dtypes ``runs_frame`` gives its typed columns (``{column: "Int64" | "float64"}``; the others are
    inferred)."""
    rows, grids, scores = _runs_read(session, grid=grid, run_ids=run_ids, current=current)
    score_names = sorted({n for s in scores.values() for n in s})
    configs = json.loads("[" + ",".join(r[-1] or "{}" for r in rows) + "]")
    seen: dict[str, Any] = {}
    for config in configs:  # every key, in the order of first appearance (as pandas orders a list of dicts)
        seen.update(config)
    taken = {*_RUN_FIELDS, "heartbeat_step", "grid", *score_names}  # as runs_frame: the run's own columns
    cfg_names = [c for c in seen if c not in taken]
    columns, typed = _runs_columns(score_names, cfg_names)
    # a run's own values, then its grids, then its scores: the head of its row picked from them in one call
    at = {c: i for i, c in enumerate([*_RUN_FIELDS, "heartbeat_step", "grid", *score_names])}
    head = itemgetter(*(at[c] for c in columns[:len(columns) - len(cfg_names)]))
    status, no_scores = _RUN_FIELDS.index("status"), (None,) * len(score_names)
    out = []
    for r, config in zip(rows, configs, strict=True):
        run_scores = scores.get(r[0])
        values = [*r[:-1], grid if grid is not None else (", ".join(grids[r[0]]) or None),
                  *(map(run_scores.get, score_names) if run_scores else no_scores)]
        values[status] = str(values[status])
        out.append([*head(values), *map(config.get, cfg_names)])
    return columns, out, typed


def _runs_read(session: Session, *, grid: str | None, run_ids: Sequence[str] | None, current: bool
               ) -> tuple[list[Any], dict[str, list[str]], dict[str, dict[str, float | None]]]:
    """The runs table's three reads: its rows (``_RUN_FIELDS``, ``heartbeat_step``, then ``config_flat`` as
    text), each run's grids, and each run's scores."""
    members = _grid_filter(session, grid, current=current)
    t = Run.__table__.c
    # config_flat as its text, decoded by the caller in one call: per row, the JSON type's decoding costs as
    # much again
    flat = cast(t.config_flat, Text).label("config_flat")
    q = select(*(t[c] for c in _RUN_FIELDS), t.step.label("heartbeat_step"), flat).order_by(t.run_id)
    sq = select(Score.run_id, Score.name, Score.value)
    gq = select(GridRun.run_id, RegisteredGrid.name).join(RegisteredGrid).order_by(RegisteredGrid.name)
    for ids in (members, None if run_ids is None else list(run_ids)):  # a grid's runs; a few (`ablate show`)
        if ids is not None:
            q, sq, gq = (
                q.where(t.run_id.in_(ids)),
                sq.where(Score.run_id.in_(ids)),
                gq.where(GridRun.run_id.in_(ids)),
            )
    rows = list(session.execute(q).all())
    grids: dict[str, list[str]] = defaultdict(list)
    for run_id, name in session.execute(gq):
        grids[run_id].append(name)
    scores: dict[str, dict[str, float | None]] = defaultdict(dict)
    for run_id, name, value in session.execute(sq):
        scores[run_id][name] = value
    return rows, grids, scores


def _runs_columns(score_names: list[str], cfg_names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The runs table's columns in order (who, declared metrics, error, extras, other scores, config fields)
    and the dtype of each typed one (seed, heartbeat_step and the declared metrics: nullable, as ``metrics``
    says)."""
    declared = [n for n in summary_order([*METRIC_COLUMNS, *score_names]) if metric(n) is not None]
    other = [n for n in score_names if metric(n) is None]
    typed = {}
    for c in ["seed", "heartbeat_step", *declared]:
        m = metric(c)
        typed[c] = "Int64" if m is None else m.dtype
    return [*IDENTITY, *declared, "error", *EXTRA, *other, *cfg_names], typed


def _typed(column: pd.Series, dtype: str) -> pd.Series:
    """``column`` as its declared dtype; an int metric stored as a score too large for Int64 stays float."""
    try:
        return column.astype(dtype)
    except (TypeError, ValueError, OverflowError):
        return column.astype("float64")


def curves(session: Session, *, run_ids: Sequence[str] | None = None,
           metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """Step-indexed curves as a long frame: ``run_id, step, metric, value`` (sorted by run, metric, step)."""
    import pandas as pd

    q = select(Metric.run_id, Metric.step, Metric.name.label("metric"), Metric.value)
    if metrics is not None:
        q = q.where(Metric.name.in_(list(metrics)))
    rows = in_chunks(session, q.order_by(Metric.run_id, Metric.name, Metric.step), Metric.run_id, run_ids)
    frame = pd.DataFrame.from_records(rows, columns=["run_id", "step", "metric", "value"])
    return frame.astype({"step": "int64", "value": "float64"})


def probes(session: Session, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-layer probe values: ``run_id, layer, name, value``."""
    import pandas as pd

    q = select(Probe.run_id, Probe.layer, Probe.name, Probe.value).order_by(Probe.run_id, Probe.name,
                                                                            Probe.layer)
    rows = in_chunks(session, q, Probe.run_id, run_ids)
    return pd.DataFrame.from_records(rows, columns=["run_id", "layer", "name", "value"]).astype(
        {"layer": "int64", "value": "float64"})


def histograms(session: Session, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Histogram bins, long: ``run_id, name, layer, bin, lo, hi, count`` (lo/hi: the bin's edges)."""
    import pandas as pd

    q = select(Histogram.run_id, Histogram.name, Histogram.layer, Histogram.counts, Histogram.edges).order_by(
        Histogram.run_id, Histogram.name, Histogram.layer)
    records = []
    for run_id, name, layer, counts, edges in in_chunks(session, q, Histogram.run_id, run_ids):
        for b, count in enumerate(counts):
            lo = edges[b] if b < len(edges) else None
            hi = edges[b + 1] if b + 1 < len(edges) else None
            records.append((run_id, name, layer, b, lo, hi, count))
    return pd.DataFrame.from_records(records, columns=["run_id", "name", "layer", "bin", "lo", "hi", "count"])


def events(session: Session, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Events (loss spikes, divergence, resumption): ``run_id, kind, step, data`` (data: a dict)."""
    import pandas as pd

    q = select(Event.run_id, Event.kind, Event.step, Event.data).order_by(Event.run_id, Event.step, Event.id)
    rows = in_chunks(session, q, Event.run_id, run_ids)
    return pd.DataFrame.from_records(rows, columns=["run_id", "kind", "step", "data"])


def statuses(session: Session, *, run_ids: Sequence[str]) -> dict[str, str]:
    """``{run_id: status}`` for the given runs the store knows (unknown ones are absent)."""
    q = select(Run.run_id, Run.status)
    return {r: s.value for r, s in in_chunks(session, q, Run.run_id, run_ids)}


def eta_seconds(steps_left: int, tokens_per_s: float | None, tokens_per_step: int | None) -> float | None:
    """Seconds a running run has left at its latest measured pace (its last step's tokens per second, which
    its start-up never slows): None until a step is measured.

    >>> eta_seconds(90, 1000.0, 100)
    9.0
    """
    if not tokens_per_s or not tokens_per_step:
        return None
    return round(max(0, steps_left) * tokens_per_step / tokens_per_s, 1)


def status_summary(session: Session, *, grid: str | None = None, stale_after_s: float = 300.0,
                   older: bool = False) -> dict[str, Any]:
    """What ``ablate status`` shows, JSON-ready.

    ``{"grids": [{"grid", "total", "queued", "running", "done", "diverged", "pruned", "failed",
    "older"}, ...], "running": [{"run_id", "variant", "seed", "host", "device", "step", "heartbeat", "age_s",
    "stale"}, ...], "stale": [run_id, ...]}``; runs in no grid are counted under ``"grid": null``. A running
    row also carries what its live records say: ``total_steps``, ``train_loss`` (latest), ``tokens_per_s``
    (latest) and ``eta_s`` (the steps left at that pace; None until known). A grid counts the runs of its
    current configuration (what its last ``ablate run`` planned); its ``older`` is how many runs of older
    configurations it also holds (the
``older`` argument: count those in the statuses too).
    """
    members = _grid_filter(session, grid)
    q = (select(RegisteredGrid.name, Run.status, GridRun.current, func.count()).select_from(Run)
         .outerjoin(GridRun, GridRun.run_id == Run.run_id)
         .outerjoin(RegisteredGrid, RegisteredGrid.id == GridRun.grid_id)
         .group_by(RegisteredGrid.name, Run.status, GridRun.current))
    if grid is not None:
        q = q.where(RegisteredGrid.name == grid)
    counts: dict[str | None, dict[str, int]] = {}
    left: dict[str | None, int] = defaultdict(int)
    for name, status, current, n in session.execute(q):
        row = counts.setdefault(name, dict.fromkeys(STATUSES, 0))
        if current is False:
            left[name] += n
        if current is not False or older:
            row[status] += n
    grids = [{"grid": name, "total": sum(c.values()), **c, "older": left[name]}
             for name, c in sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))]
    rq = select(Run.run_id, Run.variant, Run.seed, Run.host, Run.device, Run.step, Run.heartbeat,
                Run.train_steps, Run.train_loss, Run.tokens_per_s, Run.batch_size, Run.seq_len).where(
        Run.status == "running").order_by(Run.run_id)
    if members is not None:
        rq = rq.where(Run.run_id.in_(members))
    now = utcnow()
    running = []
    for run_id, variant, seed, host, device, step, beat, total, loss, tps, batch, seq in session.execute(rq):
        age = (now - beat).total_seconds() if beat is not None else None
        eta = None
        if step is not None and total and batch and seq:
            eta = eta_seconds(total - step - 1, tps, batch * seq)
        running.append({"run_id": run_id, "variant": variant, "seed": seed, "host": host, "device": device,
                        "step": step, "heartbeat": beat.isoformat(timespec="seconds") if beat else None,
                        "age_s": round(age, 1) if age is not None else None,
                        "stale": age is None or age > stale_after_s, "total_steps": total,
                        "train_loss": loss, "tokens_per_s": tps, "eta_s": eta})
    return {"grids": grids, "running": running, "stale": [r["run_id"] for r in running if r["stale"]]}
