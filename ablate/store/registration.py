"""Registering a grid: its row, its runs' rows (made a batch at a time) and their memberships, and which of
its members stay in its current configuration (``other_seeds``).

Every function takes a Session and never commits: the caller owns ``Session.begin()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ablate.config import CONFIG_VERSION, RunConfig
from ablate.errors import StoreError
from ablate.grid.ids import run_id
from ablate.grid.stems import stem_id
from ablate.result import RunStatus
from ablate.store.chunks import IN_CHUNK, in_chunks
from ablate.store.records import CHUNK, config_columns, upsert, utcnow
from ablate.store.schema import GridRun, RegisteredGrid, Run


def _config_dict(config: Any) -> dict[str, Any]:
    if hasattr(config, "model_dump"):
        dumped: dict[str, Any] = config.model_dump(mode="json")
        return dumped
    if isinstance(config, Mapping):
        return dict(config)
    raise StoreError(f"a run's config must be a RunConfig or a dict, not {type(config).__name__}")


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
    try:
        return run_id(RunConfig.model_validate({**config, "seed": 0}))
    except (ValidationError, ValueError, TypeError):
        return None


def _stem(planned: Any, config: Mapping[str, Any]) -> str | None:
    """A planned run's stem id: its own (a PlannedRun), else computed from its config."""
    stem = _field(planned, "stem_id")
    if stem is not None:
        return str(stem)
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
    ins = upsert(session, RegisteredGrid.__table__).values(name=name, text=text, created=now)
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
        ins = upsert(session, Run.__table__)
        c = Run.__table__.c
        ins = ins.on_conflict_do_update(index_elements=["run_id"], set_={
            "params": _coalesce(c.params, ins.excluded.params),
            "added_params": _coalesce(c.added_params, ins.excluded.added_params),
            "stem_id": _coalesce(c.stem_id, ins.excluded.stem_id)})
        for i in range(0, len(ordered), CHUNK):
            session.execute(ins, [rows[k] for k in ordered[i:i + CHUNK]])
        ins = upsert(session, GridRun.__table__)
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
    return func.coalesce(a, b)
