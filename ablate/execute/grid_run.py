"""``ablate run``: a grid from its file to every run recorded, on the local worker pool.

1. Expand the grid, look every run up in the store, register the grid, decide (``triage``) what trains.
2. Start the pool (one worker per slot) and deal out the jobs, resumed ones first.
3. Record what the workers report: ``started`` -> running, throttled heartbeats, a finished run's
   ``result.json`` -> ingest (and MLflow, in a background thread), a crash -> failed with its traceback, a dead
   worker -> failed (``--retry-failed`` resumes it from its last checkpoint; requeueing could kill worker after
   worker on a run that exhausts memory), an interrupted job -> queued.
4. The summary: counts by outcome and by status, and an exit code (0 all done/diverged, 1 some failed, 130 when
   interrupted).

Liveness: this process writes each running job's heartbeat every 2 s (with the step its ``on_step`` last reported)
while its worker lives. A ``running`` run recorded on this host whose run-directory lock is free was cut off and
resumes at once; one recorded on another host only once its heartbeat is ``stale_after_s`` old.

Ctrl-C (or SIGTERM) once: running jobs save a checkpoint and go back to ``queued``; nothing new starts. Twice:
the workers are killed at once; their runs go back to ``queued`` and resume from their last periodic checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ablate import layout
from ablate.execute.devices import Slot, parse_devices, plan_slots
from ablate.execute.display import GridDisplay, summary_table
from ablate.execute.locks import is_locked
from ablate.execute.pool import PoolEvent, WorkerPool
from ablate.execute.triage import Decision, triage
from ablate.layout import CHECKPOINT
from ablate.result import RunResult, read_result

log = logging.getLogger(__name__)

TRAIN_JOB = "ablate.execute.job:train"
HEARTBEAT_EVERY_S = 2.0



@dataclass
class RunOptions:
    """How ``run_grid`` runs: where (home, store), on what (devices, workers) and what it retries."""

    home: Path = Path("ablate-runs")
    store: str | None = None
    jobs: int | None = None
    devices: str | None = None
    jobs_per_device: int = 1
    retry_failed: bool = False
    mlflow: bool = True
    stale_after_s: float = 300.0  # a run on another host with no heartbeat for this long is taken as dead
    job_fn: str = TRAIN_JOB
    console: Console | None = None


@dataclass
class GridReport:
    """What one ``ablate run`` did: each run's outcome, the grid's statuses after it, and the time it took."""

    grid: str
    outcomes: dict[str, str] = field(default_factory=dict)  # run_id -> done/diverged/failed/interrupted/skipped/...
    statuses: dict[str, str] = field(default_factory=dict)  # run_id -> status in the store at the end
    errors: dict[str, str] = field(default_factory=dict)  # run_id -> error (failed this time)
    interrupted: bool = False
    wall_s: float = 0.0
    pool_started: float | None = None  # time.monotonic() when the workers were started
    job_times: dict[str, tuple[float, float]] = field(default_factory=dict)  # run_id -> (started, ended), monotonic
    run_one_s: dict[str, float] = field(default_factory=dict)  # run_id -> seconds inside run_one (in the worker)
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Runs per outcome of this command."""
        out: dict[str, int] = {}
        for outcome in self.outcomes.values():
            out[outcome] = out.get(outcome, 0) + 1
        return out

    def totals(self) -> dict[str, int]:
        """The grid's runs per status in the store."""
        out: dict[str, int] = {}
        for status in self.statuses.values():
            out[status] = out.get(status, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """CLI.md: 0 every run done or diverged, 1 some run failed; 130 when interrupted."""
        if self.interrupted:
            return 130
        return 1 if any(s == "failed" for s in self.statuses.values()) else 0


def _gpu_count() -> int:
    """Visible CUDA devices, without importing torch in this process when there can be none."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not Path("/proc/driver/nvidia").exists():
        return 0
    import torch

    return torch.cuda.device_count()


def run_grid(path: str | Path, sets: Sequence[str] = (), options: RunOptions | None = None) -> GridReport:
    """Run the grid at ``path`` (with ``--set`` overrides): train what is new or cut off, skip what is done."""
    from ablate.grid import expand, load_grid
    from ablate.store import Store

    opts = options or RunOptions()
    console = opts.console or Console(stderr=True)
    t0 = time.monotonic()
    grid = load_grid(path, sets)
    planned = expand(grid)
    slots = plan_slots(devices=parse_devices(opts.devices, _gpu_count()), jobs=opts.jobs,
                       jobs_per_device=opts.jobs_per_device, cpu_count=os.cpu_count() or 1)
    home = Path(opts.home)
    store = Store.open(opts.store, home=home)
    try:
        report = _Executor(grid.name, grid.text, planned, slots, opts, home, store, console).run()
    finally:
        store.close()
    report.wall_s = time.monotonic() - t0
    return report


class _Executor:
    """One ``ablate run`` of one grid: the store lookups, the pool loop, the records."""

    def __init__(self, name: str, text: str, planned: list[Any], slots: list[Slot], opts: RunOptions,
                 home: Path, store: Any, console: Console):
        self.name, self.text, self.planned, self.slots = name, text, planned, slots
        self.opts, self.home, self.store, self.console = opts, home, store, console
        self.host = socket.gethostname()
        self.report = GridReport(grid=name)
        self.by_id = {p.run_id: p for p in planned}
        self.last_beat: dict[str, float] = {}
        self.last_step: dict[str, int | None] = {}
        self.started_at: dict[str, float] = {}
        self.mirror: Any = None
        self.display: GridDisplay | None = None
        self.hard_stop = False

    def run_dir(self, run_id: str) -> Path:
        return layout.run_dir(self.home, run_id)

    # ------------------------------------------------------------ 1. what trains
    def decide(self) -> list[Decision]:
        ids = list(self.by_id)
        before = self.store.statuses(run_ids=ids)
        running = {r["run_id"]: r for r in self.store.status_summary(
            self.name, stale_after_s=self.opts.stale_after_s)["running"]} if "running" in before.values() else {}

        def is_alive(run_id: str) -> bool:
            if is_locked(self.run_dir(run_id)):
                return True  # a live process on this machine holds it
            r = running.get(run_id)
            # on this host a free lock means its process is gone; elsewhere only a stale heartbeat says so
            return bool(r) and r.get("host") not in (None, self.host) and not r.get("stale")

        decisions = triage(self.planned, before, retry_failed=self.opts.retry_failed, is_alive=is_alive,
                           has_checkpoint=lambda rid: (self.run_dir(rid) / CHECKPOINT).is_file())
        self.store.register_grid(name=self.name, text=self.text, runs=self.planned)
        for d in decisions:
            if d.action != "skip" and d.status in ("running", "failed"):
                self.store.mark_queued(run_id=d.run_id)
            elif d.action == "skip":
                self.report.outcomes[d.run_id] = "running elsewhere" if d.status == "running" else "skipped"
        return decisions

    # ------------------------------------------------------------ 2. the pool
    def run(self) -> GridReport:
        decisions = self.decide()
        todo = [d for d in decisions if d.action == "resume"] + [d for d in decisions if d.action == "train"]
        if self.opts.mlflow:
            self._start_mirror([d.run_id for d in decisions if d.status in ("done", "diverged")], bool(todo))
        if todo:
            self._run_pool(todo)
        if self.mirror is not None:
            # after a second Ctrl-C do not wait long: the next `ablate run` mirrors what is left
            self.mirror.close(timeout=5.0 if self.hard_stop else 300.0)
            self._record_mirrors()
            self.report.warnings += self.mirror.errors
        self.report.statuses = self.store.statuses(run_ids=list(self.by_id))
        return self.report

    def _run_pool(self, todo: list[Decision]) -> None:
        jobs = [{"run_id": d.run_id, "run_dir": str(self.run_dir(d.run_id)),
                 "config": d.run.config.model_dump(mode="json")} for d in todo]
        slots = self.slots[:len(jobs)]  # never more workers than jobs
        pool = WorkerPool(slots, self.opts.job_fn, log_dir=self.home / "logs")
        handlers = {}

        def on_signal(signum: int, frame: Any) -> None:
            pool.interrupt()

        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)
        self.display = GridDisplay(self.name, len(todo), self.console)
        self.console.print(f"ablate run {self.name}: {len(todo)} to run "
                           f"({sum(d.action == 'resume' for d in todo)} resuming), "
                           f"{len(self.by_id) - len(todo)} skipped; {len(slots)} worker(s) on "
                           f"{', '.join(sorted({s.device for s in slots}))}", highlight=False)
        told = 0
        self.report.pool_started = time.monotonic()
        try:
            with self.display, pool:
                def on_tick() -> None:
                    nonlocal told
                    if pool.interrupts > told:  # tell the user once per Ctrl-C
                        told = pool.interrupts
                        self.display.message("[magenta]stopping: running jobs save a checkpoint and go back to "
                                             "the queue (Ctrl-C again to stop at once)[/]" if told == 1 else
                                             "[magenta]stopping at once[/]")
                    self._beat()
                    self._record_mirrors()

                left = pool.run(jobs, self._on_event, on_tick)
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
        self.report.interrupted = pool.interrupted
        self.hard_stop = pool.interrupts >= 2
        for job in left:
            self.report.outcomes[job["run_id"]] = "interrupted"

    # ------------------------------------------------------------ 3. the records
    def _on_event(self, e: PoolEvent) -> None:
        rid, data, display = e.run_id or "", e.data, self.display
        assert display is not None
        cfg = self.by_id[rid].config if rid in self.by_id else None
        if e.kind == "started":
            self.store.mark_running(run_id=rid, host=self.host, device=e.slot.device)
            self.last_beat[rid], self.last_step[rid] = time.monotonic(), None
            self.started_at[rid] = self.last_beat[rid]
            display.started(rid, variant=cfg.variant, seed=cfg.seed, device=e.slot.device,
                            total_steps=cfg.train.steps)
            return
        if e.kind == "step":
            display.step(rid, data)
            self.last_step[rid] = data.get("step")
            return
        self.last_beat.pop(rid, None)
        if e.kind == "finished":
            self._finished(rid, data)
        elif e.kind == "failed":
            self._failed(rid, data["error"], f"{data['error']}\n\n{data.get('traceback', '')}".rstrip())
        elif e.kind == "died":
            msg = (f"the worker process died (exit code {data.get('exitcode')}: killed, or out of memory) "
                   "while training; --retry-failed resumes it from its last checkpoint")
            self._failed(rid, msg, msg)
        elif e.kind in ("interrupted", "killed"):
            self.store.mark_queued(run_id=rid)
            self._end(rid, "interrupted", "saved; the next run resumes it" if e.kind == "interrupted" else "")

    def _finished(self, rid: str, data: dict[str, Any]) -> None:
        if "run_one_s" in data:
            self.report.run_one_s[rid] = data["run_one_s"]
        if data.get("outcome") == "busy":
            self._end(rid, "running elsewhere", "another process holds its run directory")
            return
        from ablate.errors import StoreError

        try:
            result = read_result(self.run_dir(rid))
            self.store.ingest(result)
        except StoreError as exc:
            self._failed(rid, str(exc), str(exc))
            return
        if self.mirror is not None:
            self.mirror.submit(result)
        note = f"loss {result.summary['train_loss']:.4f}" if result.summary.get("train_loss") is not None else ""
        if result.resumed_from:
            note += f"  (resumed from step {result.resumed_from})"
        self._end(rid, result.status, note)

    def _failed(self, rid: str, error: str, text: str) -> None:
        self.store.mark_failed(run_id=rid, error=text)
        self.report.errors[rid] = error
        if self.mirror is not None and rid in self.by_id:
            self.mirror.submit(RunResult(run_id=rid, config=self.by_id[rid].config.model_dump(mode="json"),
                                         status="failed", error=text, host=self.host))
        self._end(rid, "failed", error.splitlines()[0][:200] if error else "")

    def _end(self, rid: str, outcome: str, note: str = "") -> None:
        self.report.outcomes[rid] = outcome
        if rid in self.started_at:
            self.report.job_times[rid] = (self.started_at.pop(rid), time.monotonic())
        if self.display is not None:
            self.display.ended(rid, outcome, note)

    def _beat(self) -> None:
        now = time.monotonic()
        for rid, last in list(self.last_beat.items()):
            if now - last >= HEARTBEAT_EVERY_S:
                self.store.heartbeat(run_id=rid, step=self.last_step.get(rid))
                self.last_beat[rid] = now

    # ------------------------------------------------------------ MLflow
    def _start_mirror(self, finished: list[str], will_train: bool) -> None:
        from ablate.store.mlflow_mirror import MirrorThread

        missing = self._unmirrored(finished) if finished else []
        if not missing and not will_train:
            return  # nothing will be logged: do not even import MLflow
        self.mirror = MirrorThread(home=self.home, grid=self.name)
        for result in missing:
            self.mirror.submit(result)

    def _unmirrored(self, run_ids: list[str]) -> list[RunResult]:
        """Finished runs of this grid that MLflow never got (e.g. the last ``ablate run`` was killed)."""
        wanted = {rid for rid in run_ids if (self.run_dir(rid) / "result.json").is_file()}
        if not wanted:
            return []
        frame = self.store.runs_frame(grid=self.name)
        out = []
        for rid, mid in zip(frame["run_id"], frame["mlflow_run_id"], strict=True):
            if rid in wanted and (mid is None or mid != mid):
                try:
                    out.append(read_result(self.run_dir(rid)))
                except Exception:  # noqa: BLE001 - not a result: nothing to mirror
                    continue
        return out

    def _record_mirrors(self) -> None:
        if self.mirror is not None:
            for rid, mlflow_id in self.mirror.logged():
                self.store.set_mlflow_run_id(run_id=rid, mlflow_run_id=mlflow_id)


def print_summary(report: GridReport, console: Console | None = None) -> None:
    """The end-of-run table and, for each run that failed this time, its error's first line."""
    console = console or Console()
    console.print(summary_table(report.grid, report.counts(), report.totals(), report.wall_s))
    for rid, error in report.errors.items():
        console.print(f"[red]failed[/] {rid}: {error.splitlines()[0] if error else ''}", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if report.interrupted:
        console.print("interrupted: run the same command again to resume", highlight=False)
