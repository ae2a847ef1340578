"""``ablate run GRID --until-resolved``: more seeds where a comparison is still open, and only there.

A *comparison* is one cell of the grid (a variant at one setting of the other axes) against its reference cell
(the same setting, the reference variant), paired by seed on one metric (``val_ppl`` by default). The grid
file's seeds are the first look. At each look:

1. every comparison's paired differences get their t test (``ablate.stats``), and the whole family is
   corrected (Holm by default) at the look's level (``ablate.stats.sequential``);
2. a comparison whose corrected p is below that level is resolved, and stays so;
3. the open ones get ``round`` more seeds, in both of their cells (they are pairs), and the next look follows,
   until every comparison is resolved or has ``max_seeds`` seeds.

The looks' levels spend alpha over the planned looks (``sequential.looks``, ``sequential.look_levels``:
Lan-DeMets' O'Brien-Fleming-shaped spending, early looks strict, the last close to alpha), and each look
corrects the whole family at its level, so the chance of any false resolution over every look is at most
alpha, however the looks depend on each other. Looking again at 0.05 each time would not keep that.

Added seeds are ordinary runs: ``include`` entries of the grid (the cell's axis values and the new seed),
content addressed, so a rerun reuses every one. They join the grid's current runs (as ``--set`` runs do) and
so appear in ``ablate report``; a plain ``ablate run`` of the file makes its own seeds the current ones again.
``run_round`` is the executor's: the local pool, or a Slurm array waited for.

What the looks decided is stored (``decisions``, ``Store.record_decisions``): every report then reads each
comparison at the look that decided it, never again at a fixed-n level.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import UserInputError, one_of

if TYPE_CHECKING:
    from ablate.grid.expand import PlannedRun
    from ablate.stats import Decision, Delta
    from ablate.store import Store

SEED = "seed"
VARIANT = "variant"


@dataclass(frozen=True)
class UntilResolved:
    """What ``--until-resolved`` resolves (``metric`` of each ``compare`` variant against ``reference``; every
    other variant when ``compare`` is empty) and how far it may go (``max_seeds`` per cell, ``round`` at a
    time)."""

    metric: str = "val_ppl"
    reference: str = "baseline"
    compare: tuple[str, ...] = ()
    max_seeds: int = 10
    round: int = 2
    correction: str = "holm"

    @property
    def ratio(self) -> bool:
        """The metric is compared by its paired log ratio (``ablate.metrics``' ``compare``)."""
        from ablate.metrics import metric

        declared = metric(self.metric)
        return declared is not None and declared.compare == "ratio"

    def __post_init__(self) -> None:
        from ablate.metrics import SUMMARY, metric

        declared = metric(self.metric)
        # an outcome a run's summary declares (ablate.metrics), not a count the config fixes
        if declared is None or declared.compare is None:
            names = [m.name + ("<name>" if m.family else "") for m in SUMMARY if m.compare is not None]
            raise UserInputError(one_of(self.metric, names, what="metric") + " (option --metric)")
        if self.round < 1:
            raise UserInputError(f"--round must be at least 1 seed, got {self.round}")


@dataclass(frozen=True)
class PairedCells:
    """A cell against its reference cell: their axis values without the seed, and the seeds they pair on."""

    label: str
    cell: str  # canonical JSON of the cell's axes without the seed
    reference: str
    axes: dict[str, Any]
    reference_axes: dict[str, Any]


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
class Outcome:
    """What ``until_resolved`` did: the plan of looks, each look, the look each comparison was resolved at and
    the executor's last exit status."""

    comparisons: list[PairedCells]
    plan: list[int]
    looks: list[Look] = field(default_factory=list)
    resolved_at: dict[int, int] = field(default_factory=dict)  # comparison index -> look index
    exit_code: int = 0
    grid: str = ""


def _key(axes: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in axes.items() if k != SEED}, sort_keys=True, default=str)


def _name(variant: Any) -> str:
    """A variant as runs name it: a catalogue name, or a plugin arm's label (``module:Class(k=v)``)."""
    if isinstance(variant, dict) and "arm" in variant:
        from ablate.ablations.config import PluginArm

        return PluginArm(arm=variant["arm"], args=variant.get("args") or {}).label
    return str(variant)


