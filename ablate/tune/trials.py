"""What a trial is, for each trainer ``ablate tune`` can search: the parameter it tunes, the metric and its
direction, the config and store row of a trial's run, the job that trains it and what that job reports to
the pruner. ``trials_for(planned grid, metric, pruner)`` picks one.

- ``ModelTrials``, ablate's own model: a field of its config (``train.lr``); the metric ``val_ppl`` (default),
  ``train_loss`` or ``ppl/<held-out set>``, minimized; the job ``ablate.tune.job:train_trial`` reports the
  run's periodic evaluations through Lightning (when the grid does not evaluate during training and a pruner
  is on, trials evaluate every ``steps // 10`` steps, so their run ids differ from the grid's own runs).
- ``CommandTrials``, a command grid: a parameter of the command (``lr``, ``optim.lr``); the metric the
  objective unless ``--metric`` names another the command reports, maximized when it is the objective and
  the objective is higher-is-better; a trial's run is the cell's with that parameter set (its id covers the
  parameters, so each value is a run of its own); the job ``ablate.tune.command_trial:command_trial``
  reports every value of the metric the command prints, at the command's own steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ablate.config import RunConfig
from ablate.errors import ConfigError, one_of
from ablate.grid import run_id
from ablate.trainers.command.config import CommandConfig, command_ids
from ablate.tune.protocol import worst
from ablate.tune.space import SearchSpace, TuneCell, check_metric, command_space, with_param, with_value

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ablate.grid import PlannedRun
    from ablate.grid.planning import PlannedGrid

TRIAL_JOB = "ablate.tune.job:train_trial"
COMMAND_TRIAL_JOB = "ablate.tune.command_trial:command_trial"
DEFAULT_METRIC = "val_ppl"  # ablate's own model's, when --metric names none

TrialConfig = RunConfig | CommandConfig


class Trials(Protocol):
    """A trainer's trials (see the module docstring)."""

    @property
    def job_fn(self) -> str:
        """The job function that trains a trial's run."""
        ...

    @property
    def metric(self) -> str:
        """What the studies optimize."""
        ...

    @property
    def higher(self) -> bool:
        """Whether they maximize it."""
        ...

    def space(self, param: str, low: float, high: float, log: bool) -> SearchSpace:
        """The search space of ``param``, checked against the grid."""
        ...

    def resources(self, cell: TuneCell) -> tuple[int, int | str]:
        """The pruner's smallest and largest resource, in steps (``auto``: Optuna's guess)."""
        ...

    def config(self, cell: TuneCell, param: str, value: float | int) -> TrialConfig:
        """The config of the cell's trial at ``value``."""
        ...

    def run_id(self, config: TrialConfig) -> str: ...

    def row(self, cell: TuneCell, config: TrialConfig, param: str, value: float | int) -> dict[str, object]:
        """The store row that registers the trial's run (``config``, at ``param=value``) under
        ``<grid>/tune``."""
        ...

    def spec(self, cell: TuneCell, config: TrialConfig) -> dict[str, object] | None:
        """What the trial's job needs to report to its pruner, besides the study and the trial (None: it
        cannot report, and trains as a plain run)."""
        ...


@dataclass(frozen=True)
class ModelTrials:
    """Trials of a grid of ablate's own model."""

    planned: Sequence[PlannedRun]
    metric: str
    pruner: str
    job_fn: str = TRIAL_JOB
    higher: bool = False

    def space(self, param: str, low: float, high: float, log: bool) -> SearchSpace:
        return SearchSpace(param, low, high, log)

    def eval_every(self, cell: TuneCell) -> int | None:
        """How often a trial evaluates, when the grid does not and a pruner needs it to."""
        cfg = _model(cell.base.config)
        if cfg.eval.every or self.pruner == "none":
            return None
        return max(1, cfg.train.steps // 10)

    def resources(self, cell: TuneCell) -> tuple[int, int | str]:
        cfg = _model(cell.base.config)
        return self.eval_every(cell) or cfg.eval.every or 1, cfg.train.steps

    def config(self, cell: TuneCell, param: str, value: float | int) -> RunConfig:
        return with_value(_model(cell.base.config), param, value, eval_every=self.eval_every(cell))

    def run_id(self, config: TrialConfig) -> str:
        return run_id(_model(config))

    def row(self, cell: TuneCell, config: TrialConfig, param: str, value: float | int) -> dict[str, object]:
        same_model = not param.startswith("model.")  # else ingest fills the parameter counts in
        return {"run_id": self.run_id(config), "config": config, "axes": {**cell.axes, param: value},
                "params": cell.base.params if same_model else None,
                "added_params": cell.base.added_params if same_model else None}

    def spec(self, cell: TuneCell, config: TrialConfig) -> dict[str, object] | None:
        cfg = _model(config)
        every = self.eval_every(cell) or cfg.eval.every
        if not every:
            return None
        return {"pruner": self.pruner, "min_resource": every, "max_resource": cfg.train.steps,
                "monitor": "loss" if self.metric == "train_loss" else "val_ppl"}


@dataclass(frozen=True)
class CommandTrials:
    """Trials of a command grid."""

    planned: Sequence[PlannedRun]
    metric: str
    pruner: str
    higher: bool = False
    job_fn: str = COMMAND_TRIAL_JOB

    def space(self, param: str, low: float, high: float, log: bool) -> SearchSpace:
        return command_space(param, low, high, log, self.planned)

    def resources(self, cell: TuneCell) -> tuple[int, int | str]:
        return 1, "auto"  # a command's steps are its own: Hyperband reads them off the first finished trial

    def config(self, cell: TuneCell, param: str, value: float | int) -> CommandConfig:
        return with_param(_command(cell.base.config), param, value)

    def run_id(self, config: TrialConfig) -> str:
        return command_ids(_command(config))[0]

    def row(self, cell: TuneCell, config: TrialConfig, param: str, value: float | int) -> dict[str, object]:
        rid, stem = command_ids(_command(config))
        return {"run_id": rid, "stem_id": stem, "config": config, "axes": {**cell.axes, param: value},
                "params": None, "added_params": None}

    def spec(self, cell: TuneCell, config: TrialConfig) -> dict[str, object] | None:
        lo, hi = self.resources(cell)
        return {"pruner": self.pruner, "min_resource": lo, "max_resource": hi, "metric": self.metric,
                "worst": worst(higher=self.higher)}


def trials_for(plan: PlannedGrid, metric: str | None, pruner: str) -> Trials:
    """The trials of the planned grid ``plan``, tuning ``metric`` (None: the grid's default)."""
    if plan.command is None or plan.objective is None:
        first = _model(plan.planned[0].config)
        return ModelTrials(plan.planned, check_metric(metric or DEFAULT_METRIC, first), pruner)
    objective = plan.objective
    chosen = metric or objective.metric
    declared = plan.command.spec.metrics.declared()
    if declared is not None and chosen not in declared:
        raise ConfigError(f"{one_of(chosen, declared, what='metric')} (what the command reports: the "
                          "regex's groups)", where="--metric")
    return CommandTrials(plan.planned, chosen, pruner,
                         higher=chosen == objective.metric and objective.better == "higher")


def _model(config: object) -> RunConfig:
    assert isinstance(config, RunConfig), type(config)  # a trial of a model grid
    return config


def _command(config: object) -> CommandConfig:
    assert isinstance(config, CommandConfig), type(config)  # a trial of a command grid
    return config
