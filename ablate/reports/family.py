"""A grid's family of comparisons: one corrected verdict per comparison, which every page reads.

For one metric, the family is every comparison the grid's design makes against its reference: each other arm
against the reference arm (``baseline`` unless a report names another), in every cell (each learning rate,
each value of a model axis: the whole configuration apart from the variant and the seed), on the metric's
declared scale (``ablate.metrics``' ``compare``: a paired difference, or a paired log ratio). Its p-values are
corrected together once, here, and Tables 1-6, ``report compare``, the scorecard and the HTML page read each
comparison's corrected p, its significance (bold), the family's size and the seeds it needs from that one
computation. A page that shows some of the comparisons shows the family's verdicts, not a correction of its
own subset, and names the family once: "Holm over 13 comparisons of val_ppl against baseline in this grid".

A comparison that ``ablate run --until-resolved`` decided keeps the looks' reading (it spent its alpha over
them): it leaves the family, and every page reads it at the look that decided it.

A page's comparison is found in the family by the runs it pairs (``reports.verdict.pair_runs``): the same
runs, the same metric, the same scale. A question a page asks that is not one of the grid's comparisons (a
claim between two arms neither of which is the reference, a ratio read against a bound other than 1, a level,
runs pooled across cells) is that page's own, corrected with the page's other such questions, and said so.

Pure: a function of ``GridData``; computed once per grid data, reference and reading (``families``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ablate.metrics import metric, order
from ablate.reports.data import GridData
from ablate.reports.rows import Context, cell_value, context_key, finished
from ablate.reports.verdict import pair_runs, paired, ratio_metric
from ablate.stats import DEFAULT, Delta, Stats, Summary, correct, family_size, family_text, summarize
from ablate.stats.power import needs, needs_text

if TYPE_CHECKING:
    import pandas as pd

REFERENCE = "baseline"  # the arm a grid's comparisons are made against unless a report names another
RunsKey = frozenset[str]  # the run ids a comparison pairs (both arms)


@dataclass(frozen=True)
class Comparison:
    """One arm against the reference in one cell on one metric, after the family's correction. ``m``: the
    comparisons of this metric corrected together; ``family``: their family in words; ``runs``: the run ids
    it pairs, by which a page finds it."""

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
    runs: RunsKey = frozenset()
    same_runs: bool = False  # the two arms' runs are equal on every compared metric at every seed
    stats: Stats = DEFAULT  # how it was read (the seeds it needs are worked out at its family's level)
    better: Literal["lower", "higher"] | None = None  # which way is better on ``metric`` (None: no way)

    @property
    def needs(self) -> int | None:
        """The seeds an open comparison needs at its family's level (``ablate.stats.power.needs``); None once
        it is resolved, for identical arms, below two pairs, or beyond what seeds could find."""
        d = self.delta
        return None if d.resolved or d.identical or d.n < 2 else needs(d, self.stats, self.m)

    @property
    def verdict(self) -> str:
        """``resolved: lower, better`` / ``resolved at look 2 of 3, n=4 seeds: ...`` / ``needs ≈ 12 seeds`` /
        an identical pair's reading / why there is no pair."""
        d = self.delta
        if d.mean is None:
            return self._no_pairs()
        if d.identical:
            return self.sameness
        if d.n < 2:
            return "needs a second seed for a spread"
        said = d.decision.reading() if d.decision is not None else ""
        if d.resolved:
            return f"{said or 'resolved'}{self._direction()}"
        need = needs_text(self.needs, d)
        return f"{said}; {need}" if said else need

    def _no_pairs(self) -> str:
        for runs, who in ((self.reference_runs, self.reference), (self.arm_runs, "this arm")):
            if runs.empty:
                return f"no pairs: no {who} run here"
            if runs.diverged and not runs.n:
                return f"no pairs: every run of {who} diverged"
            if not runs.n:
                return f"no pairs: {who} has no {self.metric} value"
        return "no pairs: the arms share no seed"

    def _direction(self) -> str:
        better = self.better
        side = self.delta.sign
        if better is None or side == 0:
            return ""
        lower = side < 0
        good = lower == (better == "lower")
        return f": {'lower' if lower else 'higher'}, {'better' if good else 'worse'}"

    @property
    def pairing_text(self) -> str:
        """What pairing by seed did (``ablate.stats.pairing``)."""
        if self.delta.identical:
            return "identical runs: nothing left to pair away" if self.same_runs else ""
        p = self.delta.pairing
        return p.text() if p is not None else ""

    def as_row(self) -> dict[str, Any]:
        """The comparison as plain values: ``report compare``'s JSON and CSV row, and each delta of a paper
        table's JSON (the same fields, so the pages agree by construction)."""
        d, p = self.delta, self.delta.pairing
        return {
            "cell": self.setting, "arm": self.arm, "reference": self.reference, "metric": self.metric,
            "scale": self.scale, "arm_mean": _num(self.arm_runs.mean), "arm_std": _num(self.arm_runs.std),
            "arm_n": self.arm_runs.n, "arm_diverged": self.arm_runs.diverged,
            "reference_mean": _num(self.reference_runs.mean), "reference_std": _num(self.reference_runs.std),
            "reference_n": self.reference_runs.n, "reference_diverged": self.reference_runs.diverged,
            "delta": d.mean, "lo": d.lo, "hi": d.hi, "n": d.n, "p": d.p, "p_perm": d.p_perm, "p_adj": d.p_adj,
            "significant": d.resolved, "family": self.family, "family_size": self.m, "verdict": self.verdict,
            "needs_seeds": self.needs, "identical": d.identical, "correlation": p.r if p else None,
            "worth_unpaired_seeds": p.worth if p else None,
            "resolved_at_look": d.decision.look if d.decision else None,
            "looks": list(d.decision.plan) if d.decision else None}

    @property
    def sameness(self) -> str:
        """What a difference of exactly zero at every seed means here: identical runs only when they are
        (every compared metric equal), else that this metric is."""
        if not self.delta.identical:
            return ""
        if self.same_runs:
            return "identical runs: every metric equal at every seed"
        values = set(self.arm_runs.values) | set(self.reference_runs.values)
        if len(values) == 1:
            return f"{self.metric} is {values.pop():g} in every run of both arms; the runs differ"
        return f"{self.metric} equal at every seed; the runs differ"


