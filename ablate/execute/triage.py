"""Before anything trains: what each run of a grid needs, from its status in the store. Pure.

| status in the store        | action                                                        |
| -------------------------- | ------------------------------------------------------------- |
| never seen, ``queued``     | train (resuming from a checkpoint if its run directory has one) |
| ``running``, process dead  | resume from its last checkpoint                               |
| ``running``, process alive | skip: another ``ablate run`` is training it                    |
| ``done``, ``diverged``     | skip                                                          |
| ``failed``                 | skip, unless ``retry_failed`` (then resume from its checkpoint) |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ablate.grid.expand import PlannedRun

Action = Literal["train", "resume", "skip"]


@dataclass(frozen=True)
class RunAction:
    """What happens to one planned run, and why (shown to the user)."""

    run: PlannedRun
    action: Action
    reason: str
    status: str | None  # its status in the store before this command, None if never seen

    @property
    def run_id(self) -> str:
        return self.run.run_id


def triage(runs: Sequence[PlannedRun], statuses: dict[str, str], *, retry_failed: bool,
           is_alive: Callable[[str], bool], has_checkpoint: Callable[[str], bool]) -> list[RunAction]:
    """One ``RunAction`` per distinct run id, in the grid's order.

    ``is_alive(run_id)``: whether a live process is training a ``running`` run now;
    ``has_checkpoint(run_id)``: whether its run directory holds a checkpoint to resume from.
    """
    decisions: list[RunAction] = []
    seen: set[str] = set()
    for run in runs:
        if run.run_id in seen:
            continue
        seen.add(run.run_id)
        status = statuses.get(run.run_id)
        decisions.append(RunAction(run, *_decide(run.run_id, status, retry_failed, is_alive, has_checkpoint),
                                  status))
    return decisions


def _decide(run_id: str, status: str | None, retry_failed: bool, is_alive: Callable[[str], bool],
            has_checkpoint: Callable[[str], bool]) -> tuple[Action, str]:
    if status in ("done", "diverged"):
        return "skip", status
    if status == "failed" and not retry_failed:
        return "skip", "failed (--retry-failed runs it again)"
    if status == "running" and is_alive(run_id):
        return "skip", "running in another process"
    if has_checkpoint(run_id):
        return "resume", {"running": "cut off; resuming", "failed": "retrying from its checkpoint"}.get(
            status or "", "resuming")
    return "train", {None: "new", "failed": "retrying"}.get(status, status or "new")


def counts(decisions: Sequence[RunAction]) -> dict[str, int]:
    """How many runs each action got: ``{"train": n, "resume": n, "skip": n}``."""
    out = {"train": 0, "resume": 0, "skip": 0}
    for d in decisions:
        out[d.action] += 1
    return out
