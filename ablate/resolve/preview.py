"""``ablate plan``: what ``ablate run`` would do with a grid, without running it (``preview``): its runs and
their status in the store, the checks ``ablate run`` makes first, the workers it would start here, and with
``--until-resolved`` the looks and the most runs they may add."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ablate.execute import devices as machine
from ablate.execute.devices import Slot, crowding, describe, local_slots
from ablate.execute.fit import FLAG, check_memory
from ablate.grid import Grid, PlannedRun
from ablate.grid.command_view import command_plan_json, command_plan_rows
from ablate.grid.planning import grid_objective, plan_grid, planner
from ablate.grid.view import plan_imports, plan_json, plan_rows
from ablate.resolve.cells import UntilResolved
from ablate.resolve.plan import most_line, plan_until_resolved
from ablate.runner.fingerprints import Fingerprints
from ablate.store.plan_status import statuses
from ablate.trainers.registry import MODEL

TRAINED = ("done", "diverged")  # what `ablate run` does not train again
Table = tuple[str, list[tuple[str, str]], list[list[str]]]  # a title, (column, justify)s, rows of cells


@dataclass
class Preview:
    """A grid planned: its ``runs`` and each one's ``status`` in the store, the local ``slots`` ``ablate run``
    would start for those still to train, and ``most``: ``--until-resolved``'s looks line (None without
    it)."""

    grid: Grid
    runs: list[PlannedRun]
    status: dict[str, str]
    slots: list[Slot] = field(default_factory=list)
    most: str | None = None
    model: bool = True  # the runs are ablate's own model's (else a training command's)

    def json(self) -> dict[str, object]:
        """``ablate plan --format json``: the runs, then the workers, one a line."""
        runs = plan_json if self.model else command_plan_json
        return {**runs(self.grid.name, self.runs, self.status),
                "workers": [{"device": s.device, "threads": s.threads} for s in self.slots]}

    def table(self) -> Table:
        """``ablate plan``'s table: a run a row."""
        if not self.model:
            return command_plan_rows(self.grid.name, self.runs, self.status)
        return plan_rows(self.grid.name, self.runs, self.status, matched=self.grid.match_params,
                         ladder=self.grid.ladder is not None)

    def imports(self) -> list[str]:
        """The plugin arms' modules the runs import."""
        return plan_imports(self.runs) if self.model else []

    def workers(self) -> tuple[str, str | None]:
        """The line on the workers ``ablate run`` would start here, and a warning when they crowd the
        CPUs."""
        cpus = machine.usable_cpus()  # through the module: a test sets this machine's CPUs there
        workers = describe(self.slots) if self.slots else (
            f"no workers: nothing to train (every run {' or '.join(TRAINED)})")
        line = f"ablate run here: {workers} ({cpus} CPU{'s' * (cpus != 1)} usable; --jobs, --threads)"
        return line, crowding(self.slots, cpu_count=cpus) if self.slots else None


def preview(path: Path, sets: Sequence[str], *, home: Path, store: str | None, device_memory: float | None,
            jobs: int | None, devices: str | None, threads: int | None, until: UntilResolved | None,
            warn: Callable[[str], None]) -> Preview:
    """Plan the grid at ``path`` as ``ablate run`` would (see the module docstring). What ``ablate run``
    would refuse but a plan may show (a tokenizer or data not on this machine: a cluster's grid) goes to
    ``warn``; a run that does not fit ``device_memory`` bytes per device, or a bad ``--until-resolved``,
    raises."""
    planned = plan_grid(path, sets, fingerprints=Fingerprints.for_home(home))
    grid, runs, model = planned.grid, planned.planned, planned.trainer.name == MODEL
    for line in planner(planned.trainer).check_inputs(runs, grid.source, strict=False):
        warn(line)
    status = statuses(runs, store=store, home=home)
    if device_memory is not None:
        check_memory(runs, status, device_memory, FLAG)
    out = Preview(grid, runs, status, _workers(runs, status, jobs=jobs, devices=devices, threads=threads),
                  model=model)
    if until is not None:  # the looks and the most runs they may add: checked before anything is printed
        until = until.for_grid(*grid_objective(path))
        out.most = most_line(plan_until_resolved(path, sets, until, home=home)[0])
    return out


def _workers(runs: Sequence[PlannedRun], status: dict[str, str], *, jobs: int | None, devices: str | None,
             threads: int | None) -> list[Slot]:
    """The local workers ``ablate run`` would start for the runs still to train (never more than them)."""
    todo = sum(status.get(r.run_id) not in TRAINED for r in runs)
    per_run = max((r.config.train.devices for r in runs), default=1)
    return local_slots(jobs=jobs, devices=devices, threads=threads, per_run=per_run)[:todo] if todo else []