@dataclass(frozen=True)
class Family:
    """The grid's comparisons of one metric against ``reference``, corrected together."""

    grid: str
    metric: str
    reference: str
    stats: Stats
    comparisons: tuple[Comparison, ...]

    @property
    def m(self) -> int:
        """How many comparisons were corrected together (those with a p that no look decided)."""
        return family_size(c.delta for c in self.comparisons)

    @property
    def text(self) -> str:
        """The family in words: ``Holm over 13 comparisons of val_ppl against baseline in this grid``."""
        return family_text(self.stats, self.m, f"of {self.metric} against {self.reference} in this grid")

    def find(self, runs: RunsKey) -> Comparison | None:
        """The family's comparison that pairs exactly ``runs``; None when none does."""
        if not runs:
            return None
        return next((c for c in self.comparisons if c.runs == runs and c.delta.mean is not None), None)


@dataclass(frozen=True)
class Families:
    """A grid's families, one per compared metric, against one reference, under one reading."""

    grid: str
    reference: str
    stats: Stats
    by_metric: Mapping[str, Family]

    def of(self, name: str) -> Family | None:
        return self.by_metric.get(name)

    def find(self, name: str, runs: RunsKey, *, ratio: bool, bound: float = 1.0) -> Comparison | None:
        """The family's comparison of ``name`` over ``runs``, if the page reads it as the family does (on the
        metric's declared scale, against 1 for a ratio)."""
        fam = self.by_metric.get(name)
        if fam is None or bound != 1.0 or ratio != ratio_metric(name):
            return None
        return fam.find(runs)

    def read(self, name: str, treatment: pd.DataFrame, reference: pd.DataFrame, *, ratio: bool = False,
             bound: float = 1.0) -> Comparison | None:
        """The family's comparison of two arms' runs (frames) on ``name``, or None when a page's question
        is not one of the grid's comparisons."""
        return self.find(name, pair_runs(treatment, reference, name, ratio=ratio), ratio=ratio, bound=bound)


def compared_metrics(runs: pd.DataFrame, own: Mapping[str, str | None] | None = None) -> list[str]:
    """The runs' columns that ``ablate.metrics`` declares an outcome to compare, with a value in some done
    run, in the declared order; with ``own`` (a trainer's own metrics, ``GridData.outcomes``: a command's),
    those first, in their order."""
    done = runs[runs["status"] == "done"] if len(runs) else runs
    mine = [name for name in own or {} if name in runs.columns and done[name].notna().any()]
    have = [str(c) for c in runs.columns
            if (m := metric(str(c))) is not None and m.compare is not None and done[c].notna().any()]
    return mine + [name for name in order(have) if name not in mine]


def better_of(name: str, own: Mapping[str, str | None] | None = None) -> Literal["lower", "higher"] | None:
    """Which way is better on metric ``name``: a trainer's own word for its metrics (``own``), else what
    ``ablate.metrics`` declares; None when neither says."""
    said = (own or {}).get(name)
    if said in ("lower", "higher"):
        return "lower" if said == "lower" else "higher"
    declared = metric(name)
    return declared.better if declared is not None else None


def arm_order(arms: Sequence[str], catalogue: Mapping[str, Any], reference: str) -> list[str]:
    """The arms other than the reference: the catalogue's in its order, then the others (plugin arms) by
    name."""
    known = [a for a in catalogue if a in arms and a != reference]
    return known + sorted(a for a in set(arms) - set(catalogue) if a != reference)


