"""Runs on the local worker pool, through the run lifecycle, with the live display: what ``ablate run`` and
``ablate tune`` both use.

``LocalRunner(slots, lifecycle, title=...)`` starts the workers once (they import torch once) and runs jobs in
rounds: ``run(jobs)`` deals a round out and returns ``{run_id: Ended}`` when all of them ended, so a caller
(tune) can look at the outcomes and deal the next round on the same workers.

Ctrl-C (or SIGTERM) once: running jobs save a checkpoint and go back to ``queued``; nothing new starts. Twice:
the workers are killed at once; their runs go back to ``queued`` and resume from their last periodic
checkpoint. A store that stays away past the patience of the lifecycle's recorder
(``ablate.execute.recorder``) stops the runner the same way as one Ctrl-C (``store_error`` then says so).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence

from rich.console import Console

from ablate.config import total_steps
from ablate.execute.devices import Slot
from ablate.execute.executor import TRAIN_JOB
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.local.pool import WorkerPool
from ablate.execute.messages import Job, JobEvent, Progress, Started
from ablate.execute.recorder import News
from ablate.execute.rounds import ShownRounds

log = logging.getLogger(__name__)

# what the recorder says, in colour
STYLE: dict[News, str] = {"away": "yellow", "back": "green", "gave_up": "red"}


class LocalRunner(ShownRounds):
    """The worker pool (started at the first round), the lifecycle and the display; a context manager."""

    def __init__(self, slots: Sequence[Slot], lifecycle: Lifecycle, *, title: str,
                 console: Console | None = None, job_fn: str = TRAIN_JOB,
                 progress_every_s: float | None = None):
        self.slots, self.lifecycle, self.title, self.job_fn = list(slots), lifecycle, title, job_fn
        self.console = console or Console(stderr=True)
        self.progress_every_s = progress_every_s
        self.pool: WorkerPool | None = None
        self.interrupted = False
        self.hard_stop = False
        self.pool_started: float | None = None  # time.monotonic() when the workers were started
        self.job_times: dict[str, tuple[float, float]] = {}  # run_id -> (started, ended), monotonic
        self.run_one_s: dict[str, float] = {}  # run_id -> seconds inside run_one (in the worker)
        self.worker_pids: dict[str, int] = {}  # run_id -> pid of the worker that trained it
        self._jobs: dict[str, Job] = {}
        self._ended: dict[str, Ended] = {}
        self._started: dict[str, float] = {}

    @property
    def width(self) -> int:
        """How many jobs run at once: one per worker."""
        return len(self.slots)

    @property
    def store_error(self) -> str | None:
        """Why the runner stopped early: the store stayed away past its patience (None otherwise)."""
        return self.lifecycle.recorder.gave_up

    def close(self) -> None:
        """Stop the workers and the live display."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        super().close()

    # ------------------------------------------------------------ a round
    def run(self, jobs: Sequence[Job]) -> dict[str, Ended]:
        """Run ``jobs`` and return ``{run_id: Ended}``; jobs not started because of an interrupt are
        ``interrupted``."""
        if not jobs or self.interrupted:
            return {j.run_id: Ended(j.run_id, "interrupted") for j in jobs}
        if self.display is None:
            self.expect(len(jobs))
        display = self.display
        assert display is not None  # expect opened it
        if self.pool is None:
            display.message("starting workers" + (" (each imports torch and Lightning once)"
                                                  if self.job_fn == TRAIN_JOB else ""))
            self.pool = WorkerPool(self.slots[:len(jobs)] if len(jobs) < len(self.slots) else self.slots,
                                   self.job_fn, log_dir=self.lifecycle.home / "logs").start()
            self.pool_started = time.monotonic()
            if self.lifecycle.mirror is not None:
                self.lifecycle.mirror.warm()  # MLflow opens while the workers import torch
        for job in jobs:
            self._jobs[job.run_id] = job
            self.lifecycle.expect(job)
        self._ended = {}
        pool = self.pool
        handlers = {sig: signal.signal(sig, lambda *_: pool.interrupt()) for sig in (signal.SIGINT,
                                                                                     signal.SIGTERM)}
        told = pool.interrupts

        def on_tick() -> None:
            nonlocal told
            if pool.interrupts > told and self.store_error is None:  # tell the user once per Ctrl-C
                told = pool.interrupts
                display.message(
                    "[magenta]stopping: running jobs save a checkpoint and go back to the queue "
                    "(Ctrl-C again to stop at once)[/]"
                    if told == 1
                    else "[magenta]stopping at once[/]"
                )
            self.lifecycle.tick()
            if self.lifecycle.recorder.watch(lambda news, text: display.message(f"[{STYLE[news]}]{text}[/]")):
                pool.interrupt()  # away past its patience: stop as for one Ctrl-C
                told = pool.interrupts
            display.tick()

        try:
            left = pool.run(jobs, self._on_event, on_tick, deal=self.lifecycle.dealt)
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
        if pool.interrupted:
            self.interrupted = True
            self.hard_stop = pool.interrupts >= 2 + (self.store_error is not None)
        for job in left:
            self._ended[job.run_id] = Ended(job.run_id, "interrupted")
        return {j.run_id: self._ended.get(j.run_id, Ended(j.run_id, "interrupted")) for j in jobs}

    def _on_event(self, e: JobEvent) -> None:
        display = self.display
        assert display is not None
        ended = self.lifecycle.record(e)
        job = self._jobs.get(e.run_id)
        if isinstance(e, Started):
            self._started[e.run_id] = time.monotonic()
            self.worker_pids[e.run_id] = e.pid
            cfg = job.config if job is not None else {}
            display.started(e.run_id, variant=cfg.get("variant", "?"), seed=cfg.get("seed", 0),
                            device=e.device, total_steps=total_steps(cfg) if cfg else 0)
        elif isinstance(e, Progress):
            display.step(e.run_id, e.last)
        if ended is None:
            return
        if (one_s := getattr(getattr(e, "outcome", None), "run_one_s", None)) is not None:
            self.run_one_s[e.run_id] = one_s
        if e.run_id in self._started:
            self.job_times[e.run_id] = (self._started.pop(e.run_id), time.monotonic())
        self._ended[e.run_id] = ended
        display.ended(e.run_id, ended.kind,
                      f"{job.label}  {ended.note}".strip() if job and job.label else ended.note)
