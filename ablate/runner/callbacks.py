"""The run's one Lightning callback: per-step metrics, loss spikes, divergence, checkpoints, the stop event.

Its state (the metric curves so far, events, the spike and divergence rules, training wall time) travels in
every checkpoint, so a resumed run's record is that of an uninterrupted run.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.utilities.types import STEP_OUTPUT

from ablate.config import RunConfig
from ablate.layout import partial_removed
from ablate.result import RunEvent
from ablate.runner.module import LitDecoder, lr_factor
from ablate.runner.parallel import is_sharded, save_sharded
from ablate.stats.stability import DivergenceDetector, SpikeDetector

log = logging.getLogger(__name__)

CURVES = ("step", "loss", "lr", "grad_norm", "tokens_per_s")


class RunMonitor(L.Callback):
    """Reads the loss and gradient norm once per step (after the optimizer step), records them, applies the
    stability rules, saves ``last.ckpt`` every ``checkpoint_every`` steps and at the end, and honours
    ``stop``."""

    def __init__(self, config: RunConfig, ckpt_path: Path, *,
                 on_step: Callable[[Mapping[str, float | None]], None] | None = None,
                 stop: threading.Event | None = None, evaluate: Callable[[], dict[str, float]] | None = None,
                 step_offset: int = 0):
        self.config, self.ckpt_path, self.on_step, self.stop, self.evaluate = (
            config,
            ckpt_path,
            on_step,
            stop,
            evaluate,
        )
        # a later training stage (ablate.runner.stages): ``config`` is the stage's, steps are numbered from
        # here
        self.step_offset = step_offset
        tc = config.train
        self.tokens_per_step = tc.batch_size * config.data.seq_len
        self.metrics: dict[str, list[float | None]] = {k: [] for k in CURVES}
        self.events: list[RunEvent] = []
        self.spikes = SpikeDetector(tc.spike_window, tc.spike_sigma)
        self.divergence = DivergenceDetector.for_run(tc)
        self.train_wall_s = 0.0
        self.started: str | None = None
        self.diverged_at: int | None = None
        self.interrupted_at: int | None = None
        self.resumed_from: int | None = None
        self._t_last = 0.0

    # ---- checkpointed state
    def state_dict(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "events": [e.model_dump() for e in self.events],
                "spikes": self.spikes.state_dict(), "divergence": self.divergence.state_dict(),
                "train_wall_s": self.train_wall_s, "started": self.started}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.metrics = {k: list(v) for k, v in state["metrics"].items()}
        self.events = [RunEvent.model_validate(e) for e in state["events"]]
        self.spikes.load_state_dict(state["spikes"])
        self.divergence.load_state_dict(state["divergence"])
        self.train_wall_s, self.started = state["train_wall_s"], state["started"]

    # ---- hooks
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.resumed_from is not None:
            self.events.append(RunEvent(kind="resumed", step=self.resumed_from))
        self._t_last = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: STEP_OUTPUT,
                           batch: dict[str, int | torch.Tensor], batch_idx: int) -> None:
        if int(batch.get("micro", 0)) + 1 < self.config.train.accumulate:
            return  # a micro-batch inside the step: its gradient is accumulated, no optimizer step yet
        step = int(batch["step"])
        lit = cast(LitDecoder, pl_module)  # the module run.py trains
        last = cast(torch.Tensor, lit.last_loss)  # set by this step's micro-batches
        if trainer.world_size > 1:  # several devices: the global batch's loss, the same on every rank
            last = trainer.strategy.reduce(last.detach().clone(), reduce_op="mean")
        loss = float(last.item())  # the one host sync of the step
        grad_norm = float(lit.last_grad_norm.item()) if lit.last_grad_norm is not None else None
        now = time.perf_counter()
        dt, self._t_last = now - self._t_last, now
        self.train_wall_s += dt
        # the step within this stage: its schedule, checkpoints and evaluation
        local = step - self.step_offset
        row: dict[str, float | None] = dict(
            step=step, loss=loss, lr=self.config.train.lr * lr_factor(local, self.config.train),
            grad_norm=grad_norm, tokens_per_s=self.tokens_per_step / dt if dt > 0 else None)
        for k in CURVES:
            self.metrics[k].append(_finite_or_none(row[k]) if k != "step" else step)
        spike = self.spikes.update(step, loss)
        if spike is not None:
            log.info("loss spike at step %d: %.4g (trend %.4g, %.1f std)", step, loss, spike.trend,
                     spike.size)
            self.events.append(RunEvent(kind="loss_spike", step=step,
                                     data={"loss": loss, "trend": spike.trend, "size": spike.size}))
        reason = self.divergence.update(loss)
        if reason is not None:
            log.warning("run diverged at step %d: %s", step, reason)
            self.events.append(RunEvent(kind="diverged", step=step,
                                     data={"loss": _finite_or_none(loss), "reason": reason}))
            self.diverged_at = step
            trainer.should_stop = True
            self._report(trainer, row)
            return
        done, paused = local + 1, False
        if self.evaluate is not None and self.config.eval.every and done % self.config.eval.every == 0:
            scores, paused = self.evaluate(), True
            self.metrics.setdefault("val_step", []).append(step)
            for name, value in scores.items():
                self.metrics.setdefault(name, []).append(_finite_or_none(value))
            row.update(scores)  # live: the held-out scores of this step travel with its training metrics
        self._report(trainer, row)
        stopping = self.stop is not None and self.stop.is_set() and done < self.config.train.steps
        if trainer.world_size > 1:  # one rank asked to stop (Slurm signals rank 0): every rank stops here
            stopping = trainer.strategy.reduce_boolean_decision(stopping, all=False)
        if done % self.config.train.checkpoint_every == 0 or done == self.config.train.steps or stopping:
            self.save(trainer)
            paused = True
        if stopping:
            self.interrupted_at = done
            trainer.should_stop = True
        if paused:  # evaluation and checkpoints are not training time
            self._t_last = time.perf_counter()

    def _report(self, trainer: L.Trainer, row: dict[str, float | None]) -> None:
        """One ``on_step`` call per optimizer step, on rank 0 (with ``val_ppl`` etc. on an evaluation
        step)."""
        if trainer.is_global_zero and self.on_step is not None:
            self.on_step(row)

    def save(self, trainer: L.Trainer) -> None:
        """Write ``last.ckpt`` atomically (a temporary file, then a rename); a sharded run writes its shards
        to a folder first, which ``last.ckpt`` then names (``ablate.runner.parallel``)."""
        self.ckpt_path.parent.mkdir(parents=True, exist_ok=True)
        if is_sharded(self.config.train, trainer.world_size):
            stage = getattr(trainer.lightning_module, "stage", 0)
            save_sharded(trainer, self.ckpt_path, f"sharded-{stage}-{trainer.global_step:08d}")
            return
        tmp = self.ckpt_path.with_name(f".{self.ckpt_path.name}.{os.getpid()}.tmp")
        with partial_removed(tmp, self.ckpt_path):  # a full disk: one line naming it, no half file left
            trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.ckpt_path)
        trainer.strategy.barrier()


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
