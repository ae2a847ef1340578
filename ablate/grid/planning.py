"""A grid file of any trainer -> its planned runs: the one entry every caller plans through (``ablate run``,
``plan``, ``--until-resolved``, ``tune``).

The file's trainer is the one whose section it has (``ablate.trainers.registry.file_trainer``): a file with
``trainer:`` is a command grid (``ablate.trainers.command.grid``), else a grid of ablate's own model
(``schema.load_grid`` + ``expand``). Both come back as ``PlannedRun``s, so the store, the executors and the
statistics take either without asking which: a command run's config is a ``CommandConfig``, which answers
what they ask of a config (its arm as ``variant``, its ``seed``, its ``train.devices``), and its axes are its
arm (``variant``), the values of the file's parameter axes and its seed.

At plan time a command grid is checked against the disk as well: ``cwd`` exists, the program is on PATH and
every placeholder names something (``render.check``, one line, exit 2); the code's identity is taken once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import ConfigError, UserInputError
from ablate.grid.expand import PlannedRun, expand
from ablate.grid.schema import Grid, load_grid
from ablate.runner.fingerprints import Fingerprints
from ablate.trainers.command.code import code_identity
from ablate.trainers.command.config import CommandConfig
from ablate.trainers.command.grid import (
    ARM,
    SEED,
    CommandGrid,
    CommandRun,
    expand_command_grid,
    load_command_grid,
)
from ablate.trainers.command.identity import Identifier
from ablate.trainers.command.params import canonical
from ablate.trainers.command.render import check
from ablate.trainers.command.spec import Objective
from ablate.trainers.registry import COMMAND, MODEL, TRAINERS, Trainer, text_trainer

VARIANT = "variant"  # the axis that names a run's arm, in every grid's planned runs


@dataclass(frozen=True)
class PlannedGrid:
    """A grid file planned: the grid (its name, text and source), its runs, the trainer that trains them and,
    for a trainer that names its own metrics, the objective (the metric the reports and ``--until-resolved``
    read when none is named) and the metrics it may report (None: not known before a run)."""

    grid: Grid
    planned: list[PlannedRun]
    trainer: Trainer
    objective: Objective | None = None
    command: CommandGrid | None = None

    @property
    def default_metric(self) -> str:
        """The metric a comparison reads when none is named: the objective, else held-out perplexity."""
        return self.objective.metric if self.objective is not None else "val_ppl"


def grid_trainer(path: str | Path) -> Trainer:
    """The trainer of the grid file at ``path`` (the model's when the file cannot be read: its own loader
    then says why)."""
    try:
        return text_trainer(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return TRAINERS[MODEL]


def grid_name(path: str | Path, sets: Sequence[str] = ()) -> str:
    """The name a grid file (of any trainer) registers under."""
    if grid_trainer(path).name == COMMAND:
        return load_command_grid(path).name
    return load_grid(path, sets).name


def grid_objective(path: str | Path) -> tuple[str | None, list[str] | None]:
    """A grid file's objective metric and the metrics its trainer names (a command grid's: a regex's groups;
    None when not known before a run); ``(None, None)`` for a grid of ablate's own model."""
    if grid_trainer(path).name != COMMAND:
        return None, None
    spec = load_command_grid(path).spec
    declared = spec.metrics.declared()
    return spec.objective.metric, sorted(declared) if declared is not None else None


def plan_grid(path: str | Path, sets: Sequence[str] = (), *, fingerprints: Fingerprints,
              extra: Sequence[Mapping[str, object]] = ()) -> PlannedGrid:
    """Load the grid at ``path`` and plan its runs; ``sets`` are ``--set`` overrides of its base and ``extra``
    runs beyond the file's (the seeds ``--until-resolved`` adds: axis values and a seed each)."""
    trainer = grid_trainer(path)
    if trainer.name == COMMAND:
        if sets:
            raise UserInputError(f"{path}: --set is for grids of ablate's own model; a command grid's "
                                 "parameters are its base and its axes: edit the file")
        return _command(path, extra)
    grid = load_grid(path, sets)
    if extra:
        grid = dataclasses.replace(grid, include=(*grid.include, *map(dict, extra)))
    return PlannedGrid(grid, expand(grid, fingerprints=fingerprints), trainer)


def _command(path: str | Path, extra: Sequence[Mapping[str, object]]) -> PlannedGrid:
    cg = load_command_grid(path)
    folder = Path(path).parent.absolute()
    for cell in cg.cells.values():
        check(cg.spec, folder, cell.params, source=cg.source)
    code = code_identity(cg.code_dir, cg.spec.code)
    runs = expand_command_grid(cg, code=code)
    if extra:
        seen = {r.run_id for r in runs}
        runs += [r for r in _extra_runs(cg, code.value, extra) if r.run_id not in seen]
    grid = Grid(name=cg.name, base=dict(cg.base), axes=(), source=cg.source, text=cg.text)
    planned = [_planned(cg, folder, code.value, r) for r in runs]
    return PlannedGrid(grid, planned, TRAINERS[COMMAND], cg.spec.objective, cg)


def _planned(cg: CommandGrid, folder: Path, code: str, run: CommandRun) -> PlannedRun:
    config = CommandConfig.model_construct(variant=run.arm, seed=run.seed, params=run.params,
                                           cell=run.cell, spec=cg.spec, grid_dir=str(folder), code=code)
    return PlannedRun(run.run_id, config, {VARIANT: run.arm, **run.cell, SEED: run.seed}, None, None,  # type: ignore[arg-type]  # a command run has no parameter count
                      stem_id=run.stem_id)


def _extra_runs(cg: CommandGrid, code: str, extra: Sequence[Mapping[str, object]]) -> list[CommandRun]:
    """The runs of ``extra`` entries (``{variant: arm, <axis>: value, seed: s}``): a cell of the grid at a
    seed it may not list."""
    ids = Identifier(cg.spec, code).ids
    by_point = {(cell.arm, canonical(cell.values)): cell for cell in cg.cells.values()}
    out = []
    for entry in extra:
        values = {k: v for k, v in entry.items() if k not in (VARIANT, ARM, SEED)}
        arm = str(entry.get(VARIANT, entry.get(ARM)))
        cell = by_point.get((arm, canonical(values)))  # type: ignore[arg-type]  # values as the file wrote them
        seed = entry.get(SEED)
        if cell is None or not isinstance(seed, int):
            raise ConfigError(f"no cell of the grid is {dict(entry)!r}", where=cg.source)
        run_id, stem = ids(cell.params_json, seed)
        out.append(CommandRun(run_id, stem, cell.arm, cell.values, seed, cell.params))
    return out
