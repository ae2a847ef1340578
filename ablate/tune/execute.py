"""Running tune's jobs on ``ablate run``'s local runner: the same workers, run lifecycle and display.

``TrialPool(slots, home=, store=, title=)`` is a ``LocalRunner`` whose workers run ``train_trial`` (the
training job plus Optuna's pruning callback) and whose lifecycle records a pruned trial as pruned: it starts
the workers once and runs jobs in rounds; ``run(jobs)`` returns each job's ``Ended`` (``done``/``diverged``
with its result, ``pruned`` at ``step`` with the last reported ``value``, ``failed`` with its ``error``,
``interrupted``, ``busy``) so the caller can tell Optuna and ask for the next round. Each run goes through the
store's lifecycle as in ``ablate run``: ``running`` while it trains (heartbeats, live step metrics), its
``result.json`` ingested when it ends, ``failed`` with the error when it crashes, back to ``queued`` when
interrupted. With ``mlflow``, each trial is an MLflow run of the experiment ``<grid>/tune``, nested under its
study's run, with its params and, when pruned, the step and value at which the pruner stopped it.

Ctrl-C once: running jobs save a checkpoint and the round ends (``interrupted``); twice: the workers are
killed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ablate.execute.devices import Slot
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.local.runner import LocalRunner
from ablate.execute.recorder import STORE_PATIENCE_S

if TYPE_CHECKING:
    from ablate.store.api import Store

TRIAL_JOB = "ablate.tune.job:train_trial"
Outcome = Ended  # how one trial's run ended (``kind``, ``result``, ``error``, ``step``, ``value``)

__all__ = ["TRIAL_JOB", "Outcome", "TrialPool"]


class TrialPool(LocalRunner):
    """``ablate run``'s local runner on the trial job, kept across rounds; a context manager."""

    def __init__(self, slots: list[Slot], *, home: Path, store: Store, title: str,
                 console: Console | None = None, metric: str = "val_ppl", mlflow: bool = False,
                 store_patience_s: float = STORE_PATIENCE_S):
        mirror = None
        # the trials are MLflow runs of the experiment ``title`` (<grid>/tune), nested under their study
        if mlflow:
            from ablate.execute.mirror import MirrorThread

            mirror = MirrorThread(home=home, grid=title)
        lifecycle = Lifecycle(store, home=home, mirror=mirror, metric=metric, patience_s=store_patience_s)
        super().__init__(slots, lifecycle, title=title, console=console, job_fn=TRIAL_JOB)

    def close(self) -> None:
        """Stop the workers, the live display and the lifecycle's threads."""
        super().close()
        self.lifecycle.close()
