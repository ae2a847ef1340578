"""The run lifecycle: the one place where a run's life is recorded, for every executor (the local pool, a
Slurm task, a Ray task) and tune's trials.

    claim ──> progress ... ──> finished (result.json -> store, MLflow) | failed | died | pruned
                           └─> interrupted (back to ``queued``; the next run resumes it) | busy (held
                           elsewhere)

``Lifecycle(store, home=, mirror=, metric=, ...)`` is that record (``expect(job)`` first, for each run it will
see):

- ``claim(run_id, device=, config=, job=)``: ``running`` on this host (in ``job``: its executor's name and
  job id, when a job holds it), its MLflow run opened (RUNNING, params,
  tags); its heartbeat and step metrics then go to the store (``ablate.execute.live``) and to MLflow
  (``ablate.execute.mirror.MirrorThread``) from background threads, never from the training step.
- ``progress(run_id, rows)``: step metrics (``step``, ``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``,
  ``val_ppl``); thread-safe, never blocks.
- ``finished(run_id)``, ``failed(run_id, error)``, ``died(run_id, exitcode)``, ``pruned(run_id, step=,
  value=)``, ``interrupted(run_id)``, ``busy(run_id)``: how it ended, each returning an ``Ended`` (what the
  executor shows and tune tells Optuna). ``record(event)`` maps a pool ``JobEvent`` onto these (the job it
  names was ``expect``-ed).

Every write goes through the lifecycle's ``recorder`` (``ablate.execute.recorder``), which owns the store
going away (a PostgreSQL restart, a full or read-only disk): a write that cannot reach it is kept, in order,
and replayed with backoff (``tick``); heartbeats are skipped meanwhile. Training goes on, and every finished
run's ``result.json`` is on disk, so nothing is lost. The executor asks the recorder to ``watch`` (it says so
once, and once it is back); past its patience the executor stops cleanly, and the next ``ablate run`` (or
``ablate ingest``) brings the results in.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate import layout
from ablate.errors import StoreError
from ablate.execute.messages import (
    Died,
    Failed,
    Finished,
    Interrupted,
    Job,
    JobEvent,
    JobOutcome,
    Killed,
    Progress,
    Started,
    StepRow,
)
from ablate.execute.mirror import MirrorThread
from ablate.execute.recorder import STORE_PATIENCE_S, Recorder
from ablate.result import RESULT_FILE, RunResult, read_result
from ablate.store.api import Store
from ablate.trainers.registry import trainer_of

log = logging.getLogger(__name__)


@dataclass
class Ended:
    """How one run ended in this command: ``kind`` is ``done``, ``diverged``, ``failed``, ``pruned``,
    ``interrupted`` or ``busy`` (another process holds it); ``note`` is the line the user sees after it;
    ``took_s`` the seconds from its start to its end, where the process that trained it measured them (a Ray
    task)."""

    run_id: str
    kind: str
    note: str = ""
    result: RunResult | None = None
    error: str | None = None
    step: int | None = None
    value: float | None = None
    took_s: float | None = None


class Lifecycle:
    """Records runs' lives in the store (and MLflow through ``mirror``); see the module docstring."""

    def __init__(self, store: Store, *, home: Path, mirror: MirrorThread | None = None,
                 metric: str = "val_ppl", host: str | None = None, live_every_s: float | None = None,
                 patience_s: float | None = STORE_PATIENCE_S, job: tuple[str, str] | None = None):
        self.store, self.home, self.metric = store, Path(home), metric
        self.host = host or socket.gethostname()
        self.job = job  # (executor, job id) of the job this process trains in: what ``record`` claims with
        self.recorder = Recorder(store, home=self.home, mirror=mirror, live_every_s=live_every_s,
                                 patience_s=patience_s)
        self.where, self.mirror, self.live = self.recorder.where, self.recorder.mirror, self.recorder.live
        self._jobs: dict[str, Job] = {}

    def run_dir(self, run_id: str) -> Path:
        return layout.run_dir(self.home, run_id)

    # ------------------------------------------------------------ the run starts
    def claim(self, run_id: str, *, device: str, config: Mapping[str, Any] | None = None,
              job: tuple[str, str] | None = None) -> None:
        """The run starts training here: ``running`` with this host and device, and the executor's job that
        holds it (``(executor, job id)``; None: this process alone); heartbeats and step metrics from now
        on."""
        if config is not None:
            self.expect(Job(run_id, str(self.run_dir(run_id)), dict(config)))
        executor, job_id = job or (None, None)
        self.recorder.write(f"mark {run_id} running",
                            lambda s: s.mark_running(run_id=run_id, host=self.host, device=device,
                                                     executor=executor, job_id=job_id))
        self.live.begin(run_id)
        if self.mirror is not None and (expected := self._jobs.get(run_id)) is not None:
            self.mirror.start(run_id, expected.config, **_nesting(expected))

    def progress(self, run_id: str, rows: Iterable[StepRow]) -> None:
        """Step metrics of a running run (thread-safe; never waits for the store or MLflow)."""
        rows = list(rows)
        self.live.add(run_id, rows)
        if self.mirror is not None:
            self.mirror.steps(run_id, rows)

    # ------------------------------------------------------------ how it ends
    def finished(self, run_id: str, *, resumed_from: int | None = None) -> Ended:
        """The run wrote its ``result.json``: ingest it (and mirror it). A malformed file fails the run."""
        self.live.end(run_id)
        try:
            result = read_result(self.run_dir(run_id))
        except StoreError as exc:
            return self.failed(run_id, str(exc))
        self.recorder.write(f"ingest {run_id}", lambda s: s.ingest(result),
                            on_bad=lambda exc: self.failed(run_id, str(exc)))
        if self.mirror is not None:
            self.mirror.submit(result, **_nesting(self._jobs.get(run_id)))
        note = (
            f"loss {result.summary['train_loss']:.4f}" if result.summary.get("train_loss") is not None else ""
        )
        if result.resumed_from:
            note += f"  (resumed from step {result.resumed_from})"
        return Ended(run_id, result.status, note.strip(), result=result, error=result.error)

    def failed(self, run_id: str, error: str, traceback: str = "") -> Ended:
        """The run crashed with ``error`` (its first line is what the user sees; the store keeps the
        traceback)."""
        self.live.end(run_id, write_rest=True)
        text = f"{error}\n\n{traceback}".rstrip()
        self.recorder.write(f"mark {run_id} failed", lambda s: s.mark_failed(run_id=run_id, error=text))
        if self.mirror is not None and (job := self._jobs.get(run_id)) is not None:
            self.mirror.submit(RunResult(run_id=run_id, config=job.config, status="failed", error=text,
                                         host=self.host), **_nesting(job))
        return Ended(run_id, "failed", error.splitlines()[0][:200] if error else "", error=error)

    def died(self, run_id: str, exitcode: int | None) -> Ended:
        """The process training the run died (killed, out of memory): failed, resumable with
        ``--retry-failed`` (requeueing it could kill worker after worker on a run that exhausts memory)."""
        msg = (f"the worker process died (exit code {exitcode}: killed, or out of memory) while training; "
               "--retry-failed resumes it from its last checkpoint")
        return self.failed(run_id, msg)

    def pruned(self, run_id: str, *, step: int | None, value: float | None) -> Ended:
        """The Optuna pruner stopped the run on purpose at ``step`` (its last reported value ``value``)."""
        self.live.end(run_id, write_rest=True)
        self.recorder.write(f"mark {run_id} pruned",
                    lambda s: s.mark_pruned(run_id=run_id, step=step, value=value, metric=self.metric))
        if self.mirror is not None:
            self.mirror.end(run_id, "pruned", tags={"pruned_at_step": step, f"pruned_{self.metric}": value})
        return Ended(run_id, "pruned", f"at step {step}", step=step, value=value)

    def interrupted(self, run_id: str, *, saved: bool = True) -> Ended:
        """The run stopped on request: back to ``queued``, resumed from its checkpoint by the next run."""
        self.live.end(run_id, write_rest=True)
        self.recorder.write(f"put {run_id} back in the queue", lambda s: s.mark_queued(run_id=run_id))
        if self.mirror is not None:
            self.mirror.end(run_id, "interrupted")
        return Ended(run_id, "interrupted", "saved; the next run resumes it" if saved else "")

    def busy(self, run_id: str) -> Ended:
        """Another process holds the run's directory: nothing is recorded, it records its own run."""
        return Ended(run_id, "busy", "another process holds its run directory")

    def record(self, event: JobEvent) -> Ended | None:
        """A pool event, recorded: ``Started`` claims, ``Progress`` streams, the rest end the run (->
        ``Ended``)."""
        rid = event.run_id
        if isinstance(event, Started):
            self.claim(rid, device=event.device, job=self.job)
            return None
        if isinstance(event, Progress):
            self.progress(rid, event.rows)
            return None
        if isinstance(event, Finished):
            out = event.outcome
            assert isinstance(out, JobOutcome), out  # a training job's outcome (``ablate.execute.training``)
            if out.kind == "busy":
                return self.busy(rid)
            if out.kind == "pruned":
                return self.pruned(rid, step=out.step, value=out.value)
            ended = self.finished(rid, resumed_from=out.resumed_from)
            if out.kind == "reused":
                ended.note = f"{ended.note}  (trained by another process; recorded)".strip()
            return ended
        if isinstance(event, Failed):
            return self.failed(rid, event.error, event.traceback)
        if isinstance(event, Died):
            return self.died(rid, event.exitcode)
        if isinstance(event, (Interrupted, Killed)):
            return self.interrupted(rid, saved=isinstance(event, Interrupted))
        raise AssertionError(f"unknown pool event {event!r}")

    def expect(self, job: Job) -> None:
        """A run about to be dealt to a worker: its config (and tuning trial) for the records."""
        self._jobs[job.run_id] = job

    def dealt(self, job: Job) -> Job:
        """``job`` as it is handed to the process that trains it: for a trainer whose own process may log to
        MLflow (a training command), with the MLflow run opened for it (``Job.mlflow``), so that the command
        gets ``MLFLOW_RUN_ID``; else as it is."""
        if self.mirror is None or not trainer_of(job.config).logs_to_mlflow or job.mlflow is not None:
            return job
        opened = self.mirror.open_now(job.run_id, job.config, **_nesting(job))
        return job if opened is None else dataclasses.replace(job, mlflow=opened)

    # ------------------------------------------------------------ the store (its recorder)
    def tick(self) -> None:
        """Replay the writes kept while the store was away, and record MLflow run ids (``Recorder.tick``)."""
        self.recorder.tick()

    def warnings(self) -> list[str]:
        """What the user should hear about at the end (MLflow trouble)."""
        return self.recorder.warnings()

    def close(self, *, flush_s: float = 10.0, mirror_s: float = 300.0) -> None:
        """Stop the background writers and write what was kept for a store that went away
        (``Recorder.close``)."""
        self.recorder.close(flush_s=flush_s, mirror_s=mirror_s)


