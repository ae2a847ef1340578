"""The planner of command grids (a grid file with ``trainer:``: ``ablate.trainers.command.grid``), named by
the command trainer's registry entry: its runs as ``PlannedRun``s whose config is a ``CommandConfig``.

At plan time a command grid is checked against the disk as well: ``cwd`` exists, the program is on PATH and
every placeholder names something (``render.check``, one line, exit 2); the code's identity is taken once.
``--set`` is refused: a command grid's parameters are its file's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from ablate.errors import ConfigError, UserInputError
from ablate.grid.expand import PlannedRun
from ablate.grid.planning import VARIANT, PlannedGrid
from ablate.grid.schema import Grid
from ablate.runner.fingerprints import Fingerprints
from ablate.trainers.command.code import code_identity
from ablate.trainers.command.config import CommandConfig, columns, command_ids
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
from ablate.trainers.command.run import resumes
from ablate.trainers.registry import COMMAND, TRAINERS


class CommandPlanner:
    """Grid files of a training command."""

    def plan(self, path: str | Path, sets: Sequence[str], *, fingerprints: Fingerprints,
             extra: Sequence[Mapping[str, object]]) -> PlannedGrid:
        if sets:
            raise UserInputError(f"{path}: --set is for grids of ablate's own model; a command grid's "
                                 "parameters are its base and its axes: edit the file")
        return _command(path, extra)

    def name(self, path: str | Path, sets: Sequence[str]) -> str:
        return load_command_grid(path).name

    def objective(self, path: str | Path) -> tuple[str | None, list[str] | None]:
        spec = load_command_grid(path).spec
        declared = spec.metrics.declared()
        return spec.objective.metric, sorted(declared) if declared is not None else None

    def columns(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return columns(dict(config))

    def ids(self, config: Mapping[str, Any]) -> tuple[str, str] | None:
        try:
            return command_ids(CommandConfig.model_validate(dict(config)))
        except (ValidationError, ValueError):
            return None

    def resumes(self, config: BaseModel, run_dir: Path, run_id: str) -> bool:
        return resumes(cast(CommandConfig, config), run_dir, run_id)

    def stale_line(self, planned: BaseModel, stored: Mapping[str, Any], old: str) -> str:
        code = cast(CommandConfig, planned).code
        return f"new: the code changed since run {old} ({stored.get('code') or '?'} -> {code})"

    def check_inputs(self, runs: Sequence[PlannedRun], source: str, *, strict: bool) -> list[str]:
        return []  # what a command needs of the disk is checked as its grid is planned (render.check)


COMMAND_PLANNER = CommandPlanner()


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
