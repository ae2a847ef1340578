"""``ablate run GRID --executor slurm``: the grid's pending runs as one Slurm job array, through submitit.

1. The same opening as the local executor (``opening.open_grid``): done and diverged runs are skipped, failed
   ones unless ``--retry-failed``, a run another process (or a live Slurm job) is training is left alone, a
   cut-off run resumes from its checkpoint. A run still queued in a live Slurm job is not submitted twice.
2. One array (``map_array``), a task per run, ``--array-parallelism`` at a time; each task trains its run into
   ``$ABLATE_HOME/runs/<run_id>`` and records it in the store itself (``slurm_task.SlurmTask``): the home and
   the store must be reachable from the compute nodes (a shared file system; PostgreSQL for the store).
3. The runs get their Slurm job ids (``<array>_<index>``) in the store; the command returns the array id, or
   with ``wait`` follows the array until every run has ended.

Multi-device runs (``train.devices`` > 1) get one Slurm task per device, ``srun`` starting them on ``--nodes``
nodes (``--ntasks-per-node`` = devices / nodes, ``--gpus-per-node`` GPUs each; ``--gpus-per-job`` on one
node); Lightning reads each process's rank and node from Slurm, and only rank 0 records. A GPU count above
what the partition's nodes have (``sinfo``) is refused before anything is submitted.
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ablate.errors import ConfigError, RunError
from ablate.execute.messages import Job
from ablate.execute.recorder import STORE_PATIENCE_S, Wording
from ablate.execute.slurm.queue import ALIVE, have_slurm, job_states
from ablate.execute.triage import RunAction
from ablate.layout import run_dir

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)


DEFAULT_TIME = "1-00:00:00"
# what ``--wait`` says when the store goes away, when it is back, and when it stayed away past the patience
WAIT = Wording(
    away="the store {where} is {away}: the Slurm tasks train on and record their runs when it is back; "
         "waiting for it (up to {patience:.0f} s)",
    back="the store {where} is back after {down:.0f} s",
    gave_up="the store {where} has been {away} for {down:.0f} s: stopped waiting; array {array} goes "
            "on, and its runs are recorded when the store is back (by their tasks, or by the next "
            "`ablate run` for a task that ended meanwhile)")
FINAL = ("done", "diverged", "failed")
SIGNAL_DELAY_S = 90  # Slurm signals the task this long before its time limit (and on preemption)


@dataclass
class SlurmOptions:
    """How ``submit_grid`` submits: where (home, store), what each job asks Slurm for, and whether to wait."""

    home: Path = Path("ablate-runs")
    store: str | None = None
    partition: str | None = None
    gpus_per_job: int | None = None  # default: train.devices when CUDA is visible here, else 0
    nodes: int = 1  # nodes per run: its train.devices processes are spread evenly over them
    gpus_per_node: int | None = None  # with nodes: GPUs (= processes) per node; default as gpus_per_job's
    time: str = DEFAULT_TIME  # Slurm's time format: MM, HH:MM:SS, D-HH[:MM[:SS]]
    array_parallelism: int | None = None
    slurm_opts: Sequence[str] = ()  # K=V: a submitit SlurmExecutor parameter, else a raw sbatch flag
    retry_failed: bool = False
    append: bool = False  # a grid whose name the store holds with another base: the same study grown
    device_memory: float | None = None  # bytes per device every run to submit must fit (--device-memory)
    mlflow: bool = True  # each task mirrors its run into MLflow, live
    mlflow_experiment: str | None = None  # into the experiment the user named; None: the grid's own
    wait: bool = False
    poll_s: float = 5.0
    stale_after_s: float = 300.0
    store_patience_s: float = STORE_PATIENCE_S  # with wait: how long an unreachable store is waited for
    console: Console | None = None
    # runs beyond the file's, as include entries (--until-resolved's seeds)
    extra: tuple[dict[str, Any], ...] = ()
    yes: bool = True  # a large grid is submitted after its one line, else only if ``ask`` says yes
    ask: Callable[[str], bool] | None = None


@dataclass
class SlurmReport:
    """What one submission did: the array, the job id of each submitted run, what was skipped and why, and
    (after ``wait``) the runs' final statuses."""

    grid: str
    array_id: str | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # run_id -> Slurm job id
    skipped: dict[str, str] = field(default_factory=dict)  # run_id -> reason
    statuses: dict[str, str] = field(default_factory=dict)  # after wait: run_id -> status
    warnings: list[str] = field(default_factory=list)
    log_dir: Path | None = None  # submitit's folder: one subfolder of logs per job
    interrupted: bool = False
    # why the wait stopped early: the store stayed unreachable past the patience
    store_error: str | None = None
    home: Path = Path("ablate-runs")
    wall_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """CLI.md: 0 nothing failed (or not waited for), 1 some run failed or the store stayed away; 130 when
        the wait was interrupted."""
        if self.interrupted:
            return 130
        return 1 if self.store_error or any(s == "failed" for s in self.statuses.values()) else 0


