"""One task of a Slurm job array: runs one run's job function (``ablate.execute.job_function``) into
``$ABLATE_HOME/runs/<run_id>`` and records the run in the store.

Submitted by ``ablate.execute.slurm.submit`` through submitit (``map_array``); runs inside Slurm, under
``srun``, as one process per device of the run (``train.devices``; Lightning reads its rank from Slurm). The
job function is the one the grid's trainer names (``ablate.execute.training:train`` for ablate's own model,
tune's trial, a training command's), loaded by name as a pool worker and a Ray task load theirs. Rank 0 writes
the store: its job's events go to the run lifecycle (``ablate.execute.lifecycle``) as a Ray task's do,
``running`` with the Slurm job id when the job starts, heartbeats and step metrics while it trains, the result
(or ``failed`` with the traceback, also in the run's ``error.txt``) at the end. Another rank runs the same job
and records nothing (the model's: ``run_one`` beside rank 0's ``train``, without its lock).

``scancel`` (``ablate cancel``): Slurm sends ``SIGTERM`` to every process of the job, which submitit ignores;
rank 0's handler sets the job's stop flag, so the job stops as a Ctrl-C stops a local one (the model at the
end of its step, with a checkpoint; a command's process group, signalled too, as stopped rather than failed)
and its run goes back to the queue before Slurm's ``SIGKILL``.

Preemption and time-out: Slurm sends ``SIGUSR2`` (``--signal=USR2@<delay>``, set by submitit) before it stops
the job. submitit's handler calls ``SlurmTask.checkpoint`` in the main thread, so the job runs in a second
thread: ``checkpoint`` sets the job's stop flag, waits for it to save its progress (the model: ``last.ckpt``
at the end of the current step, every rank at the same step), which puts the run back in the queue, and
returns the same task, which submitit requeues (``scontrol requeue``). The requeued task resumes from the
checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NotRequired, TypedDict

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission

from ablate.config import RunConfig
from ablate.execute.devices import Slot, quiet_threads, usable_cpus, visible_gpus
from ablate.execute.executor import TRAIN_JOB
from ablate.execute.job_function import JobContext, JobFunction, JobInterrupted, load_job, run_job
from ablate.execute.last_attempt import ERROR_FILE, finished_result
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.messages import Failed, Finished, Interrupted, Job, JobEvent, JobOutcome, PoolJob, Started
from ablate.execute.mirror import MirrorThread
from ablate.execute.recorder import TASK
from ablate.grid.identity import check_current
from ablate.runner import RunInterrupted, run_one
from ablate.store import Store
from ablate.trainers.registry import trainer_of

log = logging.getLogger(__name__)


class TaskResult(TypedDict):
    """What a task returns to submitit: how it went (``trained``, ``reused``, ``skipped``, ``busy``,
    ``interrupted``) and, when it trained, the run's status."""

    outcome: str
    status: NotRequired[str]
    resumed_from: NotRequired[int | None]
    train_loss: NotRequired[float | int | None]


class TaskFailed(Exception):
    """The run's job failed (recorded in the store and the run's ``error.txt``): the Slurm job fails too."""


@dataclass
class _Running:
    """The job running in this process: its thread and stop flag, how it ended (its last event; on rank 0
    also as recorded), and the error of a ``send`` that broke."""

    thread: threading.Thread
    stop: threading.Event
    end: JobEvent | None = None
    ended: Ended | None = None
    broke: BaseException | None = None


