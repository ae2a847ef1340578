"""One Ray task: trains one run into ``<home>/runs/<run_id>`` and records it in the store itself, through the
run lifecycle (``ablate.execute.lifecycle``), as a pool worker's events are recorded: ``running`` with its
task at the start, heartbeats and step metrics while it trains, the result (or ``failed`` with the
traceback) at the end. The home and the store must be reachable from every node (a shared file system;
PostgreSQL for the store).

The job function (``train``; tune's ``train_trial``) runs in a second thread, so the task's main thread
stays free for Ray's cancel (``ray.cancel`` interrupts it as a SIGINT would): the training then stops at the
end of its step with a checkpoint, and the run goes back to ``queued``. A task whose node dies is retried by
Ray on another node; the retry finds the run's checkpoint and resumes from it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ablate.execute.devices import Slot, quiet_threads
from ablate.execute.job_function import JobContext, load_job, run_job
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.messages import Job, JobEvent, Started
from ablate.execute.mirror import MirrorThread
from ablate.execute.ray.cluster import job_id
from ablate.execute.recorder import TASK
from ablate.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskSpec:
    """What every task of a grid shares: where it records (``home``, ``store``, the MLflow ``grid`` and the
    experiment the user named), the job function it runs, and the cluster's address (its tasks' jobs are named
    by it)."""

    home: str
    store: str
    address: str
    job_fn: str
    grid: str = ""
    mlflow: bool = False
    mlflow_experiment: str | None = None


def ray_task(spec: TaskSpec, job: Job) -> Ended:
    """Train ``job``'s run (resuming from its checkpoint) and record it; how it ended."""
    import ray

    context = ray.get_runtime_context()
    task = job_id(context.get_task_id() or "", spec.address)
    resources = context.get_assigned_resources()  # type: ignore[no-untyped-call]  # unannotated in Ray
    threads = max(1, int(resources.get("CPU", 1)))
    gpus = ray.get_gpu_ids()  # Ray has set CUDA_VISIBLE_DEVICES to them: a command started here inherits them
    slot = Slot(0, "cuda:" + ",".join(str(g) for g in gpus) if gpus else "cpu", threads)
    _use_threads(threads)
    lifecycle = _lifecycle(spec, task)
    fn, prepare = load_job(spec.job_fn)
    ended: list[Ended] = []
    began: list[float] = []  # when the run started: the driver's line says how long it took

    def send(event: JobEvent) -> None:
        if isinstance(event, Started):
            began.append(time.monotonic())
        if (e := lifecycle.record(event)) is not None:
            ended.append(e)

    # Ray's cancel interrupts the main thread as a SIGINT would, which Ray's workers otherwise ignore
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if prepare is not None:
            prepare(slot)
        lifecycle.expect(job)
        job = lifecycle.dealt(job)  # a command's MLflow run, opened for it to log into
        stop = threading.Event()
        ctx = JobContext(job.run_id, slot, stop, send)
        thread = threading.Thread(target=run_job, args=(fn, job, ctx, send), name=f"train-{job.run_id}",
                                  daemon=True)
        thread.start()
        while thread.is_alive():
            try:
                thread.join(0.5)  # short waits: the main thread must stay free for Ray's cancel
                lifecycle.tick()  # MLflow run ids; writes kept while the store was away
                lifecycle.recorder.watch(lambda _, text: log.warning("%s", text), TASK)
            except KeyboardInterrupt:  # ray.cancel: stop at the end of this step, with a checkpoint
                log.warning("cancelled: saving a checkpoint of %s", job.run_id)
                stop.set()
                # Ray asks again until the task ends: once is enough
                signal.signal(signal.SIGINT, signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGINT, ignored)
        lifecycle.close()
        lifecycle.store.close()
    if not ended:
        return Ended(job.run_id, "interrupted")
    return replace(ended[-1], took_s=time.monotonic() - began[0]) if began else ended[-1]


def _lifecycle(spec: TaskSpec, task: str) -> Lifecycle:
    mirror = None
    if spec.mlflow and spec.grid:
        mirror = MirrorThread(home=Path(spec.home), grid=spec.grid, experiment=spec.mlflow_experiment)
    # no patience: the task trains on while the store is away, and its result waits in the run directory
    return Lifecycle(Store.open(spec.store), home=Path(spec.home), mirror=mirror, patience_s=None,
                     job=("ray", task))


def _use_threads(threads: int) -> None:
    """Give torch the CPUs Ray gave this task, and OpenMP threads that sleep when they wait on a node already
    oversubscribed (``devices.quiet_threads``; read when torch loads OpenMP)."""
    os.environ.update(quiet_threads())
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
