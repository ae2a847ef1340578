"""The plan of ``--until-resolved``: the seeds each comparison has at each look (``Planner``), and the most
runs the plan may add (``plan_until_resolved``, ``most_line``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import UserInputError
from ablate.grid.planning import grid_objective, plan_grid
from ablate.resolve.cells import (
    Axes,
    PairedCells,
    UntilResolved,
    cells,
    comparisons,
    extra_runs,
    first_seeds,
)
from ablate.runner.fingerprints import Fingerprints
from ablate.stats.sequential import looks

RunIds = dict[str, dict[int, str]]  # a cell (``cells.cell_key``) -> seed -> run id


@dataclass
class Planner:
    """The seeds each comparison has at each look: the file's first ``n0``, then new seeds after the grid's
    largest, the same ones for every open comparison."""

    comps: list[PairedCells]
    first: list[int]
    plan: list[int]
    next_seed: int
    most_runs: int = 0  # the runs the plan may add beyond the file's
    grid: str = ""  # the grid's name

    @classmethod
    def make(cls, comps: list[PairedCells], grid_cells: RunIds, spec: UntilResolved, *, source: str
             ) -> Planner:
        first = first_seeds(comps, grid_cells)
        if len(first) < 2:
            raise UserInputError(f"{source}: --until-resolved needs at least 2 seeds that every compared "
                                 f"pair has in the grid (a seed axis), got {len(first)}")
        if spec.max_seeds < len(first):
            raise UserInputError(f"--max-seeds {spec.max_seeds} is below the grid's {len(first)} seeds")
        largest = max(s for runs in grid_cells.values() for s in runs)
        return cls(comps, first, looks(len(first), spec.round, spec.max_seeds), largest + 1)

    def seeds(self, n: int) -> list[int]:
        """The seeds of a comparison that has ``n`` of them."""
        return [*self.first, *range(self.next_seed, self.next_seed + n - len(self.first))][:n]

    def most(self) -> list[Axes]:
        """The include entries of every seed the plan may add (every comparison to ``plan[-1]`` seeds)."""
        added = [s for s in self.seeds(self.plan[-1]) if s not in self.first]
        return extra_runs(self.comps, [added] * len(self.comps))


def plan_until_resolved(path: str | Path, sets: Sequence[str], spec: UntilResolved, *, home: Path
                        ) -> tuple[Planner, RunIds]:
    """The comparisons, their planned looks and the run id of every cell's seed the plan may reach (one
    expansion of the grid with every seed it may add)."""
    spec = spec.for_grid(*grid_objective(path))  # its metric checked against the grid's trainer
    fingerprints = Fingerprints.for_home(Path(home))
    first = plan_grid(path, sets, fingerprints=fingerprints)
    grid, planned = first.grid, first.planned
    grid_cells = cells(planned)
    comps = comparisons(planned, spec, source=grid.source)
    planner = Planner.make(comps, grid_cells, spec, source=grid.source)
    planner.grid = grid.name
    widest = plan_grid(path, sets, fingerprints=fingerprints, extra=planner.most()).planned
    planner.most_runs = len(widest) - len(planned)
    return planner, cells(widest)


def most_line(planner: Planner) -> str:
    """``--until-resolved: 2 comparisons, looks at n=3, 5, 7, 9, 10 seeds; at most 28 more runs``."""
    m, most = len(planner.comps), planner.most_runs
    return (f"--until-resolved: {m} comparison{'s' * (m != 1)}, looks at "
            f"n={', '.join(map(str, planner.plan))} seeds; at most {most} more run{'s' * (most != 1)}")
