"""The local worker pool: long-lived worker processes (spawn), one job each at a time, dead ones replaced.

The pool is generic over its job function (``"module:function"``, see ``worker.py``) and its jobs (any
picklable object with a ``run_id``): ``run`` deals the jobs out to idle workers and hands every ``JobEvent``
of ``ablate.execute.messages`` back to the caller (``Started``, ``Progress``, ``Finished``, ``Failed``,
``Interrupted``, and from the pool itself ``Died``, the worker died while running the job and is replaced, and
``Killed``, the pool killed it on a second interrupt). The caller (an executor, through
``ablate.execute.lifecycle``) decides what each event means for the store and the display.

Interrupts: ``interrupt()`` may be called from a signal handler; it only counts. The first asks every running
job to stop cleanly and starts nothing new; the second kills the workers at once.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from ablate.errors import RunError
from ablate.execute.devices import Slot
from ablate.execute.local.worker import worker_main
from ablate.execute.messages import ENDS_JOB, Died, Fatal, JobEvent, Killed, Ready, RunJob, Shutdown, StopJob

log = logging.getLogger(__name__)


@dataclass
class _Worker:
    slot: Slot
    process: Any
    conn: Connection
    ready: bool = False
    job: Any = None
    started_at: float = field(default_factory=time.monotonic)


class WorkerPool:
    """Worker processes over ``slots`` running ``job_fn`` (``"module:function"``); a context manager."""

    def __init__(self, slots: list[Slot], job_fn: str, *, log_dir: Path | None = None,
                 max_restarts: int | None = None):
        self.slots = slots
        self.job_fn = job_fn
        self.log_dir = log_dir
        self.max_restarts = len(slots) * 4 if max_restarts is None else max_restarts
        self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker] = []
        self._interrupts = 0
        self._stopping = False
        self._restarts = 0
        self._dealt: Callable[[Any], Any] | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> WorkerPool:
        """Start one worker per slot (they import their job module while the caller goes on)."""
        self._workers = [self._spawn(slot) for slot in self.slots]
        return self

    def _spawn(self, slot: Slot) -> _Worker:
        ours, theirs = self._ctx.Pipe(duplex=True)
        log_path = str(self.log_dir / f"worker-{slot.index}.log") if self.log_dir else None
        proc = self._ctx.Process(target=worker_main, args=(theirs, slot, self.job_fn, log_path),
                                 name=f"ablate-worker-{slot.index}", daemon=True)
        proc.start()
        theirs.close()
        return _Worker(slot=slot, process=proc, conn=ours)

    def close(self, timeout: float = 10.0) -> None:
        """Ask every worker to exit, wait for them, kill what is left (and at once those still starting)."""
        for w in self._workers:
            if not w.ready and w.job is None:
                w.process.kill()  # still importing: nothing to save, and it would only see our None when done
                continue
            try:
                w.conn.send(Shutdown())
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Count an interrupt (safe in a signal handler): first stop cleanly, second kill."""
        self._interrupts += 1

    @property
    def interrupts(self) -> int:
        """How many interrupts were asked for (0, 1: stopping cleanly, 2 or more: killed)."""
        return self._interrupts

    @property
    def interrupted(self) -> bool:
        """Whether an interrupt was asked for."""
        return self._interrupts > 0

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (for tests and diagnostics)."""
        return [w.process.pid for w in self._workers]

    # ------------------------------------------------------------ the loop
    def run(self, jobs: Iterable[Any], on_event: Callable[[JobEvent], None],
            on_tick: Callable[[], None] | None = None, tick_s: float = 0.25,
            deal: Callable[[Any], Any] | None = None) -> list[Any]:
        """Run ``jobs`` (each with a ``run_id``) and return those never started (after an interrupt);
        ``deal(job)`` is each job as it is sent to a worker (default: as it is)."""
        pending = deque(jobs)
        self._dealt = deal
        while True:
            if self._interrupts >= 2:
                self._kill_all(on_event)
                break
            if self._interrupts == 1 and not self._stopping:
                self._stop_all()
            if not self._stopping:
                self._deal(pending)
            busy = [w for w in self._workers if w.job is not None]
            if not busy and (self._stopping or not pending):
                break
            ready = wait([w.conn for w in self._workers] + [w.process.sentinel for w in self._workers],
                         tick_s)
            for w in list(self._workers):
                if w.conn in ready or w.process.sentinel in ready:
                    self._drain(w, on_event, pending)
                if w.process.sentinel in ready or not w.process.is_alive():
                    self._bury(w, on_event, replace=bool(pending) and not self._stopping)
            if on_tick is not None:
                on_tick()
        return list(pending)

    def _deal(self, pending: deque[Any]) -> None:
        for w in self._workers:
            if pending and w.ready and w.job is None:
                job = pending.popleft()
                if self._dealt is not None:
                    job = self._dealt(job)
                try:
                    w.conn.send(RunJob(job))
                except OSError:
                    pending.appendleft(job)  # the worker just died; it is buried below
                    continue
                w.job = job

    def _drain(self, w: _Worker, on_event: Callable[[JobEvent], None],
               pending: deque[Any] | None = None) -> None:
        while True:
            try:
                if not w.conn.poll():
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(msg, Ready):
                w.ready = True
                log.debug("worker %d ready on %s (pid %s)", w.slot.index, w.slot.device, msg.pid)
                continue
            if isinstance(msg, Fatal):
                self.close(timeout=2.0)
                raise RunError(f"the worker processes could not start: {msg.error}\n{msg.traceback}")
            if isinstance(msg, ENDS_JOB):
                w.job = None
                if pending and not self._stopping and not self._interrupts:
                    self._deal(pending)  # the next job first: recording this one (on_event) takes a while
            on_event(msg)

    def _bury(self, w: _Worker, on_event: Callable[[JobEvent], None], *, replace: bool) -> None:
        w.process.join(1.0)
        code = w.process.exitcode
        if w.job is not None:
            on_event(Died(w.job.run_id, exitcode=code))
            w.job = None
        w.conn.close()
        self._workers.remove(w)
        if replace and self._restarts <= self.max_restarts:
            log.warning("worker %d (%s) died with exit code %s; starting a new one", w.slot.index,
                        w.slot.device, code)
            self._restarts += 1
            self._workers.append(self._spawn(w.slot))
        elif replace:
            raise RunError(f"worker processes keep dying (last exit code {code}); see "
                           f"{self.log_dir or 'their logs'}")

    def _stop_all(self) -> None:
        self._stopping = True
        for w in self._workers:
            try:
                w.conn.send(StopJob())
            except OSError:
                pass

    def _kill_all(self, on_event: Callable[[JobEvent], None]) -> None:
        for w in self._workers:
            w.process.kill()
        for w in list(self._workers):
            w.process.join()
            self._drain(w, on_event)
            if w.job is not None:
                on_event(Killed(w.job.run_id, exitcode=w.process.exitcode))
                w.job = None
            w.conn.close()
        self._workers = []
