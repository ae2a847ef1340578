"""The store's tables as SQLAlchemy 2.0 typed ORM classes.

Nullability comes from the ``Mapped[...]`` type; constraint names from one naming convention (so Alembic
migrations can name what they change). Relationships are ``lazy="raise"``: a query says what it loads. Child
rows (curves, scores, probes, histograms, events) are keyed by ``run_id`` and replaced as a whole when a run's
``result.json`` is ingested, which is what makes ingest idempotent.

Schema changes need a migration in ``ablate/store/migrations/versions`` (the tests compare the two).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy import Enum as SQLEnum
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ablate.result import ENDED, RunStatus

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

STATUSES = tuple(s.value for s in RunStatus)
FINISHED = tuple(s.value for s in ENDED)


def status_type() -> SQLEnum:
    """``runs.status``: RunStatus stored as its value in a VARCHAR(16) with a CHECK constraint (not a native
    PostgreSQL ENUM, so adding a status is a new CHECK, never an ``ALTER TYPE`` that cannot run in a
    transaction)."""
    return SQLEnum(RunStatus, name="run_status", native_enum=False, length=16, create_constraint=True,
                   values_callable=lambda enum: [m.value for m in enum], validate_strings=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _run_fk() -> ForeignKey:
    return ForeignKey("runs.run_id", ondelete="CASCADE")


class RegisteredGrid(Base):
    """A grid file as registered: its name (unique) and text."""

    __tablename__ = "grids"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    text: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime]
    members: Mapped[list[GridRun]] = relationship(back_populates="grid", lazy="raise")


class GridRun(Base):
    """Membership: a run belongs to every grid that lists it (the same config in two grids is one run).

    ``current``: the run is in the grid's current configuration (what its file planned the last time it ran
    without ``--set``, the runs ``--set`` added since, and those runs at more seeds: ``--until-resolved``'s);
    a run of an older one (an edited grid file, changed data) stays a member, not current.
    """

    __tablename__ = "grid_runs"
    grid_id: Mapped[int] = mapped_column(ForeignKey("grids.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[str] = mapped_column(_run_fk(), primary_key=True)
    axes: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    current: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    grid: Mapped[RegisteredGrid] = relationship(back_populates="members", lazy="raise")
    run: Mapped[Run] = relationship(back_populates="memberships", lazy="raise")


class Run(Base):
    """One run: its resolved config, where it is in its lifecycle, and its summary numbers (``ablate runs``).

    The summary columns are filled by ingest from ``result.json``'s ``summary`` so the runs table is one read
    of this table plus ``scores``, never computed from curves at query time.
    """

    __tablename__ = "runs"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # the config, and the fields of it that queries filter on
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    # the config as {dotted.path: value}, computed on write so the runs table need not flatten 10,000 configs
    config_flat: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # the CONFIG_VERSION run_id was computed under; None: an older scheme (``ablate db rehash`` carries it
    # over)
    config_version: Mapped[int | None]
    # the run id without its identity fields (``grid.identity.stem_id``): another run of the same stem read
    # other data; None: not yet known (``ablate db rehash`` fills it)
    stem_id: Mapped[str | None] = mapped_column(String(64), index=True)
    variant: Mapped[str] = mapped_column(String(100), index=True)
    seed: Mapped[int]
    model_preset: Mapped[str | None] = mapped_column(String(100))
    n_layers: Mapped[int | None]
    d_model: Mapped[int | None]
    lr: Mapped[float | None] = mapped_column(Float)
    train_steps: Mapped[int | None]
    batch_size: Mapped[int | None]
    seq_len: Mapped[int | None]
    # lifecycle
    status: Mapped[RunStatus] = mapped_column(status_type())
    created: Mapped[datetime]
    started: Mapped[datetime | None]
    finished: Mapped[datetime | None]
    heartbeat: Mapped[datetime | None]
    step: Mapped[int | None]  # the last step a heartbeat reported
    host: Mapped[str | None] = mapped_column(String(200))
    device: Mapped[str | None] = mapped_column(String(200))
    # the software, device and grid commit that produced it (ablate.provenance); None: recorded before it
    # existed
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    resumed_from: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(Text)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    # the executor whose job trains it now (``local``, ``slurm``, ``ray``) and that job's id in its own terms
    # (Slurm: ``<array>_<index>``); None when no job holds it
    executor: Mapped[str | None] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(128))
    # the trainer that made it (``ablate.trainers.registry``): None, ablate's own model (every run made before
    # there was a choice); ``command``: a training command, whose parameters (seed left out) are
    # ``trainer_params``
    trainer: Mapped[str | None] = mapped_column(String(16))
    trainer_params: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # summary (CLI.md's `runs` columns that are not per-set scores)
    params: Mapped[int | None] = mapped_column(BigInteger)
    added_params: Mapped[int | None] = mapped_column(BigInteger)
    steps: Mapped[int | None]
    tokens: Mapped[int | None] = mapped_column(BigInteger)
    train_loss: Mapped[float | None] = mapped_column(Float)
    val_ppl: Mapped[float | None] = mapped_column(Float)
    loss_spikes: Mapped[int | None]
    gate_score: Mapped[float | None] = mapped_column(Float)
    f_attn: Mapped[float | None] = mapped_column(Float)
    m_act: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    wall_s: Mapped[float | None] = mapped_column(Float)
    memberships: Mapped[list[GridRun]] = relationship(back_populates="run", lazy="raise")

    __table_args__ = (Index("ix_runs_status_heartbeat", "status", "heartbeat"),)


class Score(Base):
    """A named scalar of a finished run: ``ppl/<set>``, ``bench/<task>``, and any other summary value."""

    __tablename__ = "scores"
    run_id: Mapped[str] = mapped_column(_run_fk(), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class Metric(Base):
    """One point of a step-indexed curve (``loss``, ``lr``, ``grad_norm``, ``val_ppl``, ...)."""

    __tablename__ = "metrics"
    run_id: Mapped[str] = mapped_column(_run_fk(), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class Probe(Base):
    """A per-layer probe value (``gate_score``, ``f_attn``, ``m_act``, ``mean_abs_pre``, ...)."""

    __tablename__ = "probes"
    run_id: Mapped[str] = mapped_column(_run_fk(), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    layer: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class Histogram(Base):
    """Per-layer bin counts of one quantity (e.g. gate scores), with the bin edges they were counted in."""

    __tablename__ = "histograms"
    run_id: Mapped[str] = mapped_column(_run_fk(), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    layer: Mapped[int] = mapped_column(Integer, primary_key=True)
    counts: Mapped[list[float]] = mapped_column(JSON)
    edges: Mapped[list[float]] = mapped_column(JSON)


class Event(Base):
    """Something that happened at a step: ``loss_spike``, ``diverged``, ``resumed``."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(_run_fk(), index=True)
    kind: Mapped[str] = mapped_column(String(50))
    step: Mapped[int]
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class SequentialDecision(Base):
    """What ``ablate run --until-resolved`` decided for one comparison of a grid
    (``ablate.stats.sequential``'s ``Decision``): ``treatment`` against ``reference`` on ``metric`` at
    ``cell`` (the grid's other axes), over the paired ``runs``; ``look`` (1-based) resolved it, or it was open
    at the last planned look (NULL).
    ``n``, ``level`` and ``p_adj`` are that look's; ``family`` comparisons were corrected together
    (``correction``) at each look of ``plan``; ``looks`` holds each look it took part in. ``key`` names the
    comparison within its grid and metric (a hash of treatment, reference and cell): a later
    ``--until-resolved`` of the same comparison replaces the row."""

    __tablename__ = "sequential_decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    grid_id: Mapped[int] = mapped_column(ForeignKey("grids.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(64))
    treatment: Mapped[str] = mapped_column(String(300))
    reference: Mapped[str] = mapped_column(String(300))
    cell: Mapped[dict[str, Any]] = mapped_column(JSON)
    runs: Mapped[list[str]] = mapped_column(JSON)
    look: Mapped[int | None]
    n: Mapped[int]
    level: Mapped[float] = mapped_column(Float)
    p_adj: Mapped[float | None] = mapped_column(Float)
    family: Mapped[int]
    correction: Mapped[str] = mapped_column(String(16))
    plan: Mapped[list[int]] = mapped_column(JSON)
    looks: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    recorded: Mapped[datetime]

    __table_args__ = (UniqueConstraint("grid_id", "metric", "key"),)
