"""The job a tuning trial runs in a pool worker: ``ablate run``'s training job, plus the pruning callback.

The pool (``ablate.execute.local.pool.WorkerPool``) runs ``train_trial`` with the same workers, locks, logs
and outcomes as ``ablate run``'s ``train``. A job with a ``trial`` (``storage`` URL, ``study`` name,
``trial_id``, ``pruner`` spec and its resources, ``monitor``) rebuilds the Optuna trial from the shared
storage and prunes through it; a pruned run ends with ``JobOutcome("pruned", step=, value=)`` instead of an
error. A job without one (a bracketing probe, a tuned run) is a plain training job."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ablate.execute.job import prepare  # noqa: F401 - the pool calls the job module's prepare(slot)
from ablate.execute.local.worker import JobContext
from ablate.execute.messages import Job, JobOutcome


@cache
def _storage(url: str) -> Any:
    from ablate.tune.storage import optuna_storage

    return optuna_storage(url)


def _callback(spec: dict[str, Any]) -> Any:
    import optuna

    from ablate.tune.pruning import StepPruning
    from ablate.tune.storage import make_pruner

    pruner = make_pruner(spec["pruner"], min_resource=spec["min_resource"], max_resource=spec["max_resource"])
    study = optuna.load_study(study_name=spec["study"], storage=_storage(spec["storage"]), pruner=pruner)
    return StepPruning(optuna.trial.Trial(study, spec["trial_id"]), monitor=spec["monitor"])


def train_trial(job: Job, ctx: JobContext) -> JobOutcome:
    """Train ``job`` like ``ablate run`` does; with a ``trial``, report to it and stop early when pruned."""
    import optuna

    from ablate.execute.job import train

    if job.trial is None:
        return train(job, ctx)
    callback = _callback(job.trial)
    try:
        return train(job, ctx, callbacks=[callback])
    except optuna.TrialPruned:
        # not a crash: the training job wrote its traceback, which would read as one
        (Path(job.run_dir) / "error.txt").unlink(missing_ok=True)
        return JobOutcome("pruned", step=callback.last_step, value=callback.last_value)
