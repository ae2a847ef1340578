"""``ablate report compare``: every arm of a grid against a reference arm, on every metric the runs have.

The paper's tables are special cases of this one: its rows are whatever arms the grid ran (catalogue arms,
sink fixes, plugin arms), not the paper's. Runs pair by their whole configuration except the variant and the
seed; each distinct rest of the configuration (each learning rate, each value of a model axis) is a *cell*,
and in each cell every arm is compared with the reference's runs of the same seeds. Per metric that
``ablate.metrics`` declares an outcome (``compare``: a paired difference, or for a magnitude that differs by
factors a paired log ratio) and the runs have, a comparison says:

- each arm's mean ± std over seeds;
- the paired Δ (or ratio) with its 95% t interval and p, and the p corrected over the table's comparisons of
  that metric (the family is named: "Holm over 4 comparisons of val_ppl in this table"); a comparison that
  ``ablate run --until-resolved`` decided is read at the look that decided it;
- n, the seeds an unresolved comparison needs, and what the pairing did (``ablate.pairing``).

Pure: a function of ``GridData`` (``reports/data.py``); ``compare_render.py`` writes it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ablate.errors import UserInputError, did_you_mean, one_of
from ablate.metrics import SUMMARY, metric, order
from ablate.reports.data import GridData
from ablate.reports.rows import cell_value, context_key, finished
from ablate.reports.verdict import paired, ratio_metric
from ablate.stats import DEFAULT, Delta, Stats, Summary, correct, family_size, family_text, summarize

REFERENCE = "baseline"


@dataclass(frozen=True)
class Comparison:
    """One arm against the reference in one cell on one metric, after the family's correction. ``m``: the
    comparisons of this metric corrected together; ``family``: their family in words."""

    cell: str  # the cell's label ("train.lr=0.003"); "" when the grid has one
    setting: dict[str, Any]  # the fields that set the cell apart, and their values here
    arm: str
    reference: str
    metric: str
    scale: Literal["diff", "ratio"]
    arm_runs: Summary
    reference_runs: Summary
    delta: Delta
    m: int
    family: str


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


def compared_metrics(runs: Any) -> list[str]:
    """The runs' columns that ``ablate.metrics`` declares an outcome to compare, with a value in some done
    run, in the declared order."""
    done = runs[runs["status"] == "done"] if len(runs) else runs
    have = [str(c) for c in runs.columns
            if (m := metric(str(c))) is not None and m.compare is not None and done[c].notna().any()]
    return order(have)


def check_metrics(wanted: Sequence[str], have: Sequence[str], grid: str) -> list[str]:
    """``--metric``: each must be an outcome ``ablate.metrics`` declares and the runs have; else one line."""
    declared = [m.name + ("<name>" if m.family else "") for m in SUMMARY if m.compare is not None]
    for name in wanted:
        found = metric(name)
        if found is None or found.compare is None:
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


def arm_order(arms: Sequence[str], catalogue: Mapping[str, Any], reference: str) -> list[str]:
    """The arms other than the reference: the catalogue's in its order, then the others (plugin arms) by
    name."""
    known = [a for a in catalogue if a in arms and a != reference]
    return known + sorted(a for a in set(arms) - set(catalogue) if a != reference)


def _cells(runs: Any, model_axes: Sequence[str]) -> tuple[list[tuple], list[dict[str, Any]]]:
    """Each run's cell key (its configuration context and the grid's model axes: everything but the variant
    and the seed) and, per distinct cell in order of appearance, the fields that set it apart."""
    keys = [(context_key(r), tuple((a, _plain(r.get(a))) for a in model_axes)) for _, r in runs.iterrows()]
    distinct = list(dict.fromkeys(keys))
    flat = [dict(ctx) | dict(axes) for ctx, axes in distinct]
    varying = sorted({f for d in flat for f in d if any(e.get(f) != d.get(f) for e in flat)})
    return keys, [{f: d.get(f) for f in varying} for d in flat]


def _plain(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and v != v else v


def _label(setting: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def build_compare(data: GridData, *, reference: str = REFERENCE, metrics: Sequence[str] = (),
                  stats: Stats = DEFAULT) -> CompareReport:
    """Every arm of ``data``'s grid against ``reference`` (see the module docstring), on ``metrics`` (every
    compared metric the runs have when empty). An unknown reference or metric is a UserInputError naming
    what there is; a cell where the reference has no finished run is a note."""
    arms_all = sorted({str(v) for v in data.runs["variant"]}) if len(data.runs) else []
    check_reference(reference, arms_all, data.grid)
    runs = finished(data.runs)
    have = compared_metrics(runs)
    shown = check_metrics(metrics, have, data.grid) if metrics else have
    model_axes = [a for a in data.axes if a.startswith("model.")]
    keys, settings = _cells(runs, model_axes) if len(runs) else ([], [])
    cell_of = list(dict.fromkeys(keys))
    arms = arm_order(arms_all, data.catalogue, reference)
    notes: list[str] = []
    raw: list[Comparison] = []
    for ci, setting in enumerate(settings):
        here = runs[[k == cell_of[ci] for k in keys]]
        ref = here[here["variant"] == reference]
        label = _label(setting)
        if not len(ref):
            notes.append(f"{label or 'this grid'}: no finished {reference} run, so no Δ for "
                         f"{', '.join(sorted(set(here['variant'])))} here")
        for name in shown:
            ratio = ratio_metric(name)
            for arm in arms:
                mine = here[here["variant"] == arm]
                if not len(mine):
                    continue
                delta = paired(mine, ref, name, stats=stats, decisions=data.decisions, ratio=ratio)
                raw.append(Comparison(label, setting, arm, reference, name, "ratio" if ratio else "diff",
                                      _summary(mine, name), _summary(ref, name), delta, 0, ""))
    out = list(raw)
    for name in shown:
        idx = [i for i, c in enumerate(raw) if c.metric == name]
        fixed = correct([raw[i].delta for i in idx], stats)
        m = family_size(fixed)
        fam = family_text(stats, m, f"of {name} in this table")
        for i, d in zip(idx, fixed, strict=True):
            family = d.decision.family_text() if d.decision is not None else fam
            out[i] = replace(raw[i], delta=d, m=m, family=family)
    if len(runs) and not out:
        notes.append(f"no arm besides {reference} has finished runs to compare")
    return CompareReport(data.grid, reference, stats, shown, out, notes)


def _summary(runs: Any, name: str) -> Summary:
    values = [cell_value(r, name) for _, r in runs.iterrows() if r["status"] == "done"]
    return summarize(values, diverged=int((runs["status"] == "diverged").sum()))
