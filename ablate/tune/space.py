"""What a tuning study searches, pure: the search space, the grid's cells (one study each), study names and
the config of a trial.

A **cell** is a group of a grid's runs that differ only in their seed and in the tuned parameter: with
``grid: {variant: [a, b], seed: [0, 1], train.lr: [...]}`` and ``--param train.lr`` there are two cells, ``a``
and ``b``. Each cell gets one study; its trials are the cell's first run (its first seed) with the parameter
replaced by the sampled value. ``--then-run`` later runs every seed of the cell at the best value.

The tuned parameter is a field of ablate's own config (``train.lr``) or, on a command grid, a parameter of the
command (``lr``, ``optim.lr``: ``command_space`` checks it, ``with_param`` sets it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from pydantic import ValidationError

from ablate.config import RunConfig
from ablate.errors import ConfigError, one_of
from ablate.grid.ids import canonical
from ablate.grid.paths import assign, describe, explain, field_type, unwrap_optional
from ablate.trainers.command.config import CommandConfig
from ablate.trainers.command.params import flatten
from ablate.tune.protocol import EDGE, edge_of

if TYPE_CHECKING:
    from ablate.grid import PlannedRun

STUDY_PREFIX = "tune"
METRICS = ("val_ppl", "train_loss")  # and ppl/<held-out set>


@dataclass(frozen=True)
class SearchSpace:
    """The tuned parameter (a dotted config path), its range, and whether it is searched on a log scale.

    ``integer`` None: ``param`` is a field of ablate's own config, checked here; True or False: a command's
    parameter, checked by ``command_space``, whole numbers or not."""

    param: str
    low: float
    high: float
    log: bool = False
    integer: bool | None = None

    def __post_init__(self) -> None:
        if self.integer is None:
            try:
                tp = unwrap_optional(field_type(self.param))
            except ValueError as exc:
                raise ConfigError(str(exc), where="--param") from None
            if self.param == "seed" or tp not in (int, float):
                raise ConfigError(f"{self.param!r} is not a numeric field that can be tuned (it is "
                                  f"{getattr(tp, '__name__', tp)}); e.g. train.lr, train.weight_decay, "
                                  "train.warmup_frac", where="--param")
        if not self.low < self.high:
            raise ConfigError(f"--low {self.low:g} must be below --high {self.high:g}", where="--low")
        if self.log and self.low <= 0:
            raise ConfigError(f"a log scale needs --low above 0, got {self.low:g}", where="--low")

    @property
    def is_int(self) -> bool:
        if self.integer is not None:
            return self.integer
        return unwrap_optional(field_type(self.param)) is int

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution of the parameter."""
        if self.is_int:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(float(self.low), float(self.high), log=self.log)

    def as_attrs(self) -> dict[str, str | float | bool]:
        return {"param": self.param, "low": self.low, "high": self.high, "log": self.log}

    def edge_warning(self, cell: str, best: float) -> str | None:
        """One line when a cell's ``best`` value lies at an end of the range (``protocol.edge_of``), where the
        best may lie beyond what was searched; else None.

        >>> SearchSpace("train.lr", 1e-4, 0.03, log=True).edge_warning("baseline", 0.0286)[:65]
        'baseline: the best train.lr, 0.0286, lies at the top of the range'
        """
        edge = edge_of(best, self.low, self.high, log=self.log)
        if edge is None:
            return None
        end, flag, bound = ("top", "--high", self.high) if edge == "high" else ("bottom", "--low", self.low)
        scale = " on the log scale" if self.log else ""
        return (f"{cell}: the best {self.param}, {best:.3g}, lies at the {end} of the range searched ({flag} "
                f"{bound:g}; within {EDGE:.0%} of its width{scale}): the best may lie beyond it. Search a "
                "range that reaches past it (a study keeps its range: tune a copy of the grid under another "
                "name)")


@dataclass(frozen=True)
class TuneCell:
    """The runs of a grid that differ only in seed and in the tuned parameter (one per seed, grid order)."""

    key: str  # a short hash of the config without seed and parameter: the study's identity
    label: str  # what the report calls the cell: the variant, then the other axes that vary
    axes: dict[str, object]  # the cell's axis values, without seed and the parameter
    runs: tuple[PlannedRun, ...]

    @property
    def base(self) -> PlannedRun:
        """The run whose config the trials start from: the cell's first run (its first seed)."""
        return self.runs[0]

    @property
    def variant(self) -> str:
        return self.base.config.variant

    @property
    def seeds(self) -> list[int]:
        return [r.config.seed for r in self.runs]


