"""``ablate db rehash``: carry a store made under older run ids over to today's, without retraining anything.

A run id is a hash of the config (``ablate/grid/ids.py``); when that scheme or ``CONFIG_VERSION`` changes, the
same config gets a new id. Every row keeps its full resolved config, so the new id of each stored run can be
computed; what follows it:

1. its run directory, ``runs/<old>`` -> ``runs/<new>`` under ABLATE_HOME, and the ``run_id`` in its
   ``result.json`` (rewritten atomically);
2. its rows: ``runs`` (with the config re-resolved by today's code), and every row keyed by it (grid
   membership, scores, curves, probes, histograms, events), plus the ``run_id`` user attribute of tune's
   Optuna trials in the same database; one transaction per run;
3. the ``run_id`` tag of its MLflow run (when the tracking store exists).

Each step is idempotent and the directory moves first, so an interrupted rehash is finished by running it
again. A run whose new id is already taken by a run that has started is left as it is and reported (two copies
of one config: the user chooses); one whose config today's code cannot read is reported with the reason.

A run stored before its config had identity fields (CONFIG_VERSION 1: no data fingerprints) gets them from the
data as it is now, which is what it trained on unless its files were edited since: so a store trained before
is read by the reports and skipped by ``ablate run`` as before. Its relative paths are read from the folder
the rehash runs in; a run whose data is not found is not carried (it says so; rehash again from the right
folder).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import delete, func, insert, select, update

from ablate.config import CONFIG_VERSION, RunConfig
from ablate.errors import InputMissingError
from ablate.grid import identity
from ablate.grid.ids import run_id
from ablate.grid.stems import stem_id
from ablate.runner.fingerprints import Fingerprints
from ablate.store.records import config_columns, upsert
from ablate.store.schema import Event, GridRun, Histogram, Metric, Probe, Run, Score

if TYPE_CHECKING:
    from sqlalchemy import Row
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

_CHILDREN = (Score, Metric, Probe, Histogram, Event)
_OPTUNA_ATTRS = "trial_user_attributes"


@dataclass(frozen=True)
class Move:
    """One run to carry over: its id now, its id under today's scheme, and its re-resolved config."""

    old: str
    new: str
    config: dict[str, Any]
    stem: str | None = None  # the new id's stem (``ablate.grid.identity.stem_id``)


@dataclass
class RehashPlan:
    """What a rehash would do: the moves, runs already at today's id, and runs it cannot carry (id,
    reason)."""

    moves: list[Move] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    stems: dict[str, str] = field(default_factory=dict)  # stem id of each current run

    def new_ids(self) -> dict[str, str]:
        """``{new id: old id}``."""
        return {m.new: m.old for m in self.moves}


def plan(session: Session, *, only_outdated: bool = True,
         fingerprints: Fingerprints | None = None) -> RehashPlan:
    """Today's id of every stored run (of those not recorded at today's ``CONFIG_VERSION`` when
    ``only_outdated``), from its stored config with the identity fields it lacks filled from what is here now
    (``ablate.grid.identity``: its data files' fingerprints, a relative path read from the working directory;
    ``fingerprints``: the cache to use). A run whose data is not here cannot be carried: it says so."""
    fingerprints = fingerprints if fingerprints is not None else Fingerprints()
    q = select(Run.run_id, Run.config).order_by(Run.run_id)
    if only_outdated:
        q = q.where((Run.config_version.is_(None)) | (Run.config_version != CONFIG_VERSION))
    out = RehashPlan()
    for old, config in session.execute(q):
        try:
            cfg = identity.fill(RunConfig.model_validate(config or {}), fingerprints, strict=True)
        except InputMissingError as exc:
            out.unreadable.append((old, f"{exc}: run `ablate db rehash` where its data is (a relative path "
                                        "is read from the folder the command runs in)"))
            continue
        except (ValidationError, ValueError) as exc:
            first = exc.errors(include_url=False)[0] if isinstance(exc, ValidationError) else None
            why = (f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(exc))
            out.unreadable.append((old, f"its config is not valid today ({why})"))
            continue
        new = run_id(cfg)
        if new == old:
            out.current.append(old)
            out.stems[old] = stem_id(cfg)
        else:
            out.moves.append(Move(old, new, cfg.model_dump(mode="json"), stem_id(cfg)))
    fingerprints.save()
    return out


def outdated(session: Session, run_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{today's id: (stored id, status)}`` for the runs of ``run_ids`` stored under an older id."""
    stale = (Run.config_version.is_(None)) | (Run.config_version != CONFIG_VERSION)
    if not session.scalar(select(func.count()).select_from(Run).where(stale)):
        return {}
    wanted = set(run_ids)
    statuses = dict(session.execute(select(Run.run_id, Run.status).where(stale)).all())
    return {m.new: (m.old, str(statuses[m.old])) for m in plan(session).moves if m.new in wanted}


def _status(session: Session, run_id: str) -> str | None:
    status = session.scalar(select(Run.status).where(Run.run_id == run_id))
    return None if status is None else str(status)


def conflict(move: Move, status: str) -> str:
    """Why ``move`` is left: its new id is already a run that started."""
    return (f"its new id {move.new} is already a {status} run (two copies of one config, both kept); "
            "remove one of them, then rehash again")


def move_rows(session: Session, move: Move) -> str | None:
    """Re-key one run's rows from ``move.old`` to ``move.new``; None when done, else why it was left.

    A ``queued`` run already at the new id (a grid registered after the upgrade, never started) gives way to
    the old run's rows; one that has started is a conflict."""
    taken = _status(session, move.new)
    if taken is not None and taken != "queued":
        return conflict(move, taken)
    members: Sequence[Row[int, dict[str, Any] | None, bool]] = []
    # the grid was registered anew and never started: its memberships join the old run's
    if taken == "queued":
        members = session.execute(select(GridRun.grid_id, GridRun.axes, GridRun.current)
                                  .where(GridRun.run_id == move.new)).all()
        session.execute(delete(GridRun).where(GridRun.run_id == move.new))
        session.execute(delete(Run).where(Run.run_id == move.new))
    row = session.execute(select(Run.__table__).where(Run.run_id == move.old)).mappings().one()
    values = {**row, "run_id": move.new, "config": move.config, **config_columns(move.config),
              "config_version": CONFIG_VERSION, "stem_id": move.stem}
    session.execute(insert(Run.__table__).values(**values))  # type: ignore[arg-type]  # the stubs: a FromClause; it is a Table
    for table in (*_CHILDREN, GridRun):
        session.execute(update(table).where(table.run_id == move.old).values(run_id=move.new))
    if members:
        session.execute(upsert(session, GridRun.__table__).on_conflict_do_nothing(),
                        [{"grid_id": g, "run_id": move.new, "axes": axes, "current": current}
                         for g, axes, current in members])
    _move_optuna_attrs(session, move)
    session.execute(delete(Run).where(Run.run_id == move.old))
    return None


def _move_optuna_attrs(session: Session, move: Move) -> None:
    """tune keeps each trial's run id as the Optuna user attribute ``run_id`` (JSON text) in the same
    database; a finished trial cannot be updated through Optuna's API, so its row is updated here."""
    from sqlalchemy import inspect, text

    if not inspect(session.connection()).has_table(_OPTUNA_ATTRS):
        return
    session.execute(
        text(f"UPDATE {_OPTUNA_ATTRS} SET value_json = :new WHERE key = 'run_id' AND value_json = :old"),
        {"new": json.dumps(move.new), "old": json.dumps(move.old)},
    )
