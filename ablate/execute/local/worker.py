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

import logging
import os
import queue
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ablate.execute.devices import Slot, physical, quiet_threads
from ablate.execute.job_function import JobContext, load_job, run_job
from ablate.execute.messages import (
    Fatal,
    Ready,
    RunJob,
    Shutdown,
    StopJob,
)

log = logging.getLogger(__name__)


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


def worker_main(conn: Connection, slot: Slot, job_fn: str, log_path: str | None) -> None:
    """The worker process's entry point (a spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path:
        _redirect_output(Path(log_path))
        log_to_stderr()
    # Before torch is imported: the worker sees only its own GPU (or none) and uses only its share of the
    # cores.
    os.environ["CUDA_VISIBLE_DEVICES"] = physical(slot.cuda_visible, os.environ.get("CUDA_VISIBLE_DEVICES"))
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
            fn, prepare = load_job(job_fn)
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
            run_job(fn, job, JobContext(job.run_id, slot, stop, outbox.put), outbox.put)
    finally:
        outbox.put(None)
        out.join()