def check_metric(metric: str, config: RunConfig) -> str:
    """``metric`` when the runs measure it: ``val_ppl``, ``train_loss`` or ``ppl/<held-out set>``."""
    sets = [f"ppl/{name}" for name in config.data.heldout]
    if metric in METRICS or metric in sets:
        return metric
    raise ConfigError(one_of(metric, [*METRICS, *sets], what="metric"), where="--metric")


def _identity(config: RunConfig | CommandConfig, param: str) -> str:
    dump = canonical(config.model_dump(mode="json"))
    if isinstance(config, CommandConfig):  # the parameter among the command's, and among the axes' values
        cell = {k: v for k, v in dump["cell"].items() if k != param}
        dump = {**dump, "seed": None, "params": assign(dump["params"], param, None), "cell": cell}
    else:
        dump = assign({**dump, "seed": None}, param, None)
    text = json.dumps(dump, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _label(variant: str, axes: dict[str, object]) -> str:
    others = [f"{k}={v}" for k, v in axes.items() if k != "variant"]
    return ", ".join([variant, *others])


def cells_of(planned: Sequence[PlannedRun], param: str) -> list[TuneCell]:
    """The grid's runs grouped into cells, in grid order; within a cell one run per seed (the first)."""
    groups: dict[str, list[PlannedRun]] = {}
    for run in planned:
        groups.setdefault(_identity(run.config, param), []).append(run)
    cells = []
    for key, runs in groups.items():
        per_seed: dict[int, PlannedRun] = {}
        for run in runs:
            per_seed.setdefault(run.config.seed, run)
        base = runs[0]
        axes = {k: v for k, v in base.axes.items() if k not in ("seed", param)}
        cells.append(TuneCell(key, _label(base.config.variant, axes), axes, tuple(per_seed.values())))
    return cells


def study_name(grid: str, param: str, cell: TuneCell) -> str:
    """``<grid>/tune/<param>/<cell label>#<cell key>``: unique per grid, parameter and cell."""
    return f"{grid}/{STUDY_PREFIX}/{param}/{cell.label}#{cell.key}"


def with_value(config: RunConfig, param: str, value: float | int, *,
               eval_every: int | None = None) -> RunConfig:
    """``config`` with ``param`` set to ``value`` (and ``eval.every`` when given), validated."""
    dump = assign(config.model_dump(mode="json"), param, value)
    if eval_every is not None:
        dump = assign(dump, "eval.every", eval_every)
    try:
        return RunConfig.model_validate(dump)
    except ValidationError as exc:
        raise ConfigError(describe(*explain(exc)), where=f"{param}={value!r}") from None


def command_space(param: str, low: float, high: float, log: bool, planned: Sequence[PlannedRun]
                  ) -> SearchSpace:
    """The search space of a command grid's parameter ``param`` (dotted: ``lr``, ``optim.lr``): a number in
    every run's parameters (whole numbers everywhere: searched as whole numbers), never the seed."""
    configs: list[object] = [run.config for run in planned]
    found = [flatten(c.params).get(param) for c in configs if isinstance(c, CommandConfig)]
    numbers = [v for v in found if isinstance(v, int | float) and not isinstance(v, bool)]
    if not found or len(numbers) < len(found):
        first = planned[0].config
        assert isinstance(first, CommandConfig)  # the caller plans a command grid
        names = sorted(k for k, v in flatten(first.params).items()
                       if isinstance(v, int | float) and not isinstance(v, bool))
        what = ("it is not a number in every run" if any(v is not None for v in found) else
                "the command has no such parameter")
        raise ConfigError(f"cannot tune {param!r}: {what}; {one_of(param, names, what='parameter')} (a "
                          "number of the grid's base, an arm or an axis)", where="--param")
    return SearchSpace(param, low, high, log, integer=all(isinstance(v, int) for v in numbers))


def with_param(config: CommandConfig, param: str, value: float | int) -> CommandConfig:
    """A command run's ``config`` with its parameter ``param`` set to ``value`` (and the grid's axis of that
    name, when it has one)."""
    params = assign(config.params, param, value)
    cell = {**config.cell, param: value} if param in config.cell else config.cell
    return config.model_copy(update={"params": params, "cell": cell})
