"""Which stored runs ``ablate eval`` and ``ablate probe`` work on: the run ids given, or a grid's finished
runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ablate.errors import UserInputError, did_you_mean
from ablate.store.api import Store
from ablate.trainers.registry import TRAINERS

if TYPE_CHECKING:
    import pandas as pd

FINISHED = ("done", "diverged")


def require_choice(run_ids: Sequence[str], grid: str | None) -> None:
    """Run ids or a grid, one of the two (a UserInputError otherwise): checked before the store is opened."""
    if bool(run_ids) == bool(grid):
        raise UserInputError("give run ids or --grid NAME (one of the two)")


def select_runs(store: Store, run_ids: Sequence[str], grid: str | None, *, finished: Sequence[str] = FINISHED,
                command: str = "ablate eval", verb: str = "scores") -> list[str]:
    """The finished runs to score: ``run_ids`` (each must be known and ``finished``), else the ``finished``
    runs of ``grid``; runs of ablate's own model only. A UserInputError says what is wrong."""
    require_choice(run_ids, grid)
    if grid:
        if grid not in store.grids():
            raise UserInputError(f"no grid {grid!r} in the store{did_you_mean(grid, store.grids())}")
        frame = store.runs_frame(grid=grid)
        _model_runs_only(frame, command)
        return [r for r, s in zip(frame["run_id"], frame["status"], strict=True) if s in finished]
    run_ids = [store.resolve_run(ref) for ref in run_ids]  # ids or their first characters, as show takes
    frame = store.runs_frame(run_ids=run_ids)
    _model_runs_only(frame, command)
    statuses = dict(zip(frame["run_id"], frame["status"], strict=True))
    for rid in run_ids:
        if statuses[rid] not in finished:
            raise UserInputError(f"run {rid} is {statuses[rid]}; `{command}` {verb} finished runs "
                                 f"({' or '.join(finished)})")
    return list(dict.fromkeys(run_ids))


def _model_runs_only(runs: pd.DataFrame, command: str) -> None:
    """Refuse, in the trainer's one line, runs whose trainer the model commands cannot read (a command's)."""
    for run_id, kind in zip(runs["run_id"], runs.get("trainer", [None] * len(runs)), strict=True):
        if isinstance(kind, str) and not TRAINERS[kind].model_commands:
            raise UserInputError(f"run {run_id}: " + TRAINERS[kind].refusal(command))
