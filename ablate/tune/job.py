"""The job a tuning trial runs in a pool worker: ``ablate run``'s training job, plus the pruning callback.

The pool (``ablate.execute.local.pool.WorkerPool``) runs ``train_trial`` with the same workers, locks, logs
and outcomes as ``ablate run``'s ``train``. A job with a ``trial`` (``storage`` URL, ``study`` name,
``trial_id``, ``pruner`` spec and its resources, ``monitor``) rebuilds the Optuna trial from the shared
storage and prunes through it; a pruned run ends with ``JobOutcome("pruned", step=, value=)`` instead of an
error. A job without one (a bracketing probe, a tuned run) is a plain training job. Only the workers import
this module (it imports torch, Lightning and Optuna)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

import optuna
from optuna.storages import RDBStorage

from ablate.execute.job_function import JobContext
from ablate.execute.messages import Job, JobOutcome
from ablate.execute.training import prepare, train
from ablate.tune.pruning import StepPruning
from ablate.tune.storage import make_pruner, optuna_storage

__all__ = ["prepare", "train_trial"]  # the pool calls the job module's prepare(slot) once per worker


@cache
def _storage(url: str) -> RDBStorage:
    return optuna_storage(url)


def _callback(spec: Mapping[str, object]) -> StepPruning:
    pruner = make_pruner(str(spec["pruner"]), min_resource=_int(spec["min_resource"]),
                         max_resource=_int(spec["max_resource"]))
    study = optuna.load_study(study_name=str(spec["study"]), storage=_storage(str(spec["storage"])),
                              pruner=pruner)
    return StepPruning(optuna.trial.Trial(study, _int(spec["trial_id"])), monitor=str(spec["monitor"]))


def _int(value: object) -> int:
    """An id or a step count of the trial's spec (``ablate.tune.tuner`` writes them as ints)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"a trial's spec holds {value!r} where a whole number belongs")
    return int(value)


def train_trial(job: Job, ctx: JobContext) -> JobOutcome:
    """Train ``job`` like ``ablate run`` does; with a ``trial``, report to it and stop early when pruned."""
    if job.trial is None:
        return train(job, ctx)
    callback = _callback(job.trial)
    try:
        return train(job, ctx, callbacks=[callback])
    except optuna.TrialPruned:
        # not a crash: the training job wrote its traceback, which would read as one
        (Path(job.run_dir) / "error.txt").unlink(missing_ok=True)
        return JobOutcome("pruned", step=callback.last_step, value=callback.last_value)
