"""``ablate run``: a grid on its executor, once, or with ``--until-resolved`` in rounds until its comparisons
resolve (``run_until_resolved``): each round is the executor's ``run`` of the grid with the seeds added so
far, each look reads the store, and what the looks decided is stored for every report to read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ablate.execute.executor import RunOptions, check_flags, executor
from ablate.grid.planning import grid_objective
from ablate.resolve.cells import Axes, UntilResolved
from ablate.resolve.looks import Say, metric_values, until_resolved
from ablate.resolve.verdicts import decisions, verdict_lines
from ablate.store import Store


def run_until_resolved(path: Path, sets: Sequence[str], options: RunOptions, until: UntilResolved | None, *,
                       say: Say, warn: Say, echo: Say) -> int:
    """Run the grid at ``path`` on ``options.executor``, and with ``until`` go on in rounds until its
    comparisons resolve; the exit status. ``say``: a line on the looks (stderr), ``warn``: one about the store
    (SQLite on a network file system), ``echo``: the verdicts (stdout). An executor option given to an
    executor that does not read it is refused before anything starts."""
    chosen = executor(options.executor)
    check_flags(chosen, options.own)
    if until is None:
        return chosen.run(path, sets, options)
    until = until.for_grid(*grid_objective(path))
    # a look waits for the runs another process trains, and its table waits for the verdicts
    options = dataclasses.replace(options, wait=True, idle_table=False)

    def run_round(extra: list[Axes]) -> int:
        return chosen.run(path, sets, dataclasses.replace(options, extra=tuple(extra)))

    def read(run_ids: Sequence[str]) -> dict[str, float | None]:
        with _opened(options, warn) as opened:
            return metric_values(opened, run_ids, until.name)

    outcome = until_resolved(path, sets, until, home=options.home, read=read, run_round=run_round, say=say)
    decided = decisions(outcome, until)
    if decided:  # every report reads these comparisons at the look that decided them
        with _opened(options, warn) as opened:
            opened.record_decisions(grid=outcome.grid, decisions=decided)
    for line in verdict_lines(outcome, until):
        echo(line)
    return outcome.exit_code


def _opened(options: RunOptions, warn: Say) -> Store:
    opened = Store.open(options.store, home=options.home, create=False)
    for warning in opened.warnings:
        warn(warning)
    return opened