def families(data: GridData, reference: str = REFERENCE, stats: Stats = DEFAULT) -> Families:
    """Every family of ``data``'s grid against ``reference`` (see the module docstring), computed once per
    grid data, reference and reading: every page of one report reads the same object."""
    key = ("families", reference, stats)
    cached = data.memo.get(key)
    if cached is None:
        cached = data.memo[key] = _families(data, reference, stats)
    assert isinstance(cached, Families)
    return cached


def _families(data: GridData, reference: str, stats: Stats) -> Families:
    runs = finished(data.runs)
    arms_all = sorted({str(v) for v in data.runs["variant"]}) if len(data.runs) else []
    if reference not in arms_all or not len(runs):
        return Families(data.grid, reference, stats, {})
    model_axes = [a for a in data.axes if a.startswith("model.")]
    keys, settings = _cells(runs, model_axes)
    cell_of = list(dict.fromkeys(keys))
    arms = arm_order(arms_all, data.catalogue, reference)
    names = compared_metrics(runs, data.outcomes)
    raw: dict[str, list[Comparison]] = {name: [] for name in names}
    for ci, setting in enumerate(settings):
        here = runs[[k == cell_of[ci] for k in keys]]
        ref = here[here["variant"] == reference]
        label = ", ".join(f"{k}={v}" for k, v in setting.items())
        for arm in arms:
            mine = here[here["variant"] == arm]
            if not len(mine):
                continue
            for name in names:
                ratio = ratio_metric(name)
                delta = paired(mine, ref, name, stats=stats, decisions=data.decisions, ratio=ratio)
                raw[name].append(Comparison(label, setting, arm, reference, name,
                                            "ratio" if ratio else "diff", _summary(mine, name),
                                            _summary(ref, name), delta, 0, "",
                                            pair_runs(mine, ref, name, ratio=ratio), stats=stats,
                                            better=better_of(name, data.outcomes)))
    return Families(data.grid, reference, stats,
                    {name: _corrected(data.grid, name, reference, stats, _same(raw, name)) for name in names})


def _same(raw: Mapping[str, list[Comparison]], name: str) -> list[Comparison]:
    """``raw[name]`` with ``same_runs`` set where the arm's runs equal the reference's on every metric."""
    differ = {(c.cell, c.arm) for comps in raw.values() for c in comps
              if c.delta.mean is not None and not c.delta.identical and not _timing(c.metric)}
    return [replace(c, same_runs=c.delta.identical and (c.cell, c.arm) not in differ) for c in raw[name]]


def _corrected(grid: str, name: str, reference: str, stats: Stats, raw: list[Comparison]) -> Family:
    fixed = correct([c.delta for c in raw], stats)
    fam = Family(grid, name, reference, stats,
                 tuple(replace(c, delta=d) for c, d in zip(raw, fixed, strict=True)))
    m, text = fam.m, fam.text
    return replace(fam, comparisons=tuple(
        replace(c, m=m, family=c.delta.decision.family_text() if c.delta.decision is not None else text)
        for c in fam.comparisons))


def own_family(deltas: Sequence[Delta], found: Sequence[Comparison | None], stats: Stats) -> list[Delta]:
    """A page's deltas read through the grid's family: each that is one of the grid's comparisons takes the
    family's corrected delta (``found``); the others, the page's own questions, are corrected together."""
    own = [i for i, c in enumerate(found) if c is None]
    fixed = correct([deltas[i] for i in own], stats)
    out = [c.delta if c is not None else deltas[i] for i, c in enumerate(found)]
    for i, d in zip(own, fixed, strict=True):
        out[i] = d
    return out


CellKey = tuple[Context, Context]  # a run's cell: its configuration context and its values of the model axes


def _cells(runs: pd.DataFrame, model_axes: Sequence[str]) -> tuple[list[CellKey], list[dict[str, object]]]:
    """Each run's cell key (its configuration context and the grid's model axes: everything but the variant
    and the seed) and, per distinct cell in order of appearance, the fields that set it apart."""
    keys = [(context_key(r), tuple((a, _plain(r.get(a))) for a in model_axes)) for _, r in runs.iterrows()]
    distinct = list(dict.fromkeys(keys))
    flat = [dict(ctx) | dict(axes) for ctx, axes in distinct]
    varying = sorted({f for d in flat for f in d if any(e.get(f) != d.get(f) for e in flat)})
    return keys, [{f: d.get(f) for f in varying} for d in flat]


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _timing(name: str) -> bool:
    declared = metric(name)
    return declared is not None and declared.timing


def _plain(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and v != v else v


def _summary(runs: pd.DataFrame, name: str) -> Summary:
    values = [cell_value(r, name) for _, r in runs.iterrows() if r["status"] == "done"]
    return summarize(values, diverged=int((runs["status"] == "diverged").sum()))
