"""What Slurm says about a grid's jobs, and how they are cancelled: ``squeue`` and ``scancel``, no accounting
needed.

A run submitted through ``ablate run --executor slurm`` carries its Slurm job in the store (``executor``
``slurm``, ``job_id`` ``<array id>_<task index>``, or a plain job id when one run was submitted). ``squeue``
answers for jobs that are still pending or running (and for a few minutes after they end, ``MinJobAge``); a
job it no longer knows is gone.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

from ablate.errors import RunError

# Job states in which a job still holds (or will hold) its run: it may yet train it.
ALIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                   "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})


def have_slurm() -> bool:
    """Whether the Slurm client commands (``sbatch``, ``squeue``, ``scancel``) are on the PATH."""
    return all(shutil.which(c) for c in ("sbatch", "squeue", "scancel"))


def _run(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RunError(f"{cmd[0]} not found: the Slurm client commands must be on the PATH") from None
    except subprocess.TimeoutExpired:
        raise RunError(f"{' '.join(cmd)} did not answer within 60 s: is slurmctld up?") from None
    if check and proc.returncode != 0:
        raise RunError(f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def job_states(job_ids: Iterable[str] | None = None) -> dict[str, str]:
    """``{job id: state}`` from ``squeue`` (one entry per array task, ``<array>_<index>``), for the given ids
    (an array id stands for all its tasks) or for every job squeue knows."""
    proc = _run(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T"])
    states = {}
    for line in proc.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state.strip()
    if job_ids is None:
        return states
    wanted = set(job_ids)
    arrays = {j for j in wanted if "_" not in j}
    return {j: s for j, s in states.items() if j in wanted or j.split("_", 1)[0] in arrays}


def alive(job_ids: Iterable[str]) -> set[str]:
    """The given job ids whose jobs are still pending or running (an empty set when Slurm is not
    installed)."""
    ids = [j for j in job_ids if j]
    if not ids or not have_slurm():
        return set()
    states = job_states(ids)
    return {j for j in ids if states.get(j) in ALIVE}


def cancel_arrays(job_ids: Iterable[str]) -> list[str]:
    """``scancel`` the arrays (or plain jobs) of the given job ids that are still alive; their ids."""
    ids = list(job_ids)
    if not ids:
        return []
    if not have_slurm():
        raise RunError("scancel not found: the Slurm client commands must be on the PATH to cancel jobs")
    arrays = sorted({j.split("_", 1)[0] for j in alive(ids)}, key=lambda a: int(a) if a.isdigit() else 0)
    if arrays:
        _run(["scancel", *arrays])
    return arrays