def _as_written(planned: Sequence[PlannedRun]) -> dict[str, Any]:
    """Each plugin arm's label -> the variant as a grid writes it (``{arm, args}``): what an added seed's
    include entry must say, since a label is a run's name, not a variant the grid accepts."""
    out: dict[str, Any] = {}
    for p in planned:
        plugin = p.config.model.plugin
        if plugin is not None:
            out[str(p.config.variant)] = {"arm": plugin.arm, "args": dict(plugin.args)}
    return out


def cells(planned: Iterable[PlannedRun]) -> dict[str, dict[int, str]]:
    """The grid's cells (canonical axes without the seed) -> seed -> run id."""
    out: dict[str, dict[int, str]] = {}
    for p in planned:
        out.setdefault(_key(p.axes), {})[p.config.seed] = p.run_id
    return out


def comparisons(planned: Sequence[PlannedRun], spec: UntilResolved, *, source: str) -> list[PairedCells]:
    """Every cell of a ``compare`` variant (any non-reference one when none is named) that has a reference
    cell in the grid. A grid without a variant axis, a seed axis of two or more seeds, or such a pair is
    refused."""
    by_key = {_key(p.axes): p.axes for p in planned}
    if not any(VARIANT in p.axes for p in planned):
        raise UserInputError(f"{source}: --until-resolved compares variants: the grid has no variant axis")
    names = sorted({_name(p.axes[VARIANT]) for p in planned if VARIANT in p.axes})
    for wanted in (spec.reference, *spec.compare):
        if wanted not in names:
            flag = "--reference" if wanted == spec.reference else "--compare"
            raise UserInputError(f"{source}: " + one_of(wanted, names, what="variant") + f" (option {flag})")
    written = _as_written(planned)
    out = []
    for key, axes in by_key.items():
        name = _name(axes.get(VARIANT))
        if VARIANT not in axes or name == spec.reference or (spec.compare and name not in spec.compare):
            continue
        ref_axes = {k: v for k, v in axes.items() if k != SEED} | {VARIANT: spec.reference}
        ref = _key(ref_axes)
        if ref not in by_key:
            continue
        at = ", ".join(f"{k}={v}" for k, v in sorted(axes.items()) if k not in (SEED, VARIANT))
        own = {k: v for k, v in axes.items() if k != SEED} | {VARIANT: written.get(name, name)}
        ref_axes[VARIANT] = written.get(spec.reference, spec.reference)
        out.append(PairedCells(f"{name} vs {spec.reference}" + (f" at {at}" if at else ""), key, ref, own,
                              ref_axes))
    if not out:
        raise UserInputError(f"{source}: --until-resolved found no cell to compare with a {spec.reference} "
                             "cell of the same setting")
    return out


def first_seeds(comps: Sequence[PairedCells], grid_cells: dict[str, dict[int, str]]) -> list[int]:
    """The seeds the file gives every compared pair (both cells), in order: the first look's."""
    common = None
    for c in comps:
        both = set(grid_cells[c.cell]) & set(grid_cells[c.reference])
        common = both if common is None else common & both
    return sorted(common or ())


