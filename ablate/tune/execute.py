"""Running tune's jobs on any executor's runner: the same run lifecycle and display as ``ablate run``.

``trial_runner(session, home=, store=, title=, job_fn=)`` is the session's runner (``Executor.session``: the
local pool, Ray tasks) on the trials' job function (``ablate.tune.trials``: ``train_trial``, the training job
plus Optuna's pruning callback; ``command_trial`` for a command grid), with a lifecycle that
records a pruned trial as pruned: it runs jobs in rounds; ``run(jobs)`` returns each job's ``Ended``
(``done``/``diverged`` with its result, ``pruned`` at ``step`` with the last reported ``value``, ``failed``
with its ``error``, ``interrupted``, ``busy``) so the caller can tell Optuna and ask for the next round. Each
run goes through the store's lifecycle as in ``ablate run``: ``running`` while it trains (heartbeats, live
step metrics), its ``result.json`` ingested when it ends, ``failed`` with the error when it crashes, back to
``queued`` when interrupted. With ``mlflow``, each trial is an MLflow run of the experiment ``<grid>/tune``,
nested under its study's run, with its params and, when pruned, the step and value at which the pruner stopped
it.

Ctrl-C once: running jobs save a checkpoint and the round ends (``interrupted``); twice: at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ablate.execute.executor import Runner, Session
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.mirror import MirrorThread
from ablate.execute.recorder import STORE_PATIENCE_S
from ablate.tune.trials import TRIAL_JOB

if TYPE_CHECKING:
    from ablate.store.api import Store

Outcome = Ended  # how one trial's run ended (``kind``, ``result``, ``error``, ``step``, ``value``)

__all__ = ["TRIAL_JOB", "Outcome", "trial_runner"]


@contextmanager
def trial_runner(session: Session, *, home: Path, store: Store, title: str, console: Console | None = None,
                 metric: str = "val_ppl", mlflow: bool = False, mlflow_experiment: str | None = None,
                 store_patience_s: float = STORE_PATIENCE_S, jobs: int | None = None,
                 job_fn: str = TRIAL_JOB) -> Iterator[Runner]:
    """The session's runner on the trials' job ``job_fn``, kept across rounds (``jobs``: the most at once);
    its lifecycle's threads stop with it."""
    mirror = None
    # the trials are MLflow runs of the experiment ``title`` (<grid>/tune), or of the one the user named,
    # nested under their study
    if mlflow:
        mirror = MirrorThread(home=home, grid=title, experiment=mlflow_experiment)
    lifecycle = Lifecycle(store, home=home, mirror=mirror, metric=metric, patience_s=store_patience_s)
    try:
        with session.runner(lifecycle, title=title, console=console, job_fn=job_fn, jobs=jobs) as runner:
            yield runner
    finally:
        lifecycle.close()
