"""A job function, and how a worker or a task calls it.

A job function is ``fn(job, ctx: JobContext) -> outcome``, named ``"package.module:function"``: ``ablate
run``'s is ``ablate.execute.training:train`` (tune's ``train_trial`` adds its pruning). A pool worker or a Ray
task loads it once (``load_job``, with its module's optional ``prepare(slot)`` hook), then calls it job after
job through ``run_job``, which reports how each ended (``Finished``, ``Failed``, ``Interrupted``) and never
raises: a failure belongs to its run.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ablate.execute.devices import Slot
from ablate.execute.last_attempt import finished_result
from ablate.execute.locks import RunLock
from ablate.execute.messages import (
    Failed,
    Finished,
    Interrupted,
    JobEvent,
    JobOutcome,
    PoolJob,
    Progress,
    Started,
    StepRow,
)

log = logging.getLogger(__name__)

JobFunction = Callable[[PoolJob, "JobContext"], object]  # fn(job, ctx) -> its outcome (a JobOutcome)
Prepare = Callable[[Slot], None]  # a job module's once-per-worker hook


class JobInterrupted(Exception):
    """Raised by a job function that stopped because it was asked to (its progress is saved)."""


@dataclass
class JobContext:
    """What a job function gets besides its job: its run, where it runs, a stop flag and a way to report."""

    run_id: str
    slot: Slot
    stop: threading.Event
    send: Callable[[JobEvent], None]

    def started(self, *, resuming: bool = False) -> None:
        """The job took its run and starts training."""
        self.send(Started(self.run_id, pid=os.getpid(), device=self.slot.label, resuming=resuming))

    def progress(self, rows: Iterable[StepRow]) -> None:
        """Step metrics since the last call (never blocks)."""
        kept = tuple(dict(r) for r in rows)
        if kept:
            self.send(Progress(self.run_id, kept))


@contextlib.contextmanager
def held(run_dir: Path) -> Iterator[JobOutcome | None]:
    """A run directory held by this job while it trains (its lock, released on leaving): yields None to go
    on, or how the job ends at once: ``busy`` (another process holds the directory) or ``reused`` (a finished
    ``result.json`` is there, nothing to train)."""
    lock = RunLock(run_dir)
    if not lock.acquire():
        yield JobOutcome("busy")
        return
    try:
        done = finished_result(run_dir)
        yield None if done is None else JobOutcome("reused", status=str(done.status))
    finally:
        lock.release()


def load_job(job_fn: str) -> tuple[JobFunction, Prepare | None]:
    """``"package.module:function"`` -> the function, and the module's optional ``prepare(slot)`` hook."""
    module_name, _, fn_name = job_fn.partition(":")
    module = importlib.import_module(module_name)
    fn: JobFunction = getattr(module, fn_name)
    prepare: Prepare | None = getattr(module, "prepare", None)
    return fn, prepare


def run_job(fn: JobFunction, job: PoolJob, ctx: JobContext, send: Callable[[JobEvent], None]) -> None:
    """One job: ``fn(job, ctx)``, reported to ``send`` as how it ended (``Finished``, ``Failed``,
    ``Interrupted``); never raises (a failure belongs to its run)."""
    if ctx.stop.is_set():
        send(Interrupted(job.run_id, started=False))
        return
    log.info("run %s: started", job.run_id)
    try:
        outcome = fn(job, ctx)
    except JobInterrupted as exc:
        log.info("run %s: interrupted (%s)", job.run_id, exc)
        send(Interrupted(job.run_id, started=True, message=str(exc)))
    except BaseException as exc:  # noqa: BLE001 - a failure belongs to its run; the worker goes on
        log.info("run %s: failed: %s: %s (its train.log has the traceback)", job.run_id, type(exc).__name__,
                 exc)
        send(Failed(job.run_id, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        log.info("run %s: ended: %s", job.run_id, outcome)
        send(Finished(job.run_id, outcome))
