"""The local executor: a pool of long-lived worker processes on this machine (``runner.LocalRunner``).

``LOCAL`` is the object its registry entry names (``ablate.execute.registry``): its runs hold no job (the
run directory's lock says who trains them), so it has nothing to ask about or cancel.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ablate.execute.devices import Slot, crowding, describe, local_slots, usable_cpus
from ablate.execute.executor import TRAIN_JOB, Expanded, RunOptions
from ablate.execute.fit import require_fit
from ablate.execute.grid_run import run_and_report
from ablate.execute.lifecycle import Lifecycle
from ablate.execute.local.options import ABOUT
from ablate.execute.local.runner import LocalRunner


@dataclass
class LocalSession:
    """The worker slots of this machine for one grid (``local_slots``)."""

    slots: list[Slot]
    jobs_per_device: int = 1
    remote: bool = False

    @property
    def width(self) -> int:
        return len(self.slots)

    def describe(self, jobs: int) -> tuple[str, str | None]:
        used = self.slots[:jobs]
        return describe(used), crowding(used, cpu_count=usable_cpus(), jobs_per_device=self.jobs_per_device)

    def runner(self, lifecycle: Lifecycle, *, title: str, job_fn: str = TRAIN_JOB,
               console: Console | None = None, progress_every_s: float | None = None,
               jobs: int | None = None) -> LocalRunner:
        used = self.slots if jobs is None else self.slots[:max(1, jobs)]  # never more workers than jobs
        return LocalRunner(used, lifecycle, title=title, console=console, job_fn=job_fn,
                           progress_every_s=progress_every_s)


class Local:
    """``--executor local`` (the default)."""

    name = "local"
    about = ABOUT

    def run(self, path: str | Path, sets: Sequence[str], options: RunOptions) -> int:
        return run_and_report(path, sets, options)

    @contextmanager
    def session(self, expanded: Expanded, options: RunOptions) -> Iterator[LocalSession]:
        """This machine's slots, after the memory check against its GPU (or ``--device-memory``)."""
        require_fit(expanded.planned, options.device_memory, local=True, home=Path(options.home),
                    store=options.store)
        per_run = max((p.config.train.devices for p in expanded.planned), default=1)  # GPUs per worker
        yield LocalSession(local_slots(devices=options.devices, jobs=options.jobs,
                                       jobs_per_device=options.jobs_per_device, threads=options.threads,
                                       per_run=per_run), options.jobs_per_device)

    def alive(self, job_ids: Collection[str]) -> set[str] | None:
        return None  # no jobs: the run directory's lock and the heartbeat tell

    def states(self, job_ids: Collection[str]) -> dict[str, str] | None:
        return None

    def cancel(self, job_ids: Collection[str]) -> list[str]:
        return []

    def job_name(self, job_id: str) -> str:
        return f"local process {job_id}"


LOCAL = Local()
