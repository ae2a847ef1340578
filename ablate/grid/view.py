"""What ``ablate plan`` shows: each planned run's JSON and its table, with the status the store gives it
(``ablate.store.plan_status``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ablate.ablations.memory import GiB, fmt_gb, gpu_here
from ablate.ablations.plugins import imports
from ablate.grid.expand import PlannedRun
from ablate.grid.ids import canonical
from ablate.grid.ladder import planned_flops, rung_label, tokens_per_run
from ablate.grid.paths import get_path
from ablate.runner.run_memory import run_memory

log = logging.getLogger(__name__)

NEW = "new"


def compute(run: PlannedRun) -> dict[str, int]:
    """The training ``tokens`` a run is planned for and the ``flops`` they cost
    (``ablate.ablations.flops``)."""
    return {"tokens": tokens_per_run(run.model), "flops": planned_flops(run.model)}


def memory(run: PlannedRun, *, gpu: bool | None = None, items: bool = True) -> dict[str, Any]:
    """The run's estimated peak ``memory_gb`` per device and (``items``) its items
    (``ablate.ablations.memory``); ``gpu``: whether a GPU is here (asked when None)."""
    est = run_memory(run.model, gpu=gpu_here() if gpu is None else gpu)
    return {"memory_gb": round(est.gb, 4), **({"memory": est.itemised_gb()} if items else {})}


class Costs:
    """``compute(run) | memory(run)`` of each run, worked out once per distinct model, variant, train section,
    sequence length and stages: a grid's 10,000 runs share a few hundred (the other fields cost nothing)."""

    def __init__(self, *, gpu: bool):
        self.gpu = gpu
        self.done: dict[Any, dict[str, Any]] = {}

    def __call__(self, run: PlannedRun) -> dict[str, Any]:
        c = run.model
        # frozen pydantic models hash by value; stages are plain dicts, so they go in as JSON
        key = (c.model, c.variant, c.train, c.data.seq_len,
               json.dumps(c.stages, sort_keys=True, default=str) if c.stages else None)
        if (found := self.done.get(key)) is None:
            found = self.done[key] = compute(run) | memory(run, gpu=self.gpu)
        return found


def plan_imports(runs: Sequence[PlannedRun]) -> list[str]:
    """The modules of the user's code the runs' plugin arms import, sorted."""
    plugins = (r.model.model.plugin for r in runs)
    return imports(p.arm for p in plugins if p is not None)


def plan_json(name: str, runs: Sequence[PlannedRun], status: dict[str, str]) -> dict[str, Any]:
    """CLI.md's ``plan --format json``: ``{"grid", "runs": [{"run_id", "variant", "seed", "params",
    "added_params", "status", "config"}, ...], "imports"}``, plus each run's ``axes``, ``match_residual``,
    planned ``tokens`` and ``flops``, and its estimated peak ``memory_gb`` per device with the ``memory``
    items; ``imports``: the plugin modules the grid imports."""
    costs = Costs(gpu=gpu_here())
    return {
        "grid": name,
        "runs": [
            {
                "run_id": r.run_id, "variant": r.config.variant, "seed": r.config.seed, "params": r.params,
                "added_params": r.added_params, "status": status.get(r.run_id, NEW),
                "config": r.config.model_dump(mode="json"), "axes": r.axes,
                "match_residual": r.match_residual, **costs(r),
            }
            for r in runs
        ],
        "imports": plan_imports(runs),
    }


def varying_axes(runs: Sequence[PlannedRun], dumps: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The axis paths (other than variant and seed) whose resolved value differs between runs, in grid order
    (``dumps``: the runs' configs dumped as JSON, when the caller has them)."""
    paths: dict[str, None] = {}
    for r in runs:
        paths.update(dict.fromkeys(p for p in r.axes if p not in ("variant", "seed")))
    dumps = dumps if dumps is not None else [r.config.model_dump(mode="json") for r in runs]
    return [
        p for p in paths if len({repr(canonical(get_path(d, p)[1])) for d in dumps}) > 1
    ]


def human(n: int | float, *, sign: bool = False) -> str:
    """``15577227264`` -> ``15.58B``; ``sign`` prefixes ``+`` to positives.

    >>> human(201326592, sign=True)
    '+201.33M'
    """
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            text = f"{n / scale:.2f}{unit}"
            break
    else:
        text = f"{n:g}"
    return f"+{text}" if sign and n > 0 else text


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value)


def plan_rows(name: str, runs: Sequence[PlannedRun], status: dict[str, str], *, matched: str | None = None,
              ladder: bool = False) -> tuple[str, list[tuple[str, str]], list[list[str]]]:
    """What ``ablate plan`` shows, as text: the title, the columns (name, ``left``/``right``) and one row of
    cells per run: run id, variant, seed, [rung,] the axes that vary, params, added params, [residual],
    tokens, FLOPs, estimated peak memory per device, status. With ``ladder`` the model fields the rungs set
    show as one ``rung`` column."""
    costs = Costs(gpu=gpu_here())
    dumps = [r.config.model_dump(mode="json") for r in runs]
    axes = varying_axes(runs, dumps)
    if ladder:
        axes = [p for p in axes if not p.startswith("model.") or p in ("model.preset",)]
    columns = [("run id", "left"), ("variant", "left"), ("seed", "right")]
    columns += [("rung", "right")] if ladder else []
    columns += [(path, "right") for path in axes] + [("params", "right"), ("added", "right")]
    columns += [(f"vs {matched}", "right")] if matched is not None else []
    columns += [("tokens", "right"), ("FLOPs", "right"), ("memory", "right"), ("status", "left")]
    rows = []
    for r, dump in zip(runs, dumps, strict=True):
        cells = [r.run_id, r.config.variant, str(r.config.seed)]
        if ladder:
            cells.append(rung_label(dump["model"]))
        cells += [_cell(get_path(dump, p)[1]) for p in axes]
        cells += [human(r.params), human(r.added_params, sign=True)]
        if matched is not None:
            cells.append("-" if r.match_residual is None else f"{r.match_residual:+.3%}")
        cost = costs(r)
        cells += [human(cost["tokens"]), f"{cost['flops']:.2e}", fmt_gb(cost["memory_gb"] * GiB)]
        cells.append(status.get(r.run_id, NEW))
        rows.append(cells)
    return f"grid {name}: {len(runs)} run{'s' * (len(runs) != 1)}", columns, rows
