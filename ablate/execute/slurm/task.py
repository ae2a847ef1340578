"""One task of a Slurm job array: trains one run into ``$ABLATE_HOME/runs/<run_id>`` and records it in the
store.

Submitted by ``ablate.execute.slurm.submit`` through submitit (``map_array``); runs inside Slurm, under
``srun``, as one process per device of the run (``train.devices``; Lightning reads its rank from Slurm). Rank
0 writes the store, through the run lifecycle (``ablate.execute.lifecycle``) as the local pool does:
``running`` with the job id at the start, heartbeats and step metrics while it trains, the result (or
``failed`` with the traceback) at the end.

Preemption and time-out: Slurm sends ``SIGUSR2`` (``--signal=USR2@<delay>``, set by submitit) before it stops
the job. submitit's handler calls ``SlurmTask.checkpoint`` in the main thread, so the training runs in a
second thread: ``checkpoint`` sets the run's stop event, waits for the training to save ``last.ckpt`` at the
end of the current step (every rank stops at the same step), marks the run ``queued`` and returns the same
task, which submitit requeues (``scontrol requeue``). The requeued task finds the checkpoint and resumes from
it.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import NotRequired, TypedDict

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission

from ablate.config import RunConfig
from ablate.execute.devices import quiet_threads, usable_cpus
from ablate.execute.last_attempt import ERROR_FILE, finished_result
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.locks import RunLock
from ablate.execute.messages import Job, StepRow
from ablate.execute.mirror import MirrorThread
from ablate.execute.recorder import TASK
from ablate.grid.identity import check_current
from ablate.result import RunResult
from ablate.runner import RunInterrupted, run_one
from ablate.store import Store

log = logging.getLogger(__name__)


class TaskResult(TypedDict):
    """What a task returns to submitit: how it went (``trained``, ``reused``, ``skipped``, ``busy``,
    ``interrupted``) and, when it trained, the run's status."""

    outcome: str
    status: NotRequired[str]
    resumed_from: NotRequired[int | None]
    train_loss: NotRequired[float | int | None]


class _Outcome(TypedDict, total=False):
    """What the training thread hands the main thread: the result, or the error and its traceback; and the
    run's end once recorded."""

    result: RunResult
    error: BaseException
    traceback: str
    ended: Ended