def extra_runs(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """The include entries for ``seeds[i]`` added to comparison ``i`` (both cells; each entry once)."""
    out: dict[str, dict[str, Any]] = {}
    for c, added in zip(comps, seeds, strict=True):
        for s in added:
            for axes in (c.axes, c.reference_axes):
                entry = {**axes, SEED: s}
                out.setdefault(json.dumps(entry, sort_keys=True, default=str), entry)
    return list(out.values())


@dataclass
class Planner:
    """The seeds each comparison has at each look: the file's first ``n0``, then new seeds after the grid's
    largest, the same ones for every open comparison."""

    comps: list[PairedCells]
    first: list[int]
    plan: list[int]
    next_seed: int
    most_runs: int = 0  # the runs the plan may add beyond the file's
    grid: str = ""  # the grid's name

    @classmethod
    def make(cls, comps: list[PairedCells], grid_cells: dict[str, dict[int, str]], spec: UntilResolved, *,
             source: str) -> Planner:
        from ablate.stats.sequential import looks

        first = first_seeds(comps, grid_cells)
        if len(first) < 2:
            raise UserInputError(f"{source}: --until-resolved needs at least 2 seeds that every compared "
                                 f"pair has in the grid (a seed axis), got {len(first)}")
        if spec.max_seeds < len(first):
            raise UserInputError(f"--max-seeds {spec.max_seeds} is below the grid's {len(first)} seeds")
        largest = max(s for runs in grid_cells.values() for s in runs)
        return cls(comps, first, looks(len(first), spec.round, spec.max_seeds), largest + 1)

    def seeds(self, n: int) -> list[int]:
        """The seeds of a comparison that has ``n`` of them."""
        return [*self.first, *range(self.next_seed, self.next_seed + n - len(self.first))][:n]

    def most(self) -> list[dict[str, Any]]:
        """The include entries of every seed the plan may add (every comparison to ``plan[-1]`` seeds)."""
        added = [s for s in self.seeds(self.plan[-1]) if s not in self.first]
        return extra_runs(self.comps, [added] * len(self.comps))


def read_look(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]], ids: dict[str, dict[int, str]],
              values: dict[str, float | None], *, ratio: bool = False
              ) -> tuple[list[Delta], list[tuple[str, ...]]]:
    """Each comparison's paired delta over its ``seeds`` (``ratio``: its paired log ratio, the metric's
    declared comparison; a pair missing a value, diverged or not run, drops), and the runs it paired (both
    arms')."""
    from ablate.stats import paired_delta, paired_ratio

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
        return dict.fromkeys(finished["run_id"])
    out: dict[str, float | None] = {}
    for rid, v in zip(finished["run_id"], finished[metric], strict=True):
        out[str(rid)] = float(v) if v is not None and math.isfinite(float(v)) else None
    return out


def until_resolved(path: str | Path, sets: Sequence[str], spec: UntilResolved, *, home: Path,
                   read: Callable[[Sequence[str]], dict[str, float | None]],
                   run_round: Callable[[list[dict[str, Any]]], int],
                   say: Callable[[str], None]) -> Outcome:
    """Run the grid, look, add seeds where a comparison is open, look again (see the module docstring).

    ``read(run_ids)``: each finished run's metric value; ``run_round(extra)``: run the grid with these include
    entries and return the executor's exit status (0: every run ended); ``say``: one line to the user (the
    plan, each look). ``verdict_lines(outcome, spec)`` says what it found."""
    planner, ids = plan_until_resolved(path, sets, spec, home=home)
    say(most_line(planner))
    return run_looks(planner, ids, spec, read=read, run_round=run_round, say=say)


def run_looks(planner: Planner, ids: dict[str, dict[int, str]], spec: UntilResolved, *,
              read: Callable[[Sequence[str]], dict[str, float | None]],
              run_round: Callable[[list[dict[str, Any]]], int], say: Callable[[str], None]) -> Outcome:
    """The looks of ``until_resolved`` over a planned grid (``plan_until_resolved``)."""
    from ablate.stats import Stats
    from ablate.stats.sequential import look_levels, resolved_at_look

    stats = Stats(correction=spec.correction)
    comps = planner.comps
    outcome = Outcome(comps, planner.plan, grid=planner.grid)
    levels = look_levels(planner.plan)
    at = [len(planner.first)] * len(comps)  # seeds each comparison has
    resolved = [False] * len(comps)
    extra: list[dict[str, Any]] = []
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


def plan_until_resolved(path: str | Path, sets: Sequence[str], spec: UntilResolved, *, home: Path
                        ) -> tuple[Planner, dict[str, dict[int, str]]]:
    """The comparisons, their planned looks and the run id of every cell's seed the plan may reach (one
    expansion of the grid with every seed it may add)."""
    import dataclasses

    from ablate.grid import expand, load_grid
    from ablate.runner.fingerprints import Fingerprints

    grid = load_grid(path, sets)
    fingerprints = Fingerprints.for_home(Path(home))
    planned = expand(grid, fingerprints=fingerprints)
    grid_cells = cells(planned)
    comps = comparisons(planned, spec, source=grid.source)
    planner = Planner.make(comps, grid_cells, spec, source=grid.source)
    planner.grid = grid.name
    widest = expand(dataclasses.replace(grid, include=(*grid.include, *planner.most())),
                    fingerprints=fingerprints)
    planner.most_runs = len(widest) - len(planned)
    return planner, cells(widest)


