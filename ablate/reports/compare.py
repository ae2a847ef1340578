"""``ablate report compare``: every arm of a grid against a reference arm, on every metric the runs have.

The paper's tables are special cases of this one: its rows are whatever arms the grid ran (catalogue arms,
sink fixes, plugin arms), not the paper's. Runs pair by their whole configuration except the variant and the
seed; each distinct rest of the configuration (each learning rate, each value of a model axis) is a *cell*,
and in each cell every arm is compared with the reference's runs of the same seeds. Per metric that
``ablate.metrics`` declares an outcome (``compare``: a paired difference, or for a magnitude that differs by
factors a paired log ratio) and the runs have, a comparison says:

- each arm's mean ± std over seeds;
- the paired Δ (or ratio) with its 95% t interval and p, and the p corrected over the grid's family of that
  metric (``reports.family``, named once: "Holm over 4 comparisons of val_ppl against baseline in this
  grid"), the same on every page; a comparison that ``ablate run --until-resolved`` decided is read at the
  look that decided it;
- n, the seeds an unresolved comparison needs, and what the pairing did (``ablate.stats.pairing``).

Pure: a function of ``GridData`` (``reports/data.py``); ``compare_render.py`` writes it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ablate.errors import UserInputError, did_you_mean, one_of
from ablate.metrics import SUMMARY, metric
from ablate.reports.data import GridData
from ablate.reports.family import REFERENCE, Comparison, compared_metrics, families
from ablate.reports.rows import finished
from ablate.stats import DEFAULT, Stats

__all__ = ["REFERENCE", "CompareReport", "Comparison", "build_compare", "check_metrics", "check_reference"]


@dataclass
class CompareReport:
    """The comparison table of a grid: its comparisons in order (cell, metric, arm), the metrics shown, and
    the notes (cells without a reference run, arms the reference never met)."""

    grid: str
    reference: str
    stats: Stats
    metrics: list[str]
    comparisons: list[Comparison]
    notes: list[str] = field(default_factory=list)


def check_metrics(wanted: Sequence[str], have: Sequence[str], grid: str,
                  own: Mapping[str, str | None] | None = None) -> list[str]:
    """``--metric``: each must be an outcome ``ablate.metrics`` declares, or one of the trainer's own metrics
    (``own``: a command's), and the runs have; else one line."""
    declared = [m.name + ("<name>" if m.family else "") for m in SUMMARY if m.compare is not None]
    for name in wanted:
        found = metric(name)
        if name not in (own or {}) and (found is None or found.compare is None):
            allowed = sorted({*have, *declared})
            raise UserInputError(one_of(name, allowed, what="metric") + " (option --metric)")
        if name not in have:
            raise UserInputError(f"grid {grid!r} has no {name} values{did_you_mean(name, have)}; its "
                                 f"metrics: {', '.join(have) or 'none yet'} (option --metric)")
    return list(dict.fromkeys(wanted))


def check_reference(reference: str, arms: Sequence[str], grid: str) -> None:
    """The reference must be one of the grid's arms: else one line naming them."""
    if reference not in arms:
        raise UserInputError(f"grid {grid!r} has no runs of the reference arm {reference!r}"
                             f"{did_you_mean(reference, arms)}; its arms: {', '.join(sorted(arms)) or 'none'}"
                             " (option --reference)")


def build_compare(data: GridData, *, reference: str = REFERENCE, metrics: Sequence[str] = (),
                  stats: Stats = DEFAULT) -> CompareReport:
    """Every arm of ``data``'s grid against ``reference`` (see the module docstring), on ``metrics`` (every
    compared metric the runs have when empty): the grid's families' comparisons (``reports.family``), cell
    by cell, metric by metric. An unknown reference or metric is a UserInputError naming what there is; a
    cell where the reference has no finished run is a note."""
    arms_all = sorted({str(v) for v in data.runs["variant"]}) if len(data.runs) else []
    check_reference(reference, arms_all, data.grid)
    runs = finished(data.runs)
    have = compared_metrics(runs, data.outcomes)
    objective = next(iter(data.outcomes), None)  # a command grid's: what it is compared on by default
    default = [objective] if objective in have else have
    shown = check_metrics(metrics, have, data.grid, own=data.outcomes) if metrics else default
    fams = families(data, reference, stats)
    by_cell: dict[str, list[Comparison]] = {}
    for name in shown:
        fam = fams.of(name)
        for c in fam.comparisons if fam is not None else ():
            by_cell.setdefault(c.cell, []).append(c)
    notes: list[str] = []
    out: list[Comparison] = []
    for label, members in by_cell.items():
        if all(c.reference_runs.empty for c in members):
            arms = sorted({c.arm for c in members})
            notes.append(f"{label or 'this grid'}: no finished {reference} run, so no Δ for "
                         f"{', '.join(arms)} here")
        out += sorted(members, key=lambda c: shown.index(c.metric))  # stable: the family's arm order
    if len(runs) and not out:
        notes.append(f"no arm besides {reference} has finished runs to compare")
    return CompareReport(data.grid, reference, stats, shown, out, notes)