class SlurmTask(Checkpointable):
    """The callable each array task runs: ``SlurmTask(home=, store=, job_fn=)(job)`` with ``job`` a
    ``messages.Job``.

    Only ``home``, ``store``, ``grace_s``, ``grid``, ``mlflow``, ``experiment`` and ``job_fn`` are pickled;
    the job's thread, its stop flag and the lifecycle live in the running process only. With ``mlflow`` the
    run is mirrored live into ``experiment`` (None: the grid's own MLflow experiment; the tracking store must
    be reachable from the nodes, as the store is).
    """

    def __init__(self, *, home: str, store: str, grace_s: float = 75.0, grid: str = "", mlflow: bool = False,
                 experiment: str | None = None, job_fn: str = TRAIN_JOB):
        self.home, self.store, self.grace_s, self.grid, self.mlflow = home, store, grace_s, grid, mlflow
        self.experiment, self.job_fn = experiment, job_fn
        self._reset()

    def _reset(self) -> None:
        self._lifecycle: Lifecycle | None = None
        self._running: _Running | None = None
        self._sigterm: _Sigterm | None = None  # rank 0 in Slurm: whether Slurm's SIGTERM came

    def __getstate__(self) -> dict[str, object]:
        return {"home": self.home, "store": self.store, "grace_s": self.grace_s, "grid": self.grid,
                "mlflow": self.mlflow, "experiment": self.experiment, "job_fn": self.job_fn}

    def __setstate__(self, state: Mapping[str, object]) -> None:
        # a task pickled before the experiment or the job function was (a requeued job of an older ablate)
        self.__dict__.update({"experiment": None, "job_fn": TRAIN_JOB, **state})
        self._reset()

    # ------------------------------------------------------------ the task
    def __call__(self, job: Job) -> TaskResult:
        """Run ``job``'s job function (resuming from its checkpoint); ``{"outcome", "status", ...}``."""
        env = submitit.JobEnvironment()
        os.environ.update(quiet_threads())  # before the job's module loads torch (and OpenMP)
        fn, prepare = load_job(self.job_fn)
        slot = _slot()
        if prepare is not None:
            prepare(slot)  # the model's: torch's threads, the CPUs this task may use
        if env.global_rank != 0:
            return self._other_rank(job, fn, slot)
        run_id, run_dir = job.run_id, Path(job.run_dir)
        lifecycle = self._lifecycle = self._open(env.job_id)
        sigterm = self._sigterm = _Sigterm(self._terminated)  # in place of submitit's, which ignores it
        try:
            status = lifecycle.store.statuses(run_ids=[run_id]).get(run_id)
            if status in ("done", "diverged"):
                return {"outcome": "skipped", "status": status}
            if finished_result(run_dir) is not None:  # trained, but never recorded
                return {"outcome": "reused", "status": lifecycle.finished(run_id).kind}
            lifecycle.expect(job)
            job = lifecycle.dealt(job)  # a command's MLflow run, opened for it to log into
            return self._rank_zero(job, fn, slot, lifecycle)
        finally:
            sigterm.close()
            lifecycle.close()
            lifecycle.store.close()

    def _open(self, job_id: str | None = None) -> Lifecycle:
        mirror = None
        if self.mlflow and self.grid:
            mirror = MirrorThread(home=Path(self.home), grid=self.grid, experiment=self.experiment)
        # no patience: the task trains on while the store is away, and its result waits in the run directory
        return Lifecycle(Store.open(self.store), home=Path(self.home), mirror=mirror, patience_s=None,
                         job=("slurm", job_id) if job_id else None)

    def _rank_zero(self, job: Job, fn: JobFunction, slot: Slot, lifecycle: Lifecycle) -> TaskResult:
        """Run the job, its events recorded through ``lifecycle``; what it did, or TaskFailed."""
        run_dir = Path(job.run_dir)
        error_file = run_dir / ERROR_FILE
        before = _stat(error_file)  # the job's own error.txt, if it writes one, is newer
        device = _device_label(job)

        def record(event: JobEvent) -> Ended | None:
            if isinstance(event, Started):
                event = replace(event, device=device)  # Slurm's words: 2xcuda for a run on two devices
            if isinstance(event, Failed) and _stat(error_file) == before:
                with contextlib.suppress(OSError):  # a full disk: the store has the traceback
                    run_dir.mkdir(parents=True, exist_ok=True)
                    error_file.write_text(f"{event.error}\n\n{event.traceback}".rstrip() + "\n")
            return lifecycle.record(event)

        running = self._run(job, fn, slot, record, lifecycle)
        end, ended = running.end, running.ended
        if isinstance(end, Failed):
            raise TaskFailed(f"run {job.run_id}: {end.error} (its traceback: {error_file})")
        if ended is None or ended.kind == "interrupted":
            return {"outcome": "interrupted"}  # stopped: scancel's SIGTERM (USR2 never returns here)
        if ended.kind == "busy":
            return {"outcome": "busy"}  # another process on this node trains it
        reused = isinstance(end, Finished) and getattr(end.outcome, "kind", None) == "reused"
        result = ended.result
        return {"outcome": "reused" if reused else "trained", "status": ended.kind,
                "resumed_from": result.resumed_from if result is not None else None,
                "train_loss": result.summary.get("train_loss") if result is not None else None}

    def _other_rank(self, job: Job, fn: JobFunction, slot: Slot) -> TaskResult:
        """A rank other than 0 of a multi-task run: the same job beside rank 0's, recording nothing (the
        model's is ``run_one`` alone: rank 0's ``train`` holds the run's lock and writes its log)."""
        running = self._run(job, _train_rank if self.job_fn == TRAIN_JOB else fn, slot, lambda _: None, None)
        end = running.end
        if isinstance(end, Failed):
            raise TaskFailed(f"run {job.run_id}: {end.error}\n\n{end.traceback}")
        if not isinstance(end, Finished):
            return {"outcome": "interrupted"}
        return {"outcome": "trained", "status": str(getattr(end.outcome, "status", ""))}

    def _run(self, job: Job, fn: JobFunction, slot: Slot, record: Callable[[JobEvent], Ended | None],
             lifecycle: Lifecycle | None) -> _Running:
        """``run_job(fn, job)`` in a thread, so the main thread stays free for Slurm's signal; each event goes
        to ``record`` (rank 0: the lifecycle). Returns once the job has ended."""
        stop = threading.Event()

        def send(event: JobEvent) -> None:
            if isinstance(event, Finished | Failed) and self._sigterm is not None and self._sigterm():
                event = _stopped(event)
            if isinstance(event, Finished | Failed | Interrupted):
                running.end = event
            if (ended := record(event)) is not None:
                running.ended = ended

        def target() -> None:
            try:
                run_job(fn, job, JobContext(job.run_id, slot, stop, send), send)
            except BaseException as exc:  # noqa: BLE001 - recording broke: handed to the main thread
                running.broke = exc

        thread = threading.Thread(target=target, name=f"train-{job.run_id}", daemon=True)
        running = self._running = _Running(thread, stop)
        if self._sigterm is not None and self._sigterm():
            stop.set()  # cancelled before it began
        thread.start()
        while thread.is_alive():
            thread.join(0.5)  # short waits: the main thread must stay free for Slurm's signal
            if lifecycle is not None:
                lifecycle.tick()  # MLflow run ids; writes kept while the store was away
                lifecycle.recorder.watch(lambda _, text: log.warning("%s", text), TASK)
        if running.broke is not None:
            raise running.broke
        return running

    # ------------------------------------------------------------ cancel, preemption, time-out
    def _terminated(self) -> None:
        """Slurm's SIGTERM on rank 0 (``scancel``, the end of a preemption's or a time limit's grace): stop
        the job as Ctrl-C stops a local one, before Slurm's SIGKILL (``KillWait`` later). Its run goes back
        to the queue; a command's process group, which got the same signal, ends as stopped, not failed."""
        running = self._running
        if running is not None and running.thread.is_alive():
            log.warning("cancelled (SIGTERM): stopping the job; its run goes back to the queue")
            running.stop.set()

    def checkpoint(self, job: Job) -> DelayedSubmission:
        """Called by submitit on rank 0 when Slurm's signal arrives: stop the job (the model's saves
        ``last.ckpt`` at the end of its step), which puts the run back in the queue, and hand back the same
        task to requeue."""
        running = self._running
        if running is not None and running.thread.is_alive():
            log.warning("preempted or out of time: saving a checkpoint of %s", job.run_id)
            running.stop.set()
            running.thread.join(self.grace_s)
            if running.thread.is_alive():
                log.error("the job did not stop within %.0f s; the requeued task resumes from its last "
                          "periodic checkpoint", self.grace_s)
        ended = running.ended if running is not None else None
        # not ended (or it failed as the signal came): back to the queue until the requeued task starts it;
        # finished just before the signal, the requeued task finds it done
        if ended is None or ended.kind == "failed":
            self._requeue(job.run_id)
        elif self._lifecycle is not None:
            self._lifecycle.close(flush_s=5.0)  # submitit exits the process once this returns
        return DelayedSubmission(self, job)

    def _requeue(self, run_id: str) -> None:
        try:
            lifecycle = self._lifecycle or self._open()
            lifecycle.interrupted(run_id)
            lifecycle.close(flush_s=5.0)
        except Exception as exc:  # noqa: BLE001 - the requeue matters more than the status
            log.warning("could not mark %s queued: %s", run_id, exc)


