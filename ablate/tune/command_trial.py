"""The job a tuning trial of a command grid runs: the command trainer's job, its metric stream reported to the
trial's pruner.

``command_trial(job, ctx)`` runs ``job`` as ``ablate.execute.command_job.train_command`` does (the same lock,
live metrics and result), with two things between the command and the executor: each batch of parsed
records goes first to ``StreamPruning``, which reports every new value of the tuned metric to the Optuna trial
(rebuilt from the store's database, as ``ablate.tune.job`` does for ablate's own model) and asks its pruner;
and the command's stop flag is also set when the pruner says prune, so that its whole process group is
stopped. A pruned trial ends with ``JobOutcome("pruned", step=, value=)`` (the last step and value the pruner
saw): the lifecycle records its run as ``pruned``, not failed. A job without a ``trial`` (a bracketing probe)
is the plain command job. Neither torch nor Lightning is imported.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from functools import cache

import optuna
from optuna.storages import RDBStorage

from ablate.execute.command_job import train_command
from ablate.execute.job_function import JobContext, JobInterrupted
from ablate.execute.messages import Job, JobEvent, JobOutcome, Progress, StepRow
from ablate.execute.recorder import unless_away
from ablate.tune.storage import make_pruner, optuna_storage

__all__ = ["StreamPruning", "command_trial"]


@cache
def _storage(url: str) -> RDBStorage:
    return optuna_storage(url)


class StreamPruning:
    """Reports each new value of ``metric`` in a run's step rows to ``trial`` and asks its pruner; ``pruned``
    once it said prune. A non-finite value is reported as ``worst``. A step the trial
    already holds (a resumed trial's earlier steps) is not reported again; a row without a step counts as the
    metric's position in the stream, as the run's stored curve places it."""

    def __init__(self, trial: optuna.trial.Trial, metric: str, worst: float):
        self.trial, self.metric, self.worst = trial, metric, worst
        self.seen = 0  # values of the metric so far
        self.last_step: int | None = None
        self.last_value: float | None = None
        self.pruned = False
        reported = unless_away(lambda: trial.storage.get_trial(trial._trial_id).intermediate_values,
                               then="a resumed trial may report its earlier steps again")
        self._reported = set(reported or ())

    def feed(self, rows: Iterable[StepRow]) -> bool:
        """Report the metric's new values in ``rows``, asking the pruner after each (as a training loop that
        reports and asks at every step would); whether it said prune. Once it did, nothing more is
        reported."""
        for row in rows:
            value = row.get(self.metric)
            if value is None or self.pruned:
                continue
            step = row.get("step")
            at = self.seen if step is None else int(step)
            self.seen += 1
            if at in self._reported:
                continue
            self._reported.add(at)
            self.last_step, self.last_value = at, float(value) if math.isfinite(value) else self.worst
            # the study lives in the store: while it is away the trial trains on, unpruned at this step
            self.pruned = bool(unless_away(self._judge, then=f"trial not judged at step {at}, training goes "
                                                             "on"))
        return self.pruned

    def _judge(self) -> bool:
        assert self.last_step is not None and self.last_value is not None  # feed sets them first
        self.trial.report(self.last_value, self.last_step)
        return bool(self.trial.should_prune())


class _Either(threading.Event):
    """A stop flag set by its own ``set()`` (the pruner) or by ``other``'s (the executor's stop)."""

    def __init__(self, other: threading.Event):
        super().__init__()
        self.other = other

    def is_set(self) -> bool:
        return super().is_set() or self.other.is_set()


def _pruning(spec: Mapping[str, object]) -> StreamPruning:
    pruner = make_pruner(str(spec["pruner"]), min_resource=_int(spec["min_resource"]),
                         max_resource=_resource(spec["max_resource"]))
    study = optuna.load_study(study_name=str(spec["study"]), storage=_storage(str(spec["storage"])),
                              pruner=pruner)
    worst = spec["worst"]
    assert isinstance(worst, int | float)  # ablate.tune.trials writes it
    return StreamPruning(optuna.trial.Trial(study, _int(spec["trial_id"])), str(spec["metric"]), float(worst))


def _int(value: object) -> int:
    """An id or a step count of the trial's spec (``ablate.tune.trials`` writes them as ints)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"a trial's spec holds {value!r} where a whole number belongs")
    return int(value)


def _resource(value: object) -> int | str:
    """The pruner's largest resource: a step count, or ``auto`` (Optuna's: the first finished trial's)."""
    return "auto" if value == "auto" else _int(value)


def command_trial(job: Job, ctx: JobContext) -> JobOutcome:
    """Run ``job``'s command like ``ablate run`` does; with a ``trial``, report its metric stream to it and
    stop the command's process group when the pruner says prune."""
    if job.trial is None:
        return train_command(job, ctx)
    pruning = _pruning(job.trial)
    stop = _Either(ctx.stop)

    def send(event: JobEvent) -> None:
        if isinstance(event, Progress) and pruning.feed(event.rows):
            stop.set()
        ctx.send(event)

    try:
        return train_command(job, JobContext(ctx.run_id, ctx.slot, stop, send))
    except JobInterrupted:
        if not pruning.pruned:
            raise  # the executor's stop: the run goes back to the queue
        return JobOutcome("pruned", step=pruning.last_step, value=pruning.last_value)
