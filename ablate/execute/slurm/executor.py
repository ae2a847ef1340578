"""The Slurm executor: one job array per grid, through submitit (``submit``), its tasks training and recording
their runs themselves (``task``), squeue and scancel for what Slurm says of them (``queue``).

``SLURM`` is the object its registry entry names (``ablate.execute.registry``). Its ``ablate run`` submits and
returns the array id (``--wait``: follows the array until every run has ended); its runs' jobs are
``<array>_<index>``."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ablate.errors import UserInputError
from ablate.execute.display import stdout_console
from ablate.execute.executor import Expanded, RunOptions, Session
from ablate.execute.slurm.array import DEFAULT_TIME, SlurmOptions
from ablate.execute.slurm.options import ABOUT
from ablate.execute.slurm.queue import alive, cancel_arrays, have_slurm, job_states
from ablate.execute.slurm.submit import submit_grid


class Slurm:
    """``--executor slurm``."""

    name = "slurm"
    about = ABOUT

    def options(self, options: RunOptions) -> SlurmOptions:
        """``submit_grid``'s options from ``ablate run``'s (``own``: those ``slurm.options`` declares)."""
        own: dict[str, Any] = options.own
        return SlurmOptions(home=options.home, store=options.store, partition=own.get("partition"),
                            gpus_per_job=own.get("gpus_per_job"), nodes=own.get("nodes", 1),
                            gpus_per_node=own.get("gpus_per_node"), time=own.get("time", DEFAULT_TIME),
                            array_parallelism=own.get("array_parallelism"),
                            slurm_opts=own.get("slurm_opts", ()), retry_failed=options.retry_failed,
                            append=options.append, device_memory=options.device_memory,
                            mlflow=options.mlflow, mlflow_experiment=options.mlflow_experiment,
                            wait=options.wait, stale_after_s=options.stale_after_s,
                            store_patience_s=options.store_patience_s, console=options.console,
                            extra=options.extra, job_fn=options.job_fn, yes=options.yes, ask=options.ask)

    def run(self, path: str | Path, sets: Sequence[str], options: RunOptions) -> int:
        """Submit the grid as one job array; print the array id (on stdout) and, after ``--wait``, the
        statuses."""
        report = submit_grid(path, sets, self.options(options))
        err = Console(stderr=True)
        for warning in report.warnings:
            err.print(Text.assemble(("warning:", "yellow"), f" {warning}"), highlight=False, soft_wrap=True)
        if report.array_id is not None:
            stdout_console().print(report.array_id, highlight=False, markup=False, soft_wrap=True)
        if options.wait and report.statuses:
            counts: dict[str, int] = {}
            for status in report.statuses.values():
                counts[status] = counts.get(status, 0) + 1
            err.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), highlight=False)
        if report.store_error is not None:
            err.print(Text.assemble(("error:", "red"), f" {' '.join(report.store_error.split())}"),
                      highlight=False, soft_wrap=True)
        return report.exit_code

    @contextmanager
    def session(self, expanded: Expanded, options: RunOptions) -> Iterator[Session]:
        """Rounds of jobs (``ablate tune``'s trials) are not dealt to Slurm yet: one line saying so."""
        raise UserInputError("--executor slurm submits whole grids (ablate run); rounds of jobs, as ablate "
                             "tune deals its trials, run on --executor local or ray")
        yield  # pragma: no cover - a generator, for contextmanager

    def alive(self, job_ids: Collection[str]) -> set[str] | None:
        """The job ids squeue lists as pending or running (none when Slurm is not installed here)."""
        return alive(job_ids)

    def states(self, job_ids: Collection[str]) -> dict[str, str] | None:
        """squeue's state of each job it knows (None when Slurm is not installed here)."""
        return job_states(job_ids) if job_ids and have_slurm() else None

    def cancel(self, job_ids: Collection[str]) -> list[str]:
        """``scancel`` of the arrays of the jobs still alive."""
        arrays = cancel_arrays(job_ids)
        return [f"Slurm job(s) {', '.join(arrays)}"] if arrays else []

    def job_name(self, job_id: str) -> str:
        return f"Slurm job {job_id}"


SLURM = Slurm()