class _Sigterm:
    """Slurm's SIGTERM to this task, known from the moment it is delivered: ``sigterm()`` says whether it
    came, and ``on_term`` runs once it has. Python runs a handler only once the main thread gets to it (a
    store write may hold it for seconds), and the job's thread may see the end of a command that the same
    signal killed before that, and take it for a failure; so a thread of its own reads the byte that Python
    writes to its wakeup fd as the signal is delivered. Made and closed in the main thread."""

    def __init__(self, on_term: Callable[[], None]) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # written by the C-level handler, which must never block
        self.came = False
        self._on_term = on_term
        self._fd = signal.set_wakeup_fd(self._write)
        self._handler = signal.signal(signal.SIGTERM, lambda signum, frame: self._arrived())
        self._thread = threading.Thread(target=self._watch, name="sigterm", daemon=True)
        self._thread.start()

    def __call__(self) -> bool:
        return self.came

    def _watch(self) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(self._read, 512):  # b"" once closed
                if signal.SIGTERM in data:
                    self._arrived()

    def _arrived(self) -> None:
        if not self.came:
            self.came = True
            self._on_term()

    def close(self) -> None:
        signal.signal(signal.SIGTERM, self._handler)
        signal.set_wakeup_fd(self._fd)
        os.close(self._write)
        self._thread.join(timeout=5.0)
        os.close(self._read)


