"""A third trainer, written as the registry says one is written: one module and one registry entry
(``ENTRY``), nothing else of ablate changed. It trains a Python function: ``fit`` below, a noisy linear
regression by gradient descent whose ``noise`` and ``lr`` the arms set. (Not collected by pytest: the test
of the seam is tests/unit/trainers/test_third_trainer.py.)

Its grid file::

    name: fn
    function: third_trainer:fit                 # the section that chooses this trainer
    objective: {metric: val_loss, better: lower}
    arms: {baseline: {noise: 0.5}, clean: {noise: 0.1}}
    seeds: [0, 1, 2]

The parts ablate asks of a trainer: its config model (``FunctionConfig``: an arm as ``variant``, a ``seed``,
``train.devices``), its planner (``PLANNER``: the grid files and the stored runs, ``GridPlanner``) and its job
function (``train``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ablate.config.yamlfile import read_yaml
from ablate.errors import ConfigError
from ablate.execute.job_function import JobContext, held
from ablate.execute.messages import Job, JobOutcome
from ablate.grid.expand import PlannedRun
from ablate.grid.planning import PlannedGrid
from ablate.grid.schema import Grid
from ablate.result import RunResult, write_result
from ablate.trainers.command.spec import Objective
from ablate.trainers.registry import TRAINERS, Trainer

NAME = "function"
ENTRY = Trainer(NAME, "a Python function of yours, called with its parameters", "function",
                "third_trainer:train", "third_trainer:PLANNER", reports=frozenset({"compare"}),
                model_commands=False, objective=("objective.metric", "objective.better"))


def fit(params: Mapping[str, Any], seed: int, report: Callable[[int, float], None]) -> dict[str, float]:
    """Fit ``y = 2x + 1`` to 64 noisy points by gradient descent; the mean squared error on 64 more. ``draw``
    picks other points at the same seed."""
    rng = random.Random(seed * 1000 + int(params.get("draw", 0)))
    noise, lr, steps = float(params["noise"]), float(params.get("lr", 0.1)), int(params.get("steps", 20))

    def points(n: int) -> list[tuple[float, float]]:
        xs = [rng.uniform(-1, 1) for _ in range(n)]
        return [(x, 2 * x + 1 + rng.gauss(0, noise)) for x in xs]

    train, held_out = points(64), points(64)
    w = b = 0.0
    for step in range(steps):
        errors = [(w * x + b - y, x) for x, y in train]
        w -= lr * 2 * sum(e * x for e, x in errors) / len(errors)
        b -= lr * 2 * sum(e for e, _ in errors) / len(errors)
        report(step, sum(e * e for e, _ in errors) / len(errors))
    return {"val_loss": sum((w * x + b - y) ** 2 for x, y in held_out) / len(held_out)}


@dataclass(frozen=True)
class Devices:
    devices: int = 1


class FunctionConfig(BaseModel):
    """One run: the arm, the seed, the function and its parameters, the objective."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trainer: Literal["function"] = NAME
    variant: str
    seed: int
    function: str
    params: dict[str, Any]
    objective: dict[str, str]

    @property
    def train(self) -> Devices:
        return Devices()


def _hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _ids(config: FunctionConfig) -> tuple[str, str]:
    stem = _hash(config.function, config.params)
    return f"{config.variant}-{_hash(stem, config.seed)}", stem


class FunctionPlanner:
    """The function trainer's ``GridPlanner``."""

    def _file(self, path: str | Path) -> dict[str, Any]:
        raw = read_yaml(Path(path).read_text(encoding="utf-8"), str(path))
        if not isinstance(raw.get("arms"), dict):
            raise ConfigError(f"arms: a mapping of arm name to parameters, got {raw.get('arms')!r}",
                              where=str(path))
        return raw

    def plan(self, path: str | Path, sets: Sequence[str], *, fingerprints: object,
             extra: Sequence[Mapping[str, object]]) -> PlannedGrid:
        raw = self._file(path)
        points = [(arm, seed) for arm in raw["arms"] for seed in raw.get("seeds", [0])]
        points += [(str(e["variant"]), int(str(e["seed"]))) for e in extra]
        planned = []
        for arm, seed in dict.fromkeys(points):
            config = FunctionConfig(variant=arm, seed=seed, function=raw["function"],
                                    params=dict(raw["arms"][arm]), objective=dict(raw["objective"]))
            run_id, stem = _ids(config)
            planned.append(PlannedRun(run_id, config, {"variant": arm, "seed": seed}, None, None,  # type: ignore[arg-type]
                                      stem_id=stem))
        text = Path(path).read_text(encoding="utf-8")
        grid = Grid(name=raw["name"], base={}, axes=(), source=str(path), text=text)
        return PlannedGrid(grid, planned, TRAINERS[NAME], Objective(**raw["objective"]))

    def name(self, path: str | Path, sets: Sequence[str]) -> str:
        return str(self._file(path)["name"])

    def objective(self, path: str | Path) -> tuple[str | None, list[str] | None]:
        return str(self._file(path)["objective"]["metric"]), None

    def columns(self, config: Mapping[str, Any]) -> dict[str, Any]:
        params = config.get("params") or {}
        return {"variant": config["variant"], "seed": config["seed"], "lr": params.get("lr"),
                "trainer": NAME, "trainer_params": params, "model_preset": None, "n_layers": None,
                "d_model": None, "train_steps": params.get("steps"), "batch_size": None, "seq_len": None}

    def ids(self, config: Mapping[str, Any]) -> tuple[str, str] | None:
        return _ids(FunctionConfig.model_validate(dict(config)))

    def resumes(self, config: BaseModel, run_dir: Path, run_id: str) -> bool:
        return False

    def stale_line(self, planned: BaseModel, stored: Mapping[str, Any], old: str) -> str:
        return f"new: the parameters changed since run {old}"

    def check_inputs(self, runs: Sequence[PlannedRun], source: str, *, strict: bool) -> list[str]:
        return []


PLANNER = FunctionPlanner()


def train(job: Job, ctx: JobContext) -> JobOutcome:
    """Call the run's function with its parameters, its steps reported live; its result into the run
    directory."""
    run_dir = Path(job.run_dir)
    with held(run_dir) as ended:
        if ended is not None:
            return ended
        config = FunctionConfig.model_validate(job.config)
        module, _, name = config.function.partition(":")
        function = getattr(importlib.import_module(module), name)
        ctx.started()
        started = datetime.now(UTC).isoformat()
        steps: list[int] = []
        losses: list[float] = []

        def report(step: int, loss: float) -> None:
            steps.append(step)
            losses.append(loss)
            ctx.progress([{"step": step, "loss": loss}])

        scores = function(config.params, config.seed, report)
        summary = {**scores, "train_loss": losses[-1], "steps": len(steps)}
        write_result(RunResult(run_id=job.run_id, config=job.config, status="done", summary=summary,
                               metrics={"step": steps, "loss": losses}, started=started,
                               finished=datetime.now(UTC).isoformat()), run_dir)
        return JobOutcome("trained", status="done")
