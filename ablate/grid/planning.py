"""A grid file of any trainer -> its planned runs: the one entry every caller plans through (``ablate run``,
``plan``, ``--until-resolved``, ``tune``).

The file's trainer is the one whose section it has (``ablate.trainers.registry.file_trainer``), and the
trainer names its planner (``Trainer.planner``, ``module:attribute``, imported when chosen, as the
executors' objects are): ``model_planning.MODEL_PLANNER`` for ablate's own grid files (``schema.load_grid``
+ ``expand``), ``command_planning.COMMAND_PLANNER`` for a file with ``trainer:``. Both give ``PlannedRun``s,
so the store, the executors and the statistics take either without asking which: a command run's config is
a ``CommandConfig``, which answers what they ask of a config (its arm as ``variant``, its ``seed``, its
``train.devices``), and its axes are its arm (``variant``), the values of the file's parameter axes and its
seed. A third trainer brings its own planner: an object with ``plan``, ``name`` and ``objective`` for its
files, and ``columns``, ``ids``, ``resumes`` and ``stale_line`` for its runs (``GridPlanner``): the store, the
opening and ``ablate plan`` ask the planner of a run's trainer (``run_planner``) and never which trainer it
is."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import BaseModel

from ablate.grid.expand import PlannedRun
from ablate.grid.schema import Grid
from ablate.runner.fingerprints import Fingerprints
from ablate.trainers.command.grid import CommandGrid
from ablate.trainers.command.spec import Objective
from ablate.trainers.registry import KEY, MODEL, TRAINERS, Trainer, text_trainer, trainer_of

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


class GridPlanner(Protocol):
    """What a trainer's grid files are to the rest of ablate."""

    def plan(self, path: str | Path, sets: Sequence[str], *, fingerprints: Fingerprints,
             extra: Sequence[Mapping[str, object]]) -> PlannedGrid:
        """The file's runs (``sets``: ``--set`` overrides; ``extra``: runs beyond the file's, axis values
        and a seed each: the seeds ``--until-resolved`` adds)."""
        ...

    def name(self, path: str | Path, sets: Sequence[str]) -> str:
        """The name the grid registers under."""
        ...

    def objective(self, path: str | Path) -> tuple[str | None, list[str] | None]:
        """The objective metric and the metrics the trainer names (None: not known before a run);
        ``(None, None)`` when the trainer's metrics are ablate's declared ones."""
        ...

    def columns(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The ``runs`` columns of one of its stored configs (``ablate.store.schema.Run``): ``variant``,
        ``seed``, ``lr``, ``trainer``, ``trainer_params`` and the model's own (``model_preset``, ``n_layers``,
        ``d_model``, ``train_steps``, ``batch_size``, ``seq_len``: None where it has none)."""
        ...

    def ids(self, config: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(run id, stem id)`` of a stored config as this version names it; None for a config it cannot
        read (``ablate db rehash`` says which)."""
        ...

    def resumes(self, config: BaseModel, run_dir: Path, run_id: str) -> bool:
        """Would the planned run at ``run_dir`` resume if it started now (a failed run is then retried)?"""
        ...

    def stale_line(self, planned: BaseModel, stored: Mapping[str, Any], old: str) -> str:
        """What ``ablate plan`` says of a planned run whose stem a stored run ``old`` of another config has:
        what changed since (``stale: ...`` or ``new: ...``)."""
        ...

    def check_inputs(self, runs: Sequence[PlannedRun], source: str, *, strict: bool) -> list[str]:
        """What ``ablate run`` checks of the runs' inputs before anything is made (the model's: tokenizers
        and data): ``strict`` (``ablate run``), a ``ConfigError`` for what cannot work; else (``ablate
        plan``: a cluster's grid may plan here) each such problem as a warning line. Returns the warnings
        either way."""
        ...


def grid_trainer(path: str | Path) -> Trainer:
    """The trainer of the grid file at ``path`` (the model's when the file cannot be read: its own loader
    then says why)."""
    try:
        return text_trainer(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return TRAINERS[MODEL]


def planner(trainer: Trainer) -> GridPlanner:
    """The planner a trainer names (imported now)."""
    return _planner_at(trainer.planner)


@functools.cache
def _planner_at(path: str) -> GridPlanner:
    """The object at ``module:attribute`` (once per path: the store asks it of every run it registers)."""
    module, _, attribute = path.partition(":")
    return cast(GridPlanner, getattr(importlib.import_module(module), attribute))


def run_planner(config: Mapping[str, Any] | BaseModel) -> GridPlanner:
    """The planner of the trainer that made a run (its stored config, or a planned one)."""
    if isinstance(config, BaseModel):
        config = config.model_dump(mode="json", include={KEY})
    return planner(trainer_of(config))


def grid_name(path: str | Path, sets: Sequence[str] = ()) -> str:
    """The name a grid file (of any trainer) registers under."""
    return planner(grid_trainer(path)).name(path, sets)


def grid_objective(path: str | Path) -> tuple[str | None, list[str] | None]:
    """A grid file's objective metric and the metrics its trainer names (a command grid's: a regex's groups;
    None when not known before a run); ``(None, None)`` for a grid of ablate's own model."""
    return planner(grid_trainer(path)).objective(path)


def plan_grid(path: str | Path, sets: Sequence[str] = (), *, fingerprints: Fingerprints,
              extra: Sequence[Mapping[str, object]] = ()) -> PlannedGrid:
    """Load the grid at ``path`` and plan its runs; ``sets`` are ``--set`` overrides of its base and ``extra``
    runs beyond the file's (the seeds ``--until-resolved`` adds: axis values and a seed each)."""
    return planner(grid_trainer(path)).plan(path, sets, fingerprints=fingerprints, extra=extra)
