"""Pruning a trial while it trains: the runner's periodic validation metric, reported to Optuna.

The runner evaluates the held-out perplexity every ``eval.every`` steps (``RunMonitor``, which keeps the
values in its ``metrics``). ``StepPruning`` runs right after the monitor in each step: when a new evaluation
is there, it hands the value to optuna-integration's ``PyTorchLightningPruningCallback``, which reports it to
the trial and raises ``optuna.TrialPruned`` when the pruner says so (in DDP it stops every rank). The
Lightning callback reports per epoch; an ablate run is one epoch of ``train.steps`` steps, so the report is
made at the step count instead. While the store (which holds the study) is unreachable, an evaluation is not
reported and the trial trains on. Imported only inside the training workers (it imports Lightning).
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import lightning as L
import optuna
import torch
from optuna_integration import PyTorchLightningPruningCallback

from ablate.execute.recorder import unless_away
from ablate.runner.callbacks import RunMonitor
from ablate.tune.protocol import PENALTY

log = logging.getLogger(__name__)


class StepPruning(PyTorchLightningPruningCallback):  # type: ignore[misc]  # optuna-integration: untyped
    """Report ``monitor`` (``val_ppl``, or ``loss`` for train_loss studies) at each of the run's evaluations
    and prune the trial when its pruner says so. A non-finite value is reported as ``PENALTY`` (the worst
    value)."""

    def __init__(self, trial: optuna.trial.Trial, monitor: str = "val_ppl"):
        super().__init__(trial, monitor)
        self._seen = 0
        self.last_step: int | None = None
        self.last_value: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: object,
                           batch: object, batch_idx: int) -> None:
        callbacks = trainer.callbacks  # type: ignore[attr-defined]  # Lightning sets it, undeclared
        run = next((c for c in callbacks if isinstance(c, RunMonitor)), None)
        if run is None:
            return
        evaluated = run.metrics.get("val_step") or []
        if len(evaluated) == self._seen:
            return
        self._seen = len(evaluated)
        series = run.metrics.get(self.monitor) or []
        value = series[-1] if series else None
        value = float(value) if value is not None and math.isfinite(value) else PENALTY
        step = evaluated[-1]
        assert step is not None  # each evaluation records its step
        self.last_step, self.last_value = int(step) + 1, value
        trainer.callback_metrics[self.monitor] = torch.tensor(value)
        # the integration reports at ``pl_module.current_epoch``: hand it the step count in its place
        # the study lives in the store: while it is away the trial trains on, unpruned at this evaluation
        epoch = SimpleNamespace(current_epoch=self.last_step)
        unless_away(lambda: self.on_validation_end(trainer, epoch),
                    then=f"trial not judged at step {self.last_step}, training goes on")
