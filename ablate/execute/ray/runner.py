"""Rounds of jobs as Ray tasks: one task per run, with the run's resources, recorded by the task itself.

``RayRunner(lifecycle, cluster=, asks=, spec=)`` is the runner ``ablate run --executor ray`` and ``ablate tune
--executor ray`` use (``ablate.execute.executor.Runner``): ``run(jobs)`` submits each job as a task
(``task.ray_task``: its GPUs and CPUs from the run, ``max_retries`` for a node or worker that dies), records
each run's task in the store, and waits until every task has ended; it returns ``{run_id: Ended}``. The tasks
record their runs themselves; this process shows what the store says of them (which run trains, its step),
and records an end only where no task could: a task lost past its retries (its node died every time) is
``died``, unless its run left a complete ``result.json``.

Ctrl-C once (or ``ablate cancel`` through the cluster's mailbox): the tasks are cancelled, each saves a
checkpoint and puts its run back in the queue; twice: they are killed at once (the next ``ablate run``
resumes them from their last periodic checkpoint).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from ablate.config import total_steps
from ablate.execute.last_attempt import finished_result
from ablate.execute.lifecycle import Ended, Lifecycle
from ablate.execute.messages import Job
from ablate.execute.ray.cluster import TASK_FUNCTION, Ask, Cluster, Mailbox, job_id, mailbox, ray_module
from ablate.execute.ray.task import TaskSpec, ray_task
from ablate.execute.rounds import ShownRounds

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

    from ablate.store.api import Store

LOOK_S = 2.0  # how often the store is read for the display and the mailbox for cancels
MAX_RETRIES = 3  # a task whose worker or node dies is run again this many times


class RayRunner(ShownRounds):
    """Ray tasks for jobs, in rounds; a context manager."""

    def __init__(self, lifecycle: Lifecycle, *, cluster: Cluster, asks: Mapping[str, Ask], spec: TaskSpec,
                 title: str, width: int, console: Console | None = None,
                 progress_every_s: float | None = None):
        self.lifecycle, self.cluster, self.asks, self.spec, self.title = lifecycle, cluster, asks, spec, title
        self._width = max(1, width)
        self.console = console or Console(stderr=True)
        self.progress_every_s = progress_every_s
        self.interrupted = False
        self.interrupts = 0
        self.pool_started: float | None = time.monotonic()
        self.job_times: dict[str, tuple[float, float]] = {}
        self.run_one_s: dict[str, float] = {}
        self.worker_pids: dict[str, int] = {}
        self._started: dict[str, float] = {}
        self._mailbox: ActorHandle[Mailbox] | None = None

    @property
    def width(self) -> int:
        """How many tasks the cluster runs at once, about."""
        return self._width

    @property
    def store_error(self) -> str | None:
        """The tasks record their runs themselves (and train on while the store is away): none here."""
        return None


    # ------------------------------------------------------------ a round
    def run(self, jobs: Sequence[Job]) -> dict[str, Ended]:
        """Submit ``jobs`` as tasks and wait for every one; ``{run_id: Ended}``."""
        if not jobs or self.interrupted:
            return {j.run_id: Ended(j.run_id, "interrupted") for j in jobs}
        ray = ray_module()
        if self.display is None:
            self.expect(len(jobs))
        if self._mailbox is None:
            self._mailbox = mailbox()
        remote = ray.remote(ray_task)
        refs: dict[ObjectRef[Ended], Job] = {}
        for job in jobs:
            ask = self.asks.get(job.run_id)
            options = {"num_cpus": ask.cpus if ask else 1, "num_gpus": ask.gpus if ask else 0,
                       "max_retries": MAX_RETRIES, "retry_exceptions": False, "name": TASK_FUNCTION}
            ref: ObjectRef[Ended] = remote.options(**options).remote(self.spec, job)
            refs[ref] = job
            self.lifecycle.expect(job)
            task = job_id(ref.task_id().hex(), self.cluster.address)
            self.lifecycle.recorder.write(f"record {job.run_id}'s Ray task", _set_job(job.run_id, task))
        tasks = {ref.task_id().hex(): ref for ref in refs}
        ended: dict[str, Ended] = {}
        handlers = {sig: signal.signal(sig, lambda *_: self._interrupt()) for sig in (signal.SIGINT,
                                                                                     signal.SIGTERM)}
        cancelled = 0
        try:
            pending = list(refs)
            next_look = 0.0
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in done:
                    job = refs[ref]
                    ended[job.run_id] = self._ended(ref, job)
                if self.interrupts > cancelled:  # Ctrl-C: cancel (first: saving; second: at once)
                    cancelled = self.interrupts
                    self._say_stopping(cancelled)
                    for ref in pending:
                        ray.cancel(ref, force=cancelled >= 2)
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + LOOK_S
                    self._look(refs, pending, tasks)
                self.lifecycle.tick()
                assert self.display is not None
                self.display.tick()
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
        return {j.run_id: ended.get(j.run_id, Ended(j.run_id, "interrupted")) for j in jobs}

    def _interrupt(self) -> None:
        self.interrupts += 1
        self.interrupted = True

    def _say_stopping(self, n: int) -> None:
        assert self.display is not None
        self.display.message("[magenta]stopping: the Ray tasks save a checkpoint and put their runs back in "
                             "the queue (Ctrl-C again to stop at once)[/]" if n == 1
                             else "[magenta]stopping at once[/]")

    def _look(self, refs: dict[ObjectRef[Ended], Job], pending: list[ObjectRef[Ended]],
              tasks: dict[str, ObjectRef[Ended]]) -> None:
        """The store's running rows for the display, and the cluster's mailbox for ``ablate cancel``."""
        ray = ray_module()
        display = self.display
        assert display is not None
        ids = {j.run_id: j for j in refs.values()}
        running = self.lifecycle.recorder.attempt(lambda: self.lifecycle.store.status_summary()["running"])
        for row in running or ():
            rid = row["run_id"]
            job = ids.get(rid)
            if job is None:
                continue
            if rid not in self._started and rid not in self.job_times:
                self._started[rid] = time.monotonic()
                display.started(rid, variant=job.config.get("variant", "?"), seed=job.config.get("seed", 0),
                                device=row.get("device") or "?", total_steps=total_steps(job.config))
            if row.get("step") is not None:
                display.step(rid, {"step": row["step"], "loss": row.get("train_loss"),
                                   "tokens_per_s": row.get("tokens_per_s")})
        assert self._mailbox is not None  # run() made it
        try:
            asked = ray.get(self._mailbox.take.remote(list(tasks)), timeout=10)
        except Exception:  # noqa: BLE001 - the mailbox's node went away: a new one
            self._mailbox, asked = mailbox(), []
        if asked:
            display.message(f"[magenta]ablate cancel: cancelling {len(asked)} Ray task(s); their runs save a "
                            "checkpoint and go back to the queue[/]")
            self.interrupted = True
            for task in asked:
                if tasks[task] in pending:
                    ray.cancel(tasks[task], force=False)

    def _ended(self, ref: ObjectRef[Ended], job: Job) -> Ended:
        """How the task of ``job`` ended: what it returned, else (cancelled, or lost past its retries) what
        the store and the run directory say."""
        ray = ray_module()
        from ray.exceptions import TaskCancelledError

        try:
            ended: Ended = ray.get(ref)
        except TaskCancelledError:
            ended = Ended(job.run_id, "interrupted", "cancelled; the next run resumes it")
        except Exception as exc:  # noqa: BLE001 - the task was lost (its node or worker died every time)
            ended = self._lost(job, exc)
        now = time.monotonic()
        seen = self._started.pop(job.run_id, None)
        start = now - ended.took_s if ended.took_s is not None else seen
        if start is not None:
            self.job_times[job.run_id] = (start, now)
        assert self.display is not None
        # the task's own start-to-end time: the store's running row, read every LOOK_S, may never show a
        # short run, and shows a long one up to LOOK_S late
        self.display.ended(job.run_id, ended.kind,
                           f"{job.label}  {ended.note}".strip() if job.label else ended.note,
                           label=f"{job.config.get('variant', '?')} {job.config.get('seed', 0)}",
                           took=ended.took_s)
        return ended

    def _lost(self, job: Job, exc: Exception) -> Ended:
        if finished_result(self.run_dir(job.run_id)) is not None:  # it finished; the store never heard
            return self.lifecycle.finished(job.run_id)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return self.lifecycle.failed(job.run_id, f"the Ray task was lost after {MAX_RETRIES} retries "
                                     f"({type(exc).__name__}: {reason}); --retry-failed resumes it from its "
                                     "last checkpoint")


def _set_job(run_id: str, task: str) -> Callable[[Store], None]:
    """The store write that records ``run_id``'s Ray task."""
    return lambda store: store.set_job(run_id=run_id, executor="ray", job_id=task)
