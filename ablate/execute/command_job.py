"""The command trainer's job: one run of a command grid, from its config to its ``result.json``, wherever it
runs (a local pool worker, a Ray task, a Slurm array task), as ``training.train`` is ablate's own model's.

``train_command(job, ctx)`` is the job function the command trainer names
(``ablate.trainers.registry.TRAINERS["command"].job``). It imports neither torch nor Lightning: the worker
only starts the command (``ablate.trainers.command.run.run_command``), hands each batch of parsed records on
as step metrics (the live status, the MLflow curves) and stops the command's whole process group when the
job is asked to stop (Ctrl-C, ``ablate cancel``, a preemption). The run lifecycle records the rest, as for
any run: a failed command is a ``failed`` run whose error holds the command's reason and its stderr's last
lines, never a traceback of ablate's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from ablate.execute.devices import Slot
from ablate.execute.job_function import JobContext, JobInterrupted, held
from ablate.execute.last_attempt import ERROR_FILE
from ablate.execute.messages import Job, JobOutcome
from ablate.trainers.command.config import CommandConfig
from ablate.trainers.command.run import CommandInterrupted, run_command

log = logging.getLogger(__name__)


def gpu_indices(slot: Slot, gpus: int = 1, environ: Mapping[str, str] | None = None) -> str | None:
    """The GPUs a command gets as ``CUDA_VISIBLE_DEVICES`` (and ``{devices}``): those of the worker it runs
    in, as the worker's own ``CUDA_VISIBLE_DEVICES`` names them (each executor sets it to the slot's GPUs: a
    local worker's through the ``CUDA_VISIBLE_DEVICES`` ablate was started with, a Slurm task's and a Ray
    task's as Slurm and Ray gave them), else the slot's indices; ``""`` (none) for a command that takes no GPU
    (``trainer.gpus: 0``) on a GPU slot; None on a CPU slot (the command's environment is left as it is).

    >>> gpu_indices(Slot(0, "cuda:0,1", 4), 2, {"CUDA_VISIBLE_DEVICES": "2,3"})
    '2,3'
    >>> gpu_indices(Slot(0, "cuda:2", 4), 1, {})
    '2'
    >>> gpu_indices(Slot(0, "cuda:2", 4), 0), gpu_indices(Slot(0, "cpu", 4)) is None
    ('', True)
    """
    kind, _, indices = slot.device.partition(":")
    if kind != "cuda" or not indices:
        return None
    if gpus == 0:
        return ""
    env = os.environ if environ is None else environ
    return env.get("CUDA_VISIBLE_DEVICES") or indices


def train_command(job: Job, ctx: JobContext) -> JobOutcome:
    """Run ``job``'s command into ``job.run_dir``; how it ended (``reused``: a finished ``result.json`` was
    there; ``busy``: another process holds the run directory)."""
    run_dir = Path(job.run_dir)
    with held(run_dir) as ended:
        if ended is not None:
            return ended
        (run_dir / ERROR_FILE).unlink(missing_ok=True)
        config = CommandConfig.model_validate(job.config)
        try:
            result = run_command(config, run_dir, run_id=job.run_id, stop=ctx.stop, on_records=ctx.progress,
                                 on_start=lambda resuming: ctx.started(resuming=resuming),
                                 devices=gpu_indices(ctx.slot, config.spec.gpus), threads=ctx.slot.threads,
                                 mlflow=job.mlflow)
        except CommandInterrupted as exc:
            raise JobInterrupted(str(exc)) from None
        if result.error is not None:
            (run_dir / ERROR_FILE).write_text(result.error + "\n")
        log.info("run %s: %s (%s)", job.run_id, result.status, result.error or "exit 0")
        return JobOutcome("trained", status=str(result.status), resumed_from=result.resumed_from,
                          run_one_s=float(result.summary.get("wall_s") or 0.0))