class SlurmTask(Checkpointable):
    """The callable each array task runs: ``SlurmTask(home=, store=)(job)`` with ``job`` a ``messages.Job``.

    Only ``home``, ``store``, ``grace_s``, ``grid``, ``mlflow`` and ``experiment`` are pickled; the training
    thread, its stop event and the lifecycle live in the running process only. With ``mlflow`` the run is
    mirrored live into ``experiment`` (None: the grid's own MLflow experiment; the tracking store must be
    reachable from the nodes, as the store is).
    """

    def __init__(self, *, home: str, store: str, grace_s: float = 75.0, grid: str = "", mlflow: bool = False,
                 experiment: str | None = None):
        self.home, self.store, self.grace_s, self.grid, self.mlflow = home, store, grace_s, grid, mlflow
        self.experiment = experiment
        self._reset()

    def _reset(self) -> None:
        self._lifecycle: Lifecycle | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._outcome: _Outcome = {}

    def __getstate__(self) -> dict[str, object]:
        return {"home": self.home, "store": self.store, "grace_s": self.grace_s, "grid": self.grid,
                "mlflow": self.mlflow, "experiment": self.experiment}

    def __setstate__(self, state: Mapping[str, object]) -> None:
        self.__dict__.update({"experiment": None, **state})  # a task pickled before the experiment was
        self._reset()

    # ------------------------------------------------------------ the task
    def __call__(self, job: Job) -> TaskResult:
        """Train ``job``'s run (resuming from its checkpoint); return ``{"outcome", "status", ...}``."""
        env = submitit.JobEnvironment()
        rank, job_id = env.global_rank, env.job_id
        run_id, run_dir = job.run_id, Path(job.run_dir)
        _use_allocated_cpus()
        if rank != 0:
            return self._train(job, None)
        lifecycle = self._lifecycle = self._open()
        lock = RunLock(run_dir)
        try:
            status = lifecycle.store.statuses(run_ids=[run_id]).get(run_id)
            if status in ("done", "diverged"):
                return {"outcome": "skipped", "status": status}
            if finished_result(run_dir) is not None:  # trained, but never recorded
                return {"outcome": "reused", "status": lifecycle.finished(run_id).kind}
            if not lock.acquire():
                return {"outcome": "busy"}  # another process on this node trains it
            lifecycle.claim(run_id, device=_device_label(job), config=job.config, job=("slurm", job_id))
            return self._train(job, lifecycle)
        finally:
            lock.release()
            lifecycle.close()
            lifecycle.store.close()

    def _open(self) -> Lifecycle:
        mirror = None
        if self.mlflow and self.grid:
            mirror = MirrorThread(home=Path(self.home), grid=self.grid, experiment=self.experiment)
        # no patience: the task trains on while the store is away, and its result waits in the run directory
        return Lifecycle(Store.open(self.store), home=Path(self.home), mirror=mirror, patience_s=None)

    def _train(self, job: Job, lifecycle: Lifecycle | None) -> TaskResult:
        """Run ``run_one`` in a thread (so the main thread can take Slurm's signal) and record its outcome."""
        run_id, run_dir = job.run_id, Path(job.run_dir)
        config = RunConfig.model_validate(job.config)
        self._stop, outcome = threading.Event(), self._outcome

        def on_step(m: StepRow) -> None:
            if lifecycle is not None:
                lifecycle.progress(run_id, [m])

        def target() -> None:
            try:
                outcome["result"] = run_one(config, run_dir, run_id=run_id, on_step=on_step, stop=self._stop,
                                            check_inputs=check_current)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                outcome["error"], outcome["traceback"] = exc, traceback.format_exc()

        self._thread = threading.Thread(target=target, name=f"train-{run_id}", daemon=True)
        self._thread.start()
        while self._thread.is_alive():
            self._thread.join(0.5)  # short waits: the main thread must stay free for Slurm's signal
            if lifecycle is not None:
                lifecycle.tick()  # MLflow run ids; writes kept while the store was away
                lifecycle.recorder.watch(lambda _, text: log.warning("%s", text), TASK)
        error = outcome.get("error")
        if isinstance(error, RunInterrupted):
            return {"outcome": "interrupted"}  # only reached when stopped without a signal (another rank)
        if error is not None:
            if lifecycle is not None:
                (run_dir / ERROR_FILE).write_text(outcome["traceback"])
                lifecycle.failed(run_id, f"{type(error).__name__}: {error}", outcome["traceback"])
            raise error
        result = outcome["result"]
        if lifecycle is None:
            return {"outcome": "trained", "status": str(result.status)}
        ended = self._finished(run_id)
        return {"outcome": "trained", "status": ended.kind, "resumed_from": result.resumed_from,
                "train_loss": result.summary.get("train_loss")}

    # ------------------------------------------------------------ preemption / time-out
    def checkpoint(self, job: Job) -> DelayedSubmission:
        """Called by submitit on rank 0 when Slurm's signal arrives: stop the training at the end of its step
        (it saves ``last.ckpt``), put the run back in the queue, and hand back the same task to requeue."""
        thread, stop = self._thread, self._stop
        if thread is not None and stop is not None and thread.is_alive():
            log.warning("preempted or out of time: saving a checkpoint of %s", job.run_id)
            stop.set()
            thread.join(self.grace_s)
            if thread.is_alive():
                log.error("the training did not stop within %.0f s; the requeued task resumes from the last "
                          "periodic checkpoint", self.grace_s)
        if "result" not in self._outcome:  # not finished: back to the queue until the requeued task starts
            self._requeue(job.run_id)
        elif self._lifecycle is not None and "ended" not in self._outcome:
            # it finished just before the signal: recorded now, not when the requeued task starts (which then
            # finds it done)
            self._finished(job.run_id)
            self._lifecycle.close(flush_s=5.0)
        return DelayedSubmission(self, job)

    def _finished(self, run_id: str) -> Ended:
        """Record the finished run, once: at the training's end, or on Slurm's signal just after it."""
        assert self._lifecycle is not None
        self._outcome["ended"] = ended = self._lifecycle.finished(run_id)
        return ended

    def _requeue(self, run_id: str) -> None:
        try:
            lifecycle = self._lifecycle or self._open()
            lifecycle.interrupted(run_id)
            lifecycle.close(flush_s=5.0)
        except Exception as exc:  # noqa: BLE001 - the requeue matters more than the status
            log.warning("could not mark %s queued: %s", run_id, exc)


def _use_allocated_cpus() -> None:
    """Give torch the CPUs this task may use (``--cpus-per-task``, its cpuset), not every core of the node,
    and OpenMP threads that sleep when they wait on a node already oversubscribed (``devices.quiet_threads``;
    read when torch loads OpenMP)."""
    os.environ.update(quiet_threads())
    import torch

    torch.set_num_threads(usable_cpus())


def _device_label(job: Job) -> str:
    devices = int(job.config.get("train", {}).get("devices", 1))
    kind = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") not in (None, "", "-1") else "cpu"
    return kind if devices == 1 else f"{devices}x{kind}"
