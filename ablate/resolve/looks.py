"""The looks of ``--until-resolved``: run the grid, read each comparison's paired delta, resolve what the
look's level allows, add seeds where a comparison is open, and look again (``until_resolved``,
``run_looks``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ablate.resolve.cells import Axes, PairedCells, UntilResolved, extra_runs
from ablate.resolve.plan import Planner, RunIds, most_line, plan_until_resolved
from ablate.stats import Delta, Stats, paired_delta, paired_ratio
from ablate.stats.sequential import look_levels, resolved_at_look
from ablate.store import Store

Read = Callable[[Sequence[str]], dict[str, float | None]]  # run ids -> each finished run's metric value
RunRound = Callable[[list[Axes]], int]  # the grid with these include entries -> the executor's exit status
Say = Callable[[str], None]  # one line to the user


@dataclass
class Look:
    """One look: the seeds each comparison had, the level it had to beat and what it found; ``runs``: each
    comparison's paired runs (both arms)."""

    n: int
    level: float
    deltas: list[Delta]
    resolved: list[bool]
    runs: list[tuple[str, ...]] = field(default_factory=list)


@dataclass
class Resolution:
    """What ``until_resolved`` did: the plan of looks, each look, the look each comparison was resolved at and
    the executor's last exit status."""

    comparisons: list[PairedCells]
    plan: list[int]
    looks: list[Look] = field(default_factory=list)
    resolved_at: dict[int, int] = field(default_factory=dict)  # comparison index -> look index
    exit_code: int = 0
    grid: str = ""


def read_look(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]], ids: RunIds,
              values: Mapping[str, float | None], *, ratio: bool = False
              ) -> tuple[list[Delta], list[tuple[str, ...]]]:
    """Each comparison's paired delta over its ``seeds`` (``ratio``: its paired log ratio, the metric's
    declared comparison; a pair missing a value, diverged or not run, drops), and the runs it paired (both
    arms')."""
    deltas, paired = [], []
    for c, ss in zip(comps, seeds, strict=True):
        treat = {s: values.get(ids[c.cell].get(s, "")) for s in ss}
        ref = {s: values.get(ids[c.reference].get(s, "")) for s in ss}
        deltas.append(paired_ratio(treat, ref) if ratio else paired_delta(treat, ref))
        both = [s for s in ss if _finite(treat[s], ratio) and _finite(ref[s], ratio)]
        paired.append(tuple(sorted([ids[c.cell][s] for s in both] + [ids[c.reference][s] for s in both])))
    return deltas, paired


def _finite(v: float | None, positive: bool = False) -> bool:
    return v is not None and math.isfinite(v) and (v > 0 or not positive)


def metric_values(store: Store, run_ids: Sequence[str], metric: str) -> dict[str, float | None]:
    """``metric`` of each finished run (done or diverged) among ``run_ids``; None where it has none."""
    frame = store.runs_frame(run_ids=list(run_ids))
    if not len(frame):
        return {}
    finished = frame[frame["status"].isin(("done", "diverged"))]
    if metric not in finished.columns:
        return dict.fromkeys(str(r) for r in finished["run_id"])
    out: dict[str, float | None] = {}
    for rid, v in zip(finished["run_id"], finished[metric], strict=True):
        out[str(rid)] = float(v) if v is not None and math.isfinite(float(v)) else None
    return out


def until_resolved(path: str | Path, sets: Sequence[str], spec: UntilResolved, *, home: Path, read: Read,
                   run_round: RunRound, say: Say) -> Resolution:
    """Run the grid, look, add seeds where a comparison is open, look again (see ``ablate.resolve``).

    ``read(run_ids)``: each finished run's metric value; ``run_round(extra)``: run the grid with these include
    entries and return the executor's exit status (0: every run ended); ``say``: one line to the user (the
    plan, each look). ``verdict_lines(outcome, spec)`` says what it found."""
    planner, ids = plan_until_resolved(path, sets, spec, home=home)
    say(most_line(planner))
    return run_looks(planner, ids, spec, read=read, run_round=run_round, say=say)


def run_looks(planner: Planner, ids: RunIds, spec: UntilResolved, *, read: Read, run_round: RunRound,
              say: Say) -> Resolution:
    """The looks of ``until_resolved`` over a planned grid (``plan_until_resolved``)."""
    stats = Stats(correction=spec.correction)
    comps = planner.comps
    outcome = Resolution(comps, planner.plan, grid=planner.grid)
    levels = look_levels(planner.plan)
    at = [len(planner.first)] * len(comps)  # seeds each comparison has
    resolved = [False] * len(comps)
    for j, (n, level) in enumerate(zip(planner.plan, levels, strict=True)):
        at = [a if r else n for a, r in zip(at, resolved, strict=True)]
        seeds = [planner.seeds(a) for a in at]
        extra = extra_runs(comps, [[s for s in ss if s not in planner.first] for ss in seeds])
        code = run_round(extra)
        outcome.exit_code = code
        if code != 0:
            say(f"--until-resolved: stopped at look {j + 1}: the runs did not all end (exit {code}); rerun "
                "the same command to go on")
            return outcome
        deltas, paired = read_look(comps, seeds, ids, read(_ids_of(comps, seeds, ids)), ratio=spec.ratio)
        now = resolved_at_look(deltas, level, stats)
        look = Look(n, level, deltas, now, paired)
        outcome.looks.append(look)
        for i, r in enumerate(now):
            if r and not resolved[i]:
                resolved[i] = True
                outcome.resolved_at[i] = j
        say(look_line(j, look, resolved, len(planner.plan)))
        if all(resolved):
            break
    return outcome


def _ids_of(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]], ids: RunIds) -> list[str]:
    return [ids[key][s] for c, ss in zip(comps, seeds, strict=True) for key in (c.cell, c.reference)
            for s in ss if s in ids[key]]


def look_line(j: int, look: Look, resolved: Sequence[bool], looks: int) -> str:
    """``look 2 of 5 (n=5 seeds, level 0.0040): 1 of 2 resolved``."""
    return (f"look {j + 1} of {looks} (n={look.n} seeds, level {look.level:.2g}): {sum(resolved)} of "
            f"{len(resolved)} resolved")
