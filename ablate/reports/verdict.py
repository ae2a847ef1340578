"""One verdict per comparison: two arms' runs paired by configuration and seed, read by ``ablate.stats``, or
at the look of ``ablate run --until-resolved`` that decided them (``ablate.stats.sequential``).

Every report that compares two arms (the paper's tables, the scorecard, ``report compare``) pairs them here,
so a comparison that ``--until-resolved`` decided reads "resolved at look k" in each of them, and none reads
it again at a fixed-n level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ablate.metrics import metric as declared
from ablate.reports.rows import cell_value, pair_key
from ablate.stats import DEFAULT, Decision, Delta, Stats, paired_delta, paired_ratio
from ablate.stats.sequential import decided, with_decision

if TYPE_CHECKING:
    import pandas as pd


def arm_values(runs: pd.DataFrame, metric: str) -> dict[Any, tuple[str, float | None]]:
    """``{pair key: (run id, value)}`` of an arm's done runs (a row of the runs frame each)."""
    if not len(runs):
        return {}
    return {pair_key(r): (str(r["run_id"]), cell_value(r, metric)) for _, r in runs.iterrows()
            if r.get("status") == "done"}


def ratio_metric(metric: str) -> bool:
    """Whether ``metric`` is compared by its paired log ratio (its declaration in ``ablate.metrics``)."""
    found = declared(metric)
    return found is not None and found.compare == "ratio"


def paired(treatment: pd.DataFrame, reference: pd.DataFrame, metric: str, *, stats: Stats = DEFAULT,
           decisions: Sequence[Decision] = (), ratio: bool = False, bound: float = 1.0) -> Delta:
    """The paired comparison of two arms' runs (frames of done and diverged runs) on ``metric``: the mean
    difference (``ratio``: the geometric mean ratio, tested against ``bound``) over the keys both measured.
    When ``--until-resolved`` decided exactly these pairs on this metric, read the way it compares that
    metric (``ablate.metrics``' ``compare``), the delta carries that decision and is read at its look."""
    t, b = arm_values(treatment, metric), arm_values(reference, metric)
    tv, bv = {k: v for k, (_, v) in t.items()}, {k: v for k, (_, v) in b.items()}
    delta = paired_ratio(tv, bv, bound=bound, stats=stats) if ratio else paired_delta(tv, bv, stats=stats)
    if not decisions or bound != 1.0 or ratio != ratio_metric(metric):
        return delta
    return with_decision(delta, decided(decisions, metric, _paired_ids(t, b, ratio)))


def pair_runs(treatment: pd.DataFrame, reference: pd.DataFrame, metric: str, *, ratio: bool = False
              ) -> frozenset[str]:
    """The run ids of both arms that ``paired`` pairs on ``metric``: what a comparison is found by, in the
    grid's family (``reports.family``) and among ``--until-resolved``'s decisions."""
    return frozenset(_paired_ids(arm_values(treatment, metric), arm_values(reference, metric), ratio))


def _paired_ids(t: dict[Any, tuple[str, float | None]], b: dict[Any, tuple[str, float | None]],
                ratio: bool) -> list[str]:
    return [rid for k in set(t) & set(b) if _usable(t[k][1], ratio) and _usable(b[k][1], ratio)
            for rid in (t[k][0], b[k][0])]


def _usable(v: float | None, ratio: bool) -> bool:
    return v is not None and math.isfinite(v) and (v > 0 or not ratio)
