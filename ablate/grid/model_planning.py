"""The planner of ablate's own grid files (``ablate.grid.planning.GridPlanner``), named by the model
trainer's registry entry and imported by that name only when a model grid is planned or one of its runs is
stored: its files (``schema.load_grid`` + ``expand``), its stored runs (their columns, ids, resume and what
``ablate plan`` says of a changed one) and the checks of its inputs (tokenizers and data,
``runner.preflight``: the data side and numpy, which a command grid's run never loads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from ablate.config import RunConfig, total_steps
from ablate.errors import ConfigError, InputMissingError
from ablate.grid.expand import PlannedRun, expand
from ablate.grid.identity import changed
from ablate.grid.ids import run_id as make_id
from ablate.grid.planning import PlannedGrid
from ablate.grid.schema import load_grid
from ablate.grid.stems import stem_id
from ablate.layout import CHECKPOINT
from ablate.runner.fingerprints import Fingerprints
from ablate.runner.preflight import check_data, check_tokenizers, heldout_warnings
from ablate.trainers.registry import MODEL, TRAINERS


class ModelPlanner:
    """Grid files of ablate's own model."""

    def plan(self, path: str | Path, sets: Sequence[str], *, fingerprints: Fingerprints,
             extra: Sequence[Mapping[str, object]]) -> PlannedGrid:
        grid = load_grid(path, sets)
        if extra:
            grid = dataclasses.replace(grid, include=(*grid.include, *map(dict, extra)))
        return PlannedGrid(grid, expand(grid, fingerprints=fingerprints), TRAINERS[MODEL])

    def name(self, path: str | Path, sets: Sequence[str]) -> str:
        return load_grid(path, sets).name

    def objective(self, path: str | Path) -> tuple[str | None, list[str] | None]:
        return None, None

    def columns(self, config: Mapping[str, Any]) -> dict[str, Any]:
        model, data, train = (config.get(k) or {} for k in ("model", "data", "train"))
        return {
            "trainer": None,  # ablate's own model, as every run before there was a choice
            "trainer_params": None,
            "variant": str(config.get("variant", "baseline")),
            "seed": int(config.get("seed", 0)),
            "model_preset": model.get("preset"),
            "n_layers": model.get("n_layers"),
            "d_model": model.get("d_model"),
            "lr": train.get("lr"),
            "train_steps": total_steps(config),  # over every training stage: the progress total
            "batch_size": train.get("batch_size"),
            "seq_len": data.get("seq_len"),
        }

    def ids(self, config: Mapping[str, Any]) -> tuple[str, str] | None:
        try:
            cfg = RunConfig.model_validate(dict(config))
        except (ValidationError, ValueError):
            return None
        return make_id(cfg), stem_id(cfg)

    def resumes(self, config: BaseModel, run_dir: Path, run_id: str) -> bool:
        return (run_dir / CHECKPOINT).is_file()

    def stale_line(self, planned: BaseModel, stored: Mapping[str, Any], old: str) -> str:
        fields = changed(cast(RunConfig, planned), dict(stored)) or ["what it reads"]
        more = f" (and {len(fields) - 2} more)" if len(fields) > 2 else ""
        return f"stale: {', '.join(fields[:2])}{more} changed since run {old}"

    def check_inputs(self, runs: Sequence[PlannedRun], source: str, *, strict: bool) -> list[str]:
        warnings: list[str] = []
        try:
            check_tokenizers(runs, source=source)  # a tokenizer that cannot be made or does not fit
        except InputMissingError as exc:
            if strict:
                raise
            warnings.append(f"{exc} (`ablate run` stops here)")
        try:
            check_data(runs, source=source)  # data that cannot work: one line, before anything is made
        except ConfigError as exc:
            if strict:
                raise
            warnings.append(f"{exc} (`ablate run` stops here)")
        return warnings + heldout_warnings(runs, source=source)


MODEL_PLANNER = ModelPlanner()
