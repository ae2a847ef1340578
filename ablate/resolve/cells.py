"""What ``--until-resolved`` compares: its settings (``UntilResolved``), the grid's cells, each cell paired
with its reference cell (``PairedCells``), and the include entries that add seeds to a pair."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ablate.ablations.config import PluginArm
from ablate.errors import UserInputError, one_of
from ablate.grid.expand import PlannedRun
from ablate.metrics import SUMMARY, metric

SEED = "seed"
VARIANT = "variant"
DEFAULT_METRIC = "val_ppl"  # what --until-resolved compares on a grid of ablate's model

Axes = dict[str, object]  # a run's axis values by dotted path, as the grid file wrote them


@dataclass(frozen=True)
class UntilResolved:
    """What ``--until-resolved`` resolves (``metric`` of each ``compare`` variant against ``reference``; every
    other variant when ``compare`` is empty) and how far it may go (``max_seeds`` per cell, ``round`` at a
    time). The defaults are ``ablate run``'s."""

    metric: str | None = None  # None: the grid's objective (a command grid's), else val_ppl (``for_grid``)
    reference: str = "baseline"
    compare: tuple[str, ...] = ()
    max_seeds: int = 10
    round: int = 2
    correction: str = "holm"

    @property
    def ratio(self) -> bool:
        """The metric is compared by its paired log ratio (``ablate.metrics``' ``compare``)."""
        declared = metric(self.metric or DEFAULT_METRIC)
        return declared is not None and declared.compare == "ratio"

    @property
    def name(self) -> str:
        """The metric compared (once ``for_grid`` has chosen it)."""
        return self.metric or DEFAULT_METRIC

    def __post_init__(self) -> None:
        if self.metric is not None and metric(self.metric) is not None:
            self._declared(self.metric)
        if self.round < 1:
            raise UserInputError(f"--round must be at least 1 seed, got {self.round}")

    @staticmethod
    def _declared(name: str) -> None:
        declared = metric(name)
        # an outcome a run's summary declares (ablate.metrics), not a count the config fixes
        if declared is None or declared.compare is None:
            names = [m.name + ("<name>" if m.family else "") for m in SUMMARY if m.compare is not None]
            raise UserInputError(one_of(name, names, what="metric") + " (option --metric)")

    def for_grid(self, objective: str | None, names: Sequence[str] | None = None) -> UntilResolved:
        """These settings for a grid: the metric compared is ``--metric``, else the grid's ``objective`` (a
        command grid's), else val_ppl. On a grid of ablate's model the metric must be a declared outcome; on
        a command grid one of the metrics its trainer names (``names``; None: any, not known before a run)."""
        if objective is None:
            chosen = self.metric or DEFAULT_METRIC
            self._declared(chosen)
        else:
            chosen = self.metric or objective
            if names is not None and chosen not in names:
                raise UserInputError(one_of(chosen, names, what="metric") + " (option --metric)")
        return dataclasses.replace(self, metric=chosen)


@dataclass(frozen=True)
class PairedCells:
    """A cell against its reference cell: their axis values without the seed, and the seeds they pair on."""

    label: str
    cell: str  # canonical JSON of the cell's axes without the seed
    reference: str
    axes: Axes
    reference_axes: Axes


def cell_key(axes: Mapping[str, object]) -> str:
    """A cell's canonical JSON: its axes without the seed."""
    return json.dumps({k: v for k, v in axes.items() if k != SEED}, sort_keys=True, default=str)


def variant_name(variant: object) -> str:
    """A variant as runs name it: a catalogue name, or a plugin arm's label (``module:Class(k=v)``)."""
    if isinstance(variant, dict) and "arm" in variant:
        return PluginArm(arm=variant["arm"], args=variant.get("args") or {}).label
    return str(variant)


def _as_written(planned: Sequence[PlannedRun]) -> dict[str, object]:
    """Each plugin arm's label -> the variant as a grid writes it (``{arm, args}``): what an added seed's
    include entry must say, since a label is a run's name, not a variant the grid accepts."""
    out: dict[str, object] = {}
    for p in planned:
        model = getattr(p.config, "model", None)  # a command run's config has none
        plugin = model.plugin if model is not None else None
        if plugin is not None:
            out[str(p.config.variant)] = {"arm": plugin.arm, "args": dict(plugin.args)}
    return out


def cells(planned: Iterable[PlannedRun]) -> dict[str, dict[int, str]]:
    """The grid's cells (canonical axes without the seed) -> seed -> run id."""
    out: dict[str, dict[int, str]] = {}
    for p in planned:
        out.setdefault(cell_key(p.axes), {})[p.config.seed] = p.run_id
    return out


def comparisons(planned: Sequence[PlannedRun], spec: UntilResolved, *, source: str) -> list[PairedCells]:
    """Every cell of a ``compare`` variant (any non-reference one when none is named) that has a reference
    cell in the grid. A grid without a variant axis, a seed axis of two or more seeds, or such a pair is
    refused."""
    by_key: dict[str, Axes] = {cell_key(p.axes): p.axes for p in planned}
    if not any(VARIANT in p.axes for p in planned):
        raise UserInputError(f"{source}: --until-resolved compares variants: the grid has no variant axis")
    names = sorted({variant_name(p.axes[VARIANT]) for p in planned if VARIANT in p.axes})
    for wanted in (spec.reference, *spec.compare):
        if wanted not in names:
            flag = "--reference" if wanted == spec.reference else "--compare"
            raise UserInputError(f"{source}: " + one_of(wanted, names, what="variant") + f" (option {flag})")
    written = _as_written(planned)
    out = []
    for key, axes in by_key.items():
        name = variant_name(axes.get(VARIANT))
        if VARIANT not in axes or name == spec.reference or (spec.compare and name not in spec.compare):
            continue
        ref_axes = {k: v for k, v in axes.items() if k != SEED} | {VARIANT: spec.reference}
        ref = cell_key(ref_axes)
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


def first_seeds(comps: Sequence[PairedCells], grid_cells: Mapping[str, Mapping[int, str]]) -> list[int]:
    """The seeds the file gives every compared pair (both cells), in order: the first look's."""
    common: set[int] | None = None
    for c in comps:
        both = set(grid_cells[c.cell]) & set(grid_cells[c.reference])
        common = both if common is None else common & both
    return sorted(common or ())


def extra_runs(comps: Sequence[PairedCells], seeds: Sequence[Sequence[int]]) -> list[Axes]:
    """The include entries for ``seeds[i]`` added to comparison ``i`` (both cells; each entry once)."""
    out: dict[str, Axes] = {}
    for c, added in zip(comps, seeds, strict=True):
        for s in added:
            for axes in (c.axes, c.reference_axes):
                entry = {**axes, SEED: s}
                out.setdefault(json.dumps(entry, sort_keys=True, default=str), entry)
    return list(out.values())