def _nesting(job: Job | None) -> dict[str, Any]:
    """Where a run's MLflow run nests: a tuning trial under its study (tagged with its trial), else the
    grid; and its name, when the job gives one."""
    out: dict[str, Any] = {"name": job.name} if job is not None and job.name else {}
    if job is not None and job.trial is not None:
        out |= {"parent": job.trial["study"],
                "tags": {"study": job.trial["study"], "trial_id": job.trial["trial_id"]}}
    return out


def mlflow_ids(store: Store, home: Path, grid: str, run_ids: Iterable[str]) -> dict[str, str | None]:
    """``{run id: the MLflow run id the store records, or None}`` of the finished runs of ``grid`` among
    ``run_ids`` that left a ``result.json``: what ``MirrorThread.backfill`` checks against an experiment the
    user named."""
    wanted = {rid for rid in run_ids if (layout.run_dir(home, rid) / RESULT_FILE).is_file()}
    if not wanted:
        return {}
    frame = store.runs_frame(grid=grid)
    return {rid: mid if isinstance(mid, str) else None
            for rid, mid in zip(frame["run_id"], frame["mlflow_run_id"], strict=True) if rid in wanted}


def unmirrored(store: Store, home: Path, grid: str, run_ids: Iterable[str]) -> list[RunResult]:
    """Finished runs of ``grid`` among ``run_ids`` that MLflow never got (e.g. the last ``ablate run`` was
    killed, or ran with ``--no-mlflow``): their results, to mirror now."""
    wanted = {rid for rid in run_ids if (layout.run_dir(home, rid) / RESULT_FILE).is_file()}
    if not wanted:
        return []
    frame = store.runs_frame(grid=grid)
    out = []
    for rid, mid in zip(frame["run_id"], frame["mlflow_run_id"], strict=True):
        if rid in wanted and (mid is None or mid != mid):
            try:
                out.append(read_result(layout.run_dir(home, rid)))
            except Exception:  # noqa: BLE001 - not a result: nothing to mirror
                continue
    return out