def _stopped(end: Finished | Failed) -> JobEvent:
    """How a job that ended as Slurm ends its task is recorded: a finished run as it is, anything else as
    stopped (its run back in the queue), as Ctrl-C leaves a local one."""
    if isinstance(end, Finished):
        out = end.outcome
        if not isinstance(out, JobOutcome) or out.kind != "trained" or out.status in ("done", "diverged"):
            return end
    return Interrupted(end.run_id, started=True, message="stopped by Slurm (SIGTERM)")


def _train_rank(job: PoolJob, ctx: JobContext) -> JobOutcome:
    """The model's job on a rank other than 0: ``run_one`` beside rank 0's (which reports the steps and holds
    the run's lock)."""
    assert isinstance(job, Job), job
    config = RunConfig.model_validate(job.config)
    try:
        result = run_one(config, Path(job.run_dir), run_id=job.run_id, stop=ctx.stop,
                         check_inputs=check_current)
    except RunInterrupted as exc:
        raise JobInterrupted(str(exc)) from None
    return JobOutcome("trained", status=str(result.status))


def _slot() -> Slot:
    """Where this task's job runs: the GPUs Slurm gave it (as ``CUDA_VISIBLE_DEVICES`` names them, which a
    command started by the job inherits) or the CPU, with the CPUs it may use (``--cpus-per-task``, its
    cpuset) as its threads."""
    visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return Slot(0, "cuda:" + ",".join(visible) if visible else "cpu", usable_cpus())


def _stat(path: Path) -> tuple[int, int] | None:
    """``path``'s modification time and size (None: no such file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _device_label(job: Job) -> str:
    """The store's ``device`` of a running run: ``cpu``, ``cuda``, or ``2xcuda`` for a run over two (the
    model's ``train.devices``; a run that is one process, a command's, the GPUs Slurm gave it)."""
    visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
    kind = "cuda" if visible else "cpu"
    if not trainer_of(job.config).one_process_per_device:
        devices = max(1, len(visible))
    else:
        train = job.config.get("train")
        devices = int(train.get("devices", 1)) if isinstance(train, Mapping) else 1
    return kind if devices == 1 else f"{devices}x{kind}"
