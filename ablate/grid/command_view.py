"""What ``ablate plan`` shows of a command grid's runs: their ids, arms, the values of the parameter axes that
vary, seeds and statuses (the model's columns, parameters, tokens, FLOPs and memory, are not known for a
training command)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ablate.grid.expand import PlannedRun
from ablate.grid.view import NEW, _cell

SKIP = ("variant", "seed")


def _axes(runs: Sequence[PlannedRun]) -> list[str]:
    """The parameter axes whose value differs between runs, in the file's order."""
    names = dict.fromkeys(k for r in runs for k in r.axes if k not in SKIP)
    return [n for n in names if len({repr(r.axes.get(n)) for r in runs}) > 1]


def command_plan_rows(name: str, runs: Sequence[PlannedRun], status: dict[str, str]
                      ) -> tuple[str, list[tuple[str, str]], list[list[str]]]:
    """``ablate plan``'s table of a command grid: run id, arm, the axes that vary, seed, status."""
    axes = _axes(runs)
    columns = [("run id", "left"), ("arm", "left"), *((a, "right") for a in axes), ("seed", "right"),
               ("status", "left")]
    rows = [[r.run_id, str(r.axes.get("variant")), *(_cell(r.axes.get(a)) for a in axes),
             str(r.axes.get("seed")), status.get(r.run_id, NEW)] for r in runs]
    return f"grid {name}: {len(runs)} command run{'s' * (len(runs) != 1)}", columns, rows


def command_plan_json(name: str, runs: Sequence[PlannedRun], status: dict[str, str]) -> dict[str, Any]:
    """``ablate plan --format json`` of a command grid: ``{"grid", "trainer": "command", "runs": [{"run_id",
    "variant", "seed", "status", "axes", "config"}, ...]}``."""
    return {"grid": name, "trainer": "command",
            "runs": [{"run_id": r.run_id, "variant": r.axes.get("variant"), "seed": r.axes.get("seed"),
                      "status": status.get(r.run_id, NEW), "axes": r.axes,
                      "config": r.config.model_dump(mode="json")} for r in runs]}
