"""Running tune's jobs on ``ablate run``'s local worker pool, and recording them in the store as ``ablate run`` does.

``TrialPool`` starts the pool once (the workers import torch once) and runs jobs in rounds: ``run(jobs)`` deals a
round out and returns each job's ``Outcome`` when all of them ended, so the caller can tell Optuna and ask for the
next round. Each run goes through the store's lifecycle: ``running`` when its worker starts it (heartbeats while
it trains), its ``result.json`` ingested when it ends ``done`` or ``diverged``, ``failed`` with the error when it
crashes, back to ``queued`` when interrupted. A pruned run has no result: it is ``failed`` with an error that
starts with ``pruned:`` (the store has no status for a run stopped on purpose; ``ablate run --retry-failed`` on a
grid holding that config would finish it from its checkpoint).

Ctrl-C once: running jobs save a checkpoint and the round ends (``interrupted``); twice: the workers are killed.
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ablate import layout
from ablate.execute.devices import Slot
from ablate.execute.display import STYLE, GridDisplay
from ablate.execute.pool import PoolEvent, WorkerPool
from ablate.result import RunResult, read_result

log = logging.getLogger(__name__)

TRIAL_JOB = "ablate.tune.job:train_trial"
HEARTBEAT_EVERY_S = 2.0
PRUNED = "pruned:"


@dataclass
class Outcome:
    """How one job ended: ``done``/``diverged`` (with its result), ``pruned`` (at ``step``, with the last
    reported ``value``), ``failed`` (``error``), ``interrupted`` or ``busy`` (another process holds the run)."""

    run_id: str
    kind: str
    result: RunResult | None = None
    error: str | None = None
    step: int | None = None
    value: float | None = None


def pruned_error(step: int | None, value: float | None, metric: str) -> str:
    """The store's error text of a pruned run."""
    at = f" at step {step}" if step is not None else ""
    val = f" ({metric} {value:.4g})" if value is not None else ""
    return f"{PRUNED} stopped by the Optuna pruner{at}{val}; not a crash"