def most_line(planner: Planner) -> str:
    """``--until-resolved: 2 comparisons, looks at n=3, 5, 7, 9, 10 seeds; at most 28 more runs``."""
    m, most = len(planner.comps), planner.most_runs
    return (f"--until-resolved: {m} comparison{'s' * (m != 1)}, looks at "
            f"n={', '.join(map(str, planner.plan))} seeds; at most {most} more run{'s' * (most != 1)}")


def _ids_of(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]], ids: dict[str, dict[int, str]]
            ) -> list[str]:
    return [ids[key][s] for c, ss in zip(comps, seeds, strict=True) for key in (c.cell,
                                                                                c.reference) for s in ss
            if s in ids[key]]


def look_line(j: int, look: Look, resolved: Sequence[bool], looks: int) -> str:
    """``look 2 of 5 (n=5 seeds, level 0.0040): 1 of 2 resolved``."""
    return (f"look {j + 1} of {looks} (n={look.n} seeds, level {look.level:.2g}): {sum(resolved)} of "
            f"{len(resolved)} resolved")


def verdict_lines(outcome: Outcome, spec: UntilResolved) -> list[str]:
    """One line per comparison: its last delta, and the look that resolved it or the seeds it still needs."""
    from ablate.stats import CORRECTION_NAMES
    from ablate.stats.power import needs_text, seeds_needed

    m = len(outcome.comparisons)
    out = [f"{spec.metric}, paired t over seeds, {CORRECTION_NAMES[spec.correction]} over {m} comparison"
           f"{'s' * (m != 1)} at each look, O'Brien-Fleming alpha spending over n="
           f"{', '.join(map(str, outcome.plan))}:"]
    for i, c in enumerate(outcome.comparisons):
        j = outcome.resolved_at.get(i)
        last = outcome.looks[j if j is not None else -1] if outcome.looks else None
        if last is None:
            continue
        d = last.deltas[i]
        shown = "n/a" if d.mean is None else f"{d.mean:+.4g}" + (
            "" if d.lo is None or d.hi is None else f" [{d.lo:+.4g}, {d.hi:+.4g}]")
        p = "" if d.p is None else f", p={d.p:.2g}"
        if j is not None:
            out.append(f"  {c.label}: {shown}{p}: resolved at look {j + 1}, n={d.n} seeds")
        else:
            need = seeds_needed(d.shift, d.sd, last.level / max(m, 1))
            out.append(f"  {c.label}: {shown}{p}: unresolved at n={d.n} seeds ({needs_text(need)} at the "
                       "last look's level)")
    return out


def decisions(outcome: Outcome, spec: UntilResolved) -> list[Decision]:
    """What the looks decided, for the store (``Store.record_decisions``): each comparison a look resolved,
    and, once the looks went to the end of the plan, each one still open there (decided unresolved at the
    last look's level). A loop stopped early (runs that did not end) decides nothing about its open
    comparisons: a rerun goes on with them."""
    from ablate.stats import Decision, LookRecord, Stats, correct

    complete = outcome.exit_code == 0 and bool(outcome.looks) and (
        len(outcome.looks) == len(outcome.plan) or len(outcome.resolved_at) == len(outcome.comparisons))
    corrected = [correct(look.deltas, Stats(correction=spec.correction)) for look in outcome.looks]
    out = []
    for i, c in enumerate(outcome.comparisons):
        j = outcome.resolved_at.get(i)
        if j is None and not complete:
            continue
        last = j if j is not None else len(outcome.looks) - 1
        history = tuple(LookRecord(look.deltas[i].n, look.level, look.deltas[i].mean, look.deltas[i].lo,
                                   look.deltas[i].hi, look.deltas[i].p, fam[i].p_adj)
                        for look, fam in zip(outcome.looks[:last + 1], corrected[:last + 1], strict=True))
        out.append(Decision(
            grid=outcome.grid, treatment=_name(c.axes.get(VARIANT)), reference=spec.reference,
            metric=spec.metric,
            cell={k: v for k, v in c.axes.items() if k != VARIANT}, runs=outcome.looks[last].runs[i],
            look=None if j is None else j + 1, n=history[-1].n, level=history[-1].level,
            p_adj=history[-1].p_adj, family=len(outcome.comparisons), correction=spec.correction,
            plan=tuple(outcome.plan), history=history))
    return out
