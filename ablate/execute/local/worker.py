"""One long-lived worker process of the local pool: imports its job module once, then runs job after job.

It speaks the typed messages of ``ablate.execute.messages``: ``RunJob`` runs a job, ``StopJob`` asks the
running job to stop cleanly (it saves a checkpoint) and no further job to start, ``Shutdown`` ends the worker;
an end-of-file on the pipe (the pool's process died) counts as a stop followed by a shutdown. It answers
``Ready`` (or ``Fatal`` when the job module cannot be imported), then per job what the job reports through its
``JobContext`` (``Started``, ``Progress``) and how it ended (``Finished``, ``Failed``, ``Interrupted``).

Messages go out through a sender thread, so a job never waits on the pipe (a training step is never stalled by
a busy pool process). The worker ignores SIGINT: at a terminal Ctrl-C reaches the whole process group, and it
is the pool's process that decides what a Ctrl-C means.
"""

from __future__ import annotations

import importlib
import logging
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ablate.execute.devices import Slot, quiet_threads
from ablate.execute.messages import (
    Failed,
    Fatal,
    Finished,
    Interrupted,
    Progress,
    Ready,
    RunJob,
    Shutdown,
    Started,
    StopJob,
)

log = logging.getLogger(__name__)


class JobInterrupted(Exception):
    """Raised by a job function that stopped because it was asked to (its progress is saved)."""


@dataclass
class JobContext:
    """What a job function gets besides its job: its run, where it runs, a stop flag and a way to report."""

    run_id: str
    slot: Slot
    stop: threading.Event
    send: Callable[[Any], None]

    def started(self, *, resuming: bool = False) -> None:
        """The job took its run and starts training."""
        self.send(Started(self.run_id, pid=os.getpid(), device=self.slot.label, resuming=resuming))

    def progress(self, rows: Iterable[dict[str, Any]]) -> None:
        """Step metrics since the last call (never blocks)."""
        rows = tuple(rows)
        if rows:
            self.send(Progress(self.run_id, rows))


def _redirect_output(log_path: Path) -> None:
    """Send this process's stdout and stderr (file descriptors, so C extensions too) to a log file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_stderr() -> None:
    """The worker's log lines on its stderr (file descriptor 2: its ``logs/worker-<i>.log``, and while a job
    runs, that run's ``train.log``): ablate's own lines from INFO, every other library's warnings, and Python
    warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("ablate").setLevel(logging.INFO)
    logging.captureWarnings(True)


def _load(job_fn: str) -> tuple[Callable[..., Any], Callable[[Slot], None] | None]:
    """``"package.module:function"`` -> the function, and the module's optional ``prepare(slot)`` hook."""
    module_name, _, fn_name = job_fn.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, fn_name), getattr(module, "prepare", None)


def worker_main(conn: Connection, slot: Slot, job_fn: str, log_path: str | None) -> None:
    """The worker process's entry point (a spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path:
        _redirect_output(Path(log_path))
        log_to_stderr()
    # Before torch is imported: the worker sees only its own GPU (or none) and uses only its share of the
    # cores.
    os.environ["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(slot.threads)
    os.environ.update(quiet_threads())  # read by OpenMP when torch loads it

    stop = threading.Event()
    inbox: queue.Queue[Any] = queue.Queue()
    outbox: queue.Queue[Any] = queue.Queue()

    def sender() -> None:
        while (msg := outbox.get()) is not None:
            try:
                conn.send(msg)
            except OSError:
                stop.set()  # the pool is gone: finish cleanly, nobody is listening

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                stop.set()
                inbox.put(None)
                return
            if isinstance(msg, Shutdown):
                inbox.put(None)
                return
            if isinstance(msg, StopJob):
                stop.set()
            elif isinstance(msg, RunJob):
                inbox.put(msg.job)

    out = threading.Thread(target=sender, name="pool-sender")
    out.start()
    try:
        try:
            fn, prepare = _load(job_fn)
            if prepare is not None:
                prepare(slot)
        except BaseException as exc:  # noqa: BLE001 - reported to the pool, which stops starting workers
            log.exception("worker %d cannot start: %s", slot.index, exc)
            outbox.put(Fatal(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        threading.Thread(target=read, name="pool-reader", daemon=True).start()
        log.info("worker %d ready on %s (pid %d, %d threads)", slot.index, slot.device, os.getpid(),
                 slot.threads)
        outbox.put(Ready(os.getpid(), slot.device, slot.threads))
        while (job := inbox.get()) is not None:
            _run(fn, job, JobContext(job.run_id, slot, stop, outbox.put), outbox.put)
    finally:
        outbox.put(None)
        out.join()


def _run(fn: Callable[..., Any], job: Any, ctx: JobContext, send: Callable[[Any], None]) -> None:
    """One job, reported as how it ended."""
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