class TrialPool:
    """``ablate run``'s ``WorkerPool`` and training job (plus pruning), kept across rounds; a context manager."""

    def __init__(self, slots: list[Slot], *, home: Path, store: Any, title: str, console: Console | None = None,
                 metric: str = "val_ppl"):
        self.slots, self.home, self.store, self.title, self.metric = slots, home, store, title, metric
        self.console = console or Console(stderr=True)
        for outcome, style in (("pruned", "cyan"), ("busy", "dim")):  # outcomes ablate run's display lacks
            STYLE.setdefault(outcome, style)
        self.host = socket.gethostname()
        self.pool: WorkerPool | None = None
        self.display: GridDisplay | None = None
        self.interrupted = False
        self._jobs: dict[str, dict[str, Any]] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._beats: dict[str, tuple[float, int | None]] = {}

    def run_dir(self, run_id: str) -> Path:
        return layout.run_dir(self.home, run_id)

    def __enter__(self) -> TrialPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers and the live display."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.display is not None:
            self.display.__exit__(None, None, None)
            self.display = None

    def expect(self, n: int) -> None:
        """Tell the progress bar ``n`` more jobs are coming."""
        if self.display is None:
            self.display = GridDisplay(self.title, 0, self.console).__enter__()
        task = self.display.progress.tasks[0]
        self.display.progress.update(self.display.task, total=(task.total or 0) + n)

    # ------------------------------------------------------------ a round
    def run(self, jobs: list[dict[str, Any]]) -> dict[str, Outcome]:
        """Run ``jobs`` (``run_id``, ``run_dir``, ``config``, optional ``trial``; ``label`` for the display) and
        return ``{run_id: Outcome}``; jobs not started because of an interrupt are ``interrupted``."""
        if not jobs or self.interrupted:
            return {j["run_id"]: Outcome(j["run_id"], "interrupted") for j in jobs}
        if self.display is None:
            self.expect(len(jobs))
        if self.pool is None:
            self.pool = WorkerPool(self.slots, TRIAL_JOB, log_dir=self.home / "logs").start()
        self._jobs = {j["run_id"]: j for j in jobs}
        self._outcomes = {}
        pool = self.pool
        handlers = {sig: signal.signal(sig, lambda *_: pool.interrupt()) for sig in (signal.SIGINT, signal.SIGTERM)}
        told = 0

        def on_tick() -> None:
            nonlocal told
            if pool._interrupts > told:  # noqa: SLF001 - tell the user once per Ctrl-C, as ablate run does
                told = pool._interrupts  # noqa: SLF001
                self.display.message("[magenta]stopping: running trials save a checkpoint; the next `ablate tune` "
                                     "resumes them (Ctrl-C again to stop at once)[/]" if told == 1 else
                                     "[magenta]stopping at once[/]")
            self._beat()

        try:
            left = pool.run([{k: v for k, v in j.items() if k != "label"} for j in jobs], self._on_event, on_tick)
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
        if pool.interrupted:
            self.interrupted = True
        for job in left:
            self._outcomes[job["run_id"]] = Outcome(job["run_id"], "interrupted")
        return {rid: self._outcomes.get(rid, Outcome(rid, "interrupted")) for rid in self._jobs}

    # ------------------------------------------------------------ the records
    def _on_event(self, e: PoolEvent) -> None:
        rid, data, display = e.run_id or "", e.data, self.display
        assert display is not None
        job = self._jobs.get(rid, {})
        cfg = job.get("config", {})
        if e.kind == "started":
            self.store.mark_running(run_id=rid, host=self.host, device=e.slot.device)
            self._beats[rid] = (time.monotonic(), None)
            display.started(rid, variant=cfg.get("variant", "?"), seed=cfg.get("seed", 0), device=e.slot.device,
                            total_steps=cfg.get("train", {}).get("steps", 0))
            return
        if e.kind == "step":
            display.step(rid, data)
            if rid in self._beats:
                self._beats[rid] = (self._beats[rid][0], data.get("step"))
            return
        self._beats.pop(rid, None)
        if e.kind == "finished":
            outcome = self._finished(rid, data)
        elif e.kind in ("failed", "died"):
            error = data.get("error") or (f"the worker process died (exit code {data.get('exitcode')}: killed, or "
                                          "out of memory) while training")
            self.store.mark_failed(run_id=rid, error=f"{error}\n\n{data.get('traceback', '')}".rstrip())
            outcome = Outcome(rid, "failed", error=error)
        else:  # interrupted, killed
            self.store.mark_queued(run_id=rid)
            outcome = Outcome(rid, "interrupted")
        self._outcomes[rid] = outcome
        note = job.get("label", "")
        if outcome.kind == "failed" and outcome.error:
            note += f"  {outcome.error.splitlines()[0][:160]}"
        elif outcome.kind == "pruned":
            note += f"  at step {outcome.step}"
        display.ended(rid, outcome.kind, note.strip())

    def _finished(self, rid: str, data: dict[str, Any]) -> Outcome:
        from ablate.errors import StoreError

        if data.get("outcome") == "busy":
            return Outcome(rid, "busy", error="another process holds its run directory")
        if data.get("outcome") == "pruned":
            self.store.mark_failed(run_id=rid, error=pruned_error(data.get("step"), data.get("value"), self.metric))
            return Outcome(rid, "pruned", step=data.get("step"), value=data.get("value"))
        try:
            result = read_result(self.run_dir(rid))
            self.store.ingest(result)
        except StoreError as exc:
            self.store.mark_failed(run_id=rid, error=str(exc))
            return Outcome(rid, "failed", error=str(exc))
        return Outcome(rid, result.status, result=result)

    def _beat(self) -> None:
        now = time.monotonic()
        for rid, (last, step) in list(self._beats.items()):
            if now - last >= HEARTBEAT_EVERY_S:
                self.store.heartbeat(run_id=rid, step=step)
                self._beats[rid] = (now, step)
