"""A grid's Slurm job array: what ``ablate run --executor slurm`` asks Slurm for (``SlurmOptions``, the
submitit parameters of ``executor_parameters``: nodes, tasks per node, GPUs, time, ``--slurm-opt``), and what
one submission did (``SlurmReport``). Imports no submitit until ``--slurm-opt`` is read.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from ablate.errors import ConfigError
from ablate.execute.recorder import STORE_PATIENCE_S

DEFAULT_TIME = "1-00:00:00"
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
    job_fn: str | None = None  # what each task runs (``module:function``); None: the grid's trainer's
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


def parse_slurm_opts(opts: Sequence[str]) -> tuple[dict[str, object], dict[str, object]]:
    """``--slurm-opt K=V`` -> (submitit SlurmExecutor parameters, raw sbatch flags); V is a YAML scalar
    (``true`` alone makes a bare flag such as ``--hold``)."""
    from submitit.slurm.slurm import _get_default_parameters  # submitit only when options are given

    known = _get_default_parameters()
    params: dict[str, object] = {}
    raw: dict[str, object] = {}
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


def _tasks_per_node(opts: SlurmOptions, devices: int, *, per_device: bool = True) -> tuple[int, int]:
    """``(processes per node, GPUs per node)`` of a run of ``devices`` devices on ``opts.nodes`` nodes: a
    process per device (``per_device``, ablate's model), else one process that uses them all (a command)."""
    nodes = opts.nodes
    if nodes < 1:
        raise ConfigError(f"{nodes} nodes; allowed: 1 or more", where="--nodes")
    if opts.gpus_per_node is not None and opts.gpus_per_job is not None:
        raise ConfigError("give --gpus-per-node (with --nodes) or --gpus-per-job, not both",
                          where="--gpus-per-node")
    if not per_device:
        return 1, _one_process_gpus(opts, devices)
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


def _one_process_gpus(opts: SlurmOptions, devices: int) -> int:
    """The GPUs of a run that is one process using ``devices`` GPUs (a command): on one node, all or none."""
    if opts.nodes != 1:
        raise ConfigError(f"a run of this grid is one process (its command), on one node: --nodes 1, not "
                          f"{opts.nodes}", where="--nodes")
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else opts.gpus_per_job
    flag = "--gpus-per-node" if opts.gpus_per_node is not None else "--gpus-per-job"
    if gpus is None:
        return devices if _gpus_here() else 0
    if gpus < 0:
        raise ConfigError(f"{gpus} GPUs; allowed: 0 (CPU) or more", where=flag)
    if gpus and gpus != devices:
        raise ConfigError(f"{gpus} GPUs per job for runs of {devices} GPUs each (one process, its command): "
                          f"ask for {flag} {devices}, or 0 for the CPU", where=flag)
    return gpus


def check_partition(opts: SlurmOptions, gpus: int) -> None:
    """Refuse (ConfigError) ``gpus`` GPUs per node where the partition's nodes have fewer (``sinfo``)."""
    if gpus and (most := partition_gpus(opts.partition)) is not None and gpus > most:
        where = f"partition {opts.partition!r}" if opts.partition else "the default partition"
        raise ConfigError(f"{gpus} GPUs per node asked for, but {where} has at most {most} per node (sinfo)",
                          where="--gpus-per-node" if opts.gpus_per_node is not None else "--gpus-per-job")


def executor_parameters(opts: SlurmOptions, devices: int, grid: str, *, per_device: bool = True
                        ) -> dict[str, object]:
    """The submitit SlurmExecutor parameters of the array: ``nodes`` nodes per task, one process per device
    spread evenly over them (``srun`` starts them; Lightning reads the ranks from Slurm), or with
    ``per_device`` False one process that uses every GPU of the run; the GPUs, time, options. What the
    partition holds is ``check_partition``'s (it asks ``sinfo``)."""
    params, raw = parse_slurm_opts(opts.slurm_opts)
    tasks, gpus = _tasks_per_node(opts, devices, per_device=per_device)
    if opts.array_parallelism is not None and opts.array_parallelism < 1:
        raise ConfigError(f"{opts.array_parallelism} tasks at a time; allowed: 1 or more",
                          where="--array-parallelism")
    out: dict[str, object] = {"job_name": f"ablate-{grid}", "time": parse_time(opts.time),
                              "nodes": opts.nodes, "ntasks_per_node": tasks, "signal_delay_s": SIGNAL_DELAY_S}
    if gpus:
        out["gpus_per_node"] = gpus
    if opts.partition:
        out["partition"] = opts.partition
    if opts.array_parallelism is not None:
        out["array_parallelism"] = opts.array_parallelism
    out.update(params)
    if raw:
        given = out.get("additional_parameters", {})  # --slurm-opt additional_parameters=...
        out["additional_parameters"] = {**(given if isinstance(given, dict) else {}), **raw}
    return out
