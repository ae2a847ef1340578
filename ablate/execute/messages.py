"""What the local pool and its workers say to each other: typed messages over the pipe (pickled dataclasses).

Pool -> worker: ``RunJob(job)`` runs a job, ``StopJob()`` asks the running job to stop cleanly (it saves a
checkpoint) and no further job to start, ``Shutdown()`` ends the worker.

Worker -> pool: ``Ready`` once its job module is imported, ``Fatal`` if it could not be; then per job
``Started``, ``Progress`` (step metrics, in batches), and one of ``Finished``, ``Failed``, ``Interrupted``.
The pool adds ``Died`` (the worker died while running a job) and ``Killed`` (the pool killed it on a second
interrupt).

A job is any picklable object with a ``run_id``; the training jobs use ``Job``, and their job function returns
a ``JobOutcome``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# one optimizer step's metrics: ``step`` and any of ``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``,
# ``val_ppl``, the held-out scores (None: not measured at this step)
StepRow = Mapping[str, float | None]


class PoolJob(Protocol):
    """What the pool asks of a job: its run's id (``Job`` is the training jobs'; tests use their own)."""

    @property
    def run_id(self) -> str: ...


# ---------------------------------------------------------------- the job


@dataclass(frozen=True)
class Job:
    """One training job: a run (its id, directory and resolved config as JSON) and, for a tuning trial, the
    Optuna trial it reports to (``ablate.tune.job``); ``label`` says what it is to the user, ``name`` names
    its MLflow run (empty: ``<variant>-s<seed>``; tune's trials name their value, so a cell's trials
    differ); ``mlflow``, ``(tracking URI, MLflow run id)`` of the run opened for it before it was dealt (a
    training command logs into it: ``Lifecycle.dealt``), else None."""

    run_id: str
    run_dir: str
    config: dict[str, Any]
    trial: dict[str, Any] | None = None
    label: str = ""
    name: str = ""
    mlflow: tuple[str, str] | None = None


@dataclass(frozen=True)
class JobOutcome:
    """How a training job ended when it did not raise.

    ``trained`` (``status`` done/diverged, ``resumed_from``, ``run_one_s``: seconds inside ``run_one``),
    ``reused`` (a finished ``result.json`` was already there), ``busy`` (another process holds the run
    directory), ``pruned`` (the Optuna pruner stopped it at ``step``, its last reported value ``value``).
    """

    kind: Literal["trained", "reused", "busy", "pruned"]
    status: str | None = None
    resumed_from: int | None = None
    run_one_s: float | None = None
    step: int | None = None
    value: float | None = None


# ---------------------------------------------------------------- pool -> worker


@dataclass(frozen=True)
class RunJob:
    job: PoolJob


@dataclass(frozen=True)
class StopJob:
    pass


@dataclass(frozen=True)
class Shutdown:
    pass


# ---------------------------------------------------------------- worker -> pool


@dataclass(frozen=True)
class Ready:
    pid: int
    device: str
    threads: int


@dataclass(frozen=True)
class Fatal:
    error: str
    traceback: str


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to the job of one run."""

    run_id: str


@dataclass(frozen=True)
class Started(JobEvent):
    """The job took its run and starts training (``resuming`` from a checkpoint) on ``device``."""

    pid: int = 0
    device: str = "cpu"
    resuming: bool = False


@dataclass(frozen=True)
class Progress(JobEvent):
    """Step metrics since the last ``Progress``: dicts with ``step`` and any of ``loss``, ``lr``,
    ``grad_norm``, ``tokens_per_s``, ``val_ppl``."""

    rows: tuple[StepRow, ...] = field(default_factory=tuple)

    @property
    def last(self) -> StepRow:
        """The latest row with a training loss (what a progress display shows), else the latest row."""
        return next((r for r in reversed(self.rows) if r.get("loss") is not None),
                    self.rows[-1] if self.rows else {})


@dataclass(frozen=True)
class Finished(JobEvent):
    """The job function returned ``outcome`` (a ``JobOutcome`` for training jobs)."""

    outcome: object = None


@dataclass(frozen=True)
class Failed(JobEvent):
    """The job function raised: ``error`` is its first line (``Type: message``), ``traceback`` the whole."""

    error: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class Interrupted(JobEvent):
    """The job stopped on request (its progress is saved); ``started`` is False when it never began."""

    started: bool = False
    message: str = ""


@dataclass(frozen=True)
class Died(JobEvent):
    """The worker process died while running the job (killed, out of memory); the pool replaces it."""

    exitcode: int | None = None


@dataclass(frozen=True)
class Killed(JobEvent):
    """The pool killed the worker on a second interrupt."""

    exitcode: int | None = None


ENDS_JOB = (Finished, Failed, Interrupted)
