"""One long-lived worker process of the local pool: imports its job module once, then runs job after job.

Messages from the pool (over a duplex pipe): ``("job", dict)`` runs a job, ``("stop",)`` asks the running job to
stop cleanly (it saves a checkpoint) and no further job to start, ``None`` ends the worker. An end-of-file on
the pipe (the pool's process died) counts as a stop followed by ``None``.

Messages to the pool: ``("ready", None, {...})``, ``("fatal", None, {"error"})`` (the job module failed to
import), then per job ``("started" | "step" | "finished" | "failed" | "interrupted", run_id, {...})``.

The worker ignores SIGINT: at a terminal Ctrl-C reaches the whole process group, and it is the pool's process
that decides what a Ctrl-C means.
"""

from __future__ import annotations

import importlib
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ablate.execute.devices import Slot


class JobInterrupted(Exception):
    """Raised by a job function that stopped because it was asked to (its progress is saved)."""


@dataclass
class JobContext:
    """What a job function gets besides its job: where it runs, a stop flag and a way to report progress."""

    slot: Slot
    stop: threading.Event
    emit: Callable[[str, dict[str, Any]], None]


def _redirect_output(log_path: Path) -> None:
    """Send this process's stdout and stderr (file descriptors, so C extensions too) to a log file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _load(job_fn: str) -> tuple[Callable[..., dict[str, Any]], Callable[[Slot], None] | None]:
    """``"package.module:function"`` -> the function, and the module's optional ``prepare(slot)`` hook."""
    module_name, _, fn_name = job_fn.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, fn_name), getattr(module, "prepare", None)


def worker_main(conn: Connection, slot: Slot, job_fn: str, log_path: str | None) -> None:
    """The worker process's entry point (a spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path:
        _redirect_output(Path(log_path))
    # Before torch is imported: the worker sees only its own GPU (or none) and uses only its share of the cores.
    os.environ["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(slot.threads)

    send_lock = threading.Lock()

    def send(kind: str, run_id: str | None, data: dict[str, Any]) -> None:
        with send_lock:
            try:
                conn.send((kind, run_id, data))
            except (BrokenPipeError, OSError):
                stop.set()  # the pool is gone: finish cleanly, nobody is listening

    stop = threading.Event()
    inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                stop.set()
                inbox.put(None)
                return
            if msg is None:
                inbox.put(None)
                return
            if msg[0] == "stop":
                stop.set()
            elif msg[0] == "job":
                inbox.put(msg[1])

    try:
        fn, prepare = _load(job_fn)
        if prepare is not None:
            prepare(slot)
    except BaseException as exc:  # noqa: BLE001 - reported to the pool, which stops starting workers
        send("fatal", None, {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return
    threading.Thread(target=read, name="pool-reader", daemon=True).start()
    send("ready", None, {"pid": os.getpid(), "device": slot.device, "threads": slot.threads})

    while (job := inbox.get()) is not None:
        run_id = job["run_id"]
        if stop.is_set():
            send("interrupted", run_id, {"started": False})
            continue
        ctx = JobContext(slot=slot, stop=stop, emit=lambda kind, data, _r=run_id: send(kind, _r, data))
        try:
            out = fn(job, ctx)
        except JobInterrupted as exc:
            send("interrupted", run_id, {"started": True, "message": str(exc)})
        except BaseException as exc:  # noqa: BLE001 - a failure belongs to its run; the worker goes on
            send("failed", run_id, {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        else:
            send("finished", run_id, out or {})