# ------------------------------------------------------------ options
def parse_time(text: str) -> int:
    """A Slurm time limit in whole minutes (rounded up).

    >>> [parse_time(t) for t in ("30", "1:30:00", "2-0", "0-0:10:30", "90:00")]
    [30, 90, 2880, 11, 90]
    """
    m = re.fullmatch(r"\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\s*", str(text))
    if not m:
        raise ConfigError(
            f"{text!r} is not a Slurm time; allowed: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS",
            where="--time",
        )
    days, b, c = (int(g) if g is not None else None for g in (m[1], m[3], m[4]))
    a = int(m[2])  # always there
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif b is not None and c is not None:  # HH:MM:SS (c only ever comes with b)
        seconds = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        seconds = a * 60 + b
    else:  # MM
        seconds = a * 60
    if seconds <= 0:
        raise ConfigError(f"{text!r} is no time at all; give a positive time limit", where="--time")
    return math.ceil(seconds / 60)


def parse_slurm_opts(opts: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--slurm-opt K=V`` -> (submitit SlurmExecutor parameters, raw sbatch flags); V is a YAML scalar
    (``true`` alone makes a bare flag such as ``--hold``)."""
    import yaml
    from submitit.slurm.slurm import _get_default_parameters

    known = _get_default_parameters()
    params: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for opt in opts:
        key, eq, value = opt.partition("=")
        key = key.strip().lstrip("-")
        if not eq or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key):
            raise ConfigError(f"{opt!r} is not K=V (e.g. qos=high, cpus_per_task=8, mail-type=END)",
                              where="--slurm-opt")
        parsed = yaml.safe_load(value) if value.strip() else ""
        if key.replace("-", "_") in known:
            params[key.replace("-", "_")] = parsed
        else:
            raw[key] = parsed
    return params, raw


def _gpus_here() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES", None) != "" and Path("/proc/driver/nvidia").exists()


def partition_gpus(partition: str | None) -> int | None:
    """The most GPUs a node of ``partition`` (default: Slurm's default partition) has, from ``sinfo``'s GRES;
    None when sinfo does not know the partition."""
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P|%G"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    most = None
    for line in proc.stdout.splitlines():
        name, _, gres = line.strip().partition("|")
        if (partition is None and name.endswith("*")) or name.rstrip("*") == partition:
            counts = [int(n) for n in re.findall(r"gpu(?::[^:,(]+)?:(\d+)", gres)]
            most = max([most or 0, *counts])
    return most


def _tasks_per_node(opts: SlurmOptions, devices: int) -> tuple[int, int]:
    """``(processes per node, GPUs per node)`` of a run of ``devices`` processes on ``opts.nodes`` nodes."""
    nodes = opts.nodes
    if nodes < 1:
        raise ConfigError(f"{nodes} nodes; allowed: 1 or more", where="--nodes")
    if opts.gpus_per_node is not None and opts.gpus_per_job is not None:
        raise ConfigError("give --gpus-per-node (with --nodes) or --gpus-per-job, not both",
                          where="--gpus-per-node")
    if devices % nodes:
        raise ConfigError(f"train.devices = {devices} processes do not split evenly over {nodes} nodes: set "
                          f"train.devices to a multiple of {nodes}", where="--nodes")
    tasks = devices // nodes
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else opts.gpus_per_job
    flag = "--gpus-per-node" if opts.gpus_per_node is not None else "--gpus-per-job"
    if gpus is None:
        gpus = tasks if _gpus_here() else 0
    if gpus < 0:
        raise ConfigError(f"{gpus} GPUs; allowed: 0 (CPU) or more", where=flag)
    if gpus and flag == "--gpus-per-job" and nodes == 1 and gpus != devices:
        raise ConfigError(f"{gpus} GPUs per job for runs with train.devices = {devices}; a run uses one GPU "
                          f"per device: add --set train.devices={gpus} or ask for --gpus-per-job "
                          f"{devices}", where=flag)
    if gpus and gpus != tasks:
        raise ConfigError(f"{nodes} node(s) x {gpus} GPUs = {nodes * gpus} GPUs for runs with train.devices "
                          f"= {devices}; a run uses one GPU per device: add --set "
                          f"train.devices={nodes * gpus}",
                          where=flag)
    return tasks, gpus


def executor_parameters(opts: SlurmOptions, devices: int, grid: str) -> dict[str, Any]:
    """The submitit SlurmExecutor parameters of the array: ``nodes`` nodes per task, one process per device
    spread evenly over them (``srun`` starts them; Lightning reads the ranks from Slurm), the GPUs, time,
    options."""
    params, raw = parse_slurm_opts(opts.slurm_opts)
    tasks, gpus = _tasks_per_node(opts, devices)
    if gpus and (most := partition_gpus(opts.partition)) is not None and gpus > most:
        where = f"partition {opts.partition!r}" if opts.partition else "the default partition"
        raise ConfigError(f"{gpus} GPUs per node asked for, but {where} has at most {most} per node (sinfo)",
                          where="--gpus-per-node" if opts.gpus_per_node is not None else "--gpus-per-job")
    if opts.array_parallelism is not None and opts.array_parallelism < 1:
        raise ConfigError(f"{opts.array_parallelism} tasks at a time; allowed: 1 or more",
                          where="--array-parallelism")
    out: dict[str, Any] = {"job_name": f"ablate-{grid}", "time": parse_time(opts.time), "nodes": opts.nodes,
                           "ntasks_per_node": tasks, "signal_delay_s": SIGNAL_DELAY_S}
    if gpus:
        out["gpus_per_node"] = gpus
    if opts.partition:
        out["partition"] = opts.partition
    if opts.array_parallelism is not None:
        out["array_parallelism"] = opts.array_parallelism
    out.update(params)
    if raw:
        out["additional_parameters"] = {**out.get("additional_parameters", {}), **raw}
    return out


# ------------------------------------------------------------ submit
def submit_grid(path: str | Path, sets: Sequence[str] = (),
                options: SlurmOptions | None = None) -> SlurmReport:
    """Submit the grid at ``path``'s pending runs as one Slurm job array (see the module's docstring). Runs
    that cannot fit in ``options.device_memory`` are refused first (exit 2)."""
    from ablate.execute.fit import require_fit
    from ablate.execute.large import confirm_large
    from ablate.execute.opening import expand_grid, open_grid, planning

    opts = options or SlurmOptions()
    console = opts.console or Console(stderr=True)
    t0 = time.monotonic()
    with planning():  # Ctrl-C until the grid is registered: one line, nothing left of it
        expanded = expand_grid(path, sets, home=Path(opts.home), extra=opts.extra)  # once: check, opening
        require_fit(expanded.planned, opts.device_memory, local=False, home=Path(opts.home), store=opts.store)
        confirm_large(expanded.grid.name, expanded.planned, home=Path(opts.home), store=opts.store,
                      workers=opts.array_parallelism, yes=opts.yes, ask=opts.ask,
                      retry_failed=opts.retry_failed,
                      say=lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True))
    if not have_slurm():
        raise RunError(
            "--executor slurm needs the Slurm client commands (sbatch, squeue, scancel) on the PATH"
        )
    with planning():
        opening = open_grid(expanded, home=Path(opts.home), store=opts.store, retry_failed=opts.retry_failed,
                            stale_after_s=opts.stale_after_s, remote=True, append=opts.append)
    with opening as o:
        report = SlurmReport(grid=o.name, skipped=dict(o.skipped), home=o.home)
        report.skipped.update({rid: f"finished ({status}) before: ingested its result" for rid, status
                               in o.reused.items()})
        report.warnings += o.store.warnings + o.warnings
        url = o.store.url
        if url.startswith("sqlite"):
            log.info("SQLite store %s: the Slurm tasks must all see this file (PostgreSQL is the store for "
                     "clusters)", url)
        if o.todo:
            _submit(o.todo, o.store, o.home, url, opts, report, console)
        else:
            console.print(f"ablate run {o.name}: nothing to submit ({len(report.skipped)} skipped)",
                          highlight=False)
        if opts.wait and report.jobs:
            wait_for(o.store, report, opts, console)
    report.wall_s = time.monotonic() - t0
    return report


def _submit(todo: list[RunAction], store: Store, home: Path, url: str, opts: SlurmOptions,
            report: SlurmReport, console: Console) -> None:
    import submitit

    from ablate.execute.slurm.task import SlurmTask

    devices = {d.run.config.train.devices for d in todo}
    if len(devices) > 1:
        raise ConfigError(f"one job array asks for one number of devices per task, but these runs ask for "
                          f"{sorted(devices)}; run them as separate grids", where="train.devices")
    params = executor_parameters(opts, devices.pop(), report.grid)
    executor = submitit.SlurmExecutor(folder=home / "slurm" / "%j", max_num_timeout=3)
    try:
        executor.update_parameters(**params)
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[0], where="--slurm-opt") from None
    task = SlurmTask(home=str(home), store=url, grace_s=max(10.0, params["signal_delay_s"] - 15.0),
                     grid=report.grid, mlflow=opts.mlflow, experiment=opts.mlflow_experiment)
    jobs = [Job(d.run_id, str(run_dir(home, d.run_id)), d.run.config.model_dump(mode="json")) for d in todo]
    try:
        submitted = executor.map_array(task, jobs)
    except Exception as exc:  # noqa: BLE001 - sbatch's refusal, in the user's words
        raise RunError(f"sbatch refused the array: {exc}") from None
    for d, job in zip(todo, submitted, strict=True):
        report.jobs[d.run_id] = job.job_id
        store.set_job(run_id=d.run_id, executor="slurm", job_id=job.job_id)
    report.array_id = submitted[0].job_id.split("_", 1)[0]
    report.log_dir = home / "slurm"
    what = f"Slurm job array {report.array_id}" if len(jobs) > 1 else f"Slurm job {report.array_id}"
    console.print(f"ablate run {report.grid}: submitted {len(jobs)} run(s) as {what} "
                  f"({sum(d.action == 'resume' for d in todo)} resuming), {len(report.skipped)} skipped; "
                  f"logs in {home / 'slurm'}", highlight=False)


# ------------------------------------------------------------ wait
def wait_for(store: Store, report: SlurmReport, opts: SlurmOptions, console: Console) -> None:
    """Follow the submitted runs until each has ended (done, diverged, failed) or its Slurm job is gone; a run
    whose job ended without recording anything is marked failed (one that left a complete ``result.json`` is
    ingested). A store that goes away is waited for, up to ``opts.store_patience_s`` seconds: the tasks train
    on and record their runs themselves when it is back; past the patience this stops waiting (exit 1)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ablate.execute.recorder import Recorder

    ids = list(report.jobs)
    told: set[str] = set()
    suspect: set[str] = set()  # not alive in squeue at the last look (twice in a row: lost)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[states]}"), TimeElapsedColumn(), console=console,
                        transient=True, disable=not console.is_terminal)
    task = progress.add_task(f"array {report.array_id}", total=len(ids), states="")
    recorder = Recorder(store, home=report.home, patience_s=opts.store_patience_s)
    wording = WAIT.filled(array=str(report.array_id))

    def say(news: str, text: str) -> None:
        if news != "gave_up":  # that one is the command's error line (report.store_error)
            console.print(text, highlight=False, soft_wrap=True)

    def look() -> bool:
        """One look at the store and the queue; True once every run has ended."""
        statuses = store.statuses(run_ids=ids)
        states = job_states(report.jobs.values())
        for rid in ids:
            if statuses.get(rid) in FINAL and rid not in told:
                told.add(rid)
                console.print(f"{statuses[rid]:>9} {rid}  (Slurm job {report.jobs[rid]})", highlight=False)
        gone = {rid for rid in ids if rid not in told and states.get(report.jobs[rid]) not in ALIVE}
        counts: dict[str, int] = {}
        for s in states.values():
            counts[s] = counts.get(s, 0) + 1
        progress.update(task, completed=len(told),
                        states=" ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())))
        if len(told) == len(ids):
            return True
        if lost := gone & suspect:
            _lost(store, sorted(lost), report, states)  # re-reads first: it may have just finished
        suspect.clear()
        suspect.update(gone)
        return False

    try:
        with progress:
            while True:
                done = recorder.attempt(look)  # None while the store is away: the tasks train on
                if recorder.watch(say, wording):  # away past the patience: stop waiting
                    report.store_error = recorder.gave_up
                    return
                if done:
                    break
                time.sleep(opts.poll_s)
    except KeyboardInterrupt:
        report.interrupted = True
        console.print(f"stopped waiting; array {report.array_id} goes on (ablate status shows it)",
                      highlight=False)
    report.statuses = recorder.attempt(lambda: store.statuses(run_ids=ids)) or report.statuses


def _lost(store: Store, gone: list[str], report: SlurmReport, states: dict[str, str]) -> None:
    from ablate.execute.opening import ingest_found

    statuses = store.statuses(run_ids=gone)
    for rid in gone:
        if statuses.get(rid) in FINAL or ingest_found(store, report.home, rid) is not None:
            continue  # recorded meanwhile, or left its result.json (the store was away when it ended)
        job = report.jobs[rid]
        state = states.get(job, "gone from squeue")
        msg = (f"Slurm job {job} ended ({state}) without recording a result; its log is in "
               f"{report.log_dir}/{job}/")
        store.mark_failed(run_id=rid, error=msg)
