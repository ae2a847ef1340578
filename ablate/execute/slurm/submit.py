"""``ablate run GRID --executor slurm``: the grid's pending runs as one Slurm job array, through submitit.

1. The same opening as the local executor (``opening.open_grid``): done and diverged runs are skipped, failed
   ones unless ``--retry-failed``, a run another process (or a live Slurm job) is training is left alone, a
   cut-off run resumes from its checkpoint. A run still queued in a live Slurm job is not submitted twice.
2. One array (``map_array``), a task per run, ``--array-parallelism`` at a time; each task trains its run into
   ``$ABLATE_HOME/runs/<run_id>`` through a job function (``options.job_fn``, else the grid's trainer's)
   and records it in the store itself (``task.SlurmTask``): the home and the store must be reachable from
   the compute nodes (a shared file system; PostgreSQL for the store).
3. The runs get their Slurm job ids (``<array>_<index>``) in the store; the command returns the array id, or
   with ``wait`` follows the array until every run has ended (``wait.wait_for``).

Multi-device runs (``train.devices`` > 1) of ablate's model get one Slurm task per device, ``srun`` starting
them on ``--nodes`` nodes (``--ntasks-per-node`` = devices / nodes, ``--gpus-per-node`` GPUs each;
``--gpus-per-job`` on one node); Lightning reads each process's rank and node from Slurm, and only rank 0
records. A trainer whose run is one process (a command: ``Trainer.one_process_per_device`` False, its
``torchrun`` starting its own ranks) gets one task with all the run's GPUs, on one node. A GPU count above
what the partition's nodes have (``sinfo``) is refused before anything is submitted; what the array asks Slurm
for is ``array_parameters``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import submitit
from rich.console import Console

from ablate.errors import ConfigError, RunError
from ablate.execute.fit import require_fit
from ablate.execute.large import confirm_large
from ablate.execute.messages import Job
from ablate.execute.opening import expand_grid, open_grid, planning
from ablate.execute.slurm.array import (
    DEFAULT_TIME,
    SIGNAL_DELAY_S,
    SlurmOptions,
    SlurmReport,
    check_partition,
    executor_parameters,
)
from ablate.execute.slurm.queue import have_slurm
from ablate.execute.slurm.task import SlurmTask
from ablate.execute.slurm.wait import wait_for
from ablate.execute.triage import RunAction
from ablate.grid.expand import PlannedRun
from ablate.layout import run_dir
from ablate.store.api import Store
from ablate.trainers.registry import KEY, trainer_of

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIME", "SlurmOptions", "SlurmReport", "submit_grid"]  # submit_grid and what it takes


def submit_grid(path: str | Path, sets: Sequence[str] = (),
                options: SlurmOptions | None = None) -> SlurmReport:
    """Submit the grid at ``path``'s pending runs as one Slurm job array (see the module's docstring). Runs
    that cannot fit in ``options.device_memory`` are refused first (exit 2)."""
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
            _submit(o.todo, o.store, o.home, url, opts.job_fn or expanded.trainer.job, opts, report, console)
        else:
            console.print(f"ablate run {o.name}: nothing to submit ({len(report.skipped)} skipped)",
                          highlight=False)
        if opts.wait and report.jobs:
            wait_for(o.store, report, opts, console)
    report.wall_s = time.monotonic() - t0
    return report


def array_parameters(opts: SlurmOptions, planned: Sequence[PlannedRun], grid: str) -> dict[str, object]:
    """What the array of ``planned`` asks Slurm for (``executor_parameters``): their devices, all the same,
    as one process per device or as one process that uses them all, as their trainer starts them."""
    devices = {p.config.train.devices for p in planned}
    if len(devices) > 1:
        raise ConfigError(f"one job array asks for one number of devices per task, but these runs ask for "
                          f"{sorted(devices)}; run them as separate grids", where="train.devices")
    # a run's trainer, from its config (the model's has no such key)
    per_device = {trainer_of(p.config.model_dump(mode="json", include={KEY})).one_process_per_device
                  for p in planned}
    return executor_parameters(opts, devices.pop(), grid, per_device=per_device != {False})


def _submit(todo: list[RunAction], store: Store, home: Path, url: str, job_fn: str, opts: SlurmOptions,
            report: SlurmReport, console: Console) -> None:
    params = array_parameters(opts, [d.run for d in todo], report.grid)
    gpus = params.get("gpus_per_node", 0)
    check_partition(opts, gpus if isinstance(gpus, int) else 0)
    executor = submitit.SlurmExecutor(folder=home / "slurm" / "%j", max_num_timeout=3)
    try:
        executor.update_parameters(**params)
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[0], where="--slurm-opt") from None
    delay = params["signal_delay_s"]  # --slurm-opt signal_delay_s=... may set it
    grace = max(10.0, (delay if isinstance(delay, int | float) else SIGNAL_DELAY_S) - 15.0)
    task = SlurmTask(home=str(home), store=url, grace_s=grace, grid=report.grid, mlflow=opts.mlflow,
                     experiment=opts.mlflow_experiment, job_fn=job_fn)
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
