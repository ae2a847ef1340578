"""What ``--until-resolved`` found: one verdict line per comparison (``verdict_lines``), and the decisions the
store keeps (``decisions``), so that every report reads a comparison at the look that decided it."""

from __future__ import annotations

from ablate.resolve.cells import VARIANT, UntilResolved, variant_name
from ablate.resolve.looks import Resolution
from ablate.stats import CORRECTION_NAMES, Decision, LookRecord, Stats, correct
from ablate.stats.power import needs_text, seeds_needed


def verdict_lines(outcome: Resolution, spec: UntilResolved) -> list[str]:
    """One line per comparison: its last delta, and the look that resolved it or the seeds it still needs."""
    m = len(outcome.comparisons)
    out = [f"{spec.name}, paired t over seeds, {CORRECTION_NAMES[spec.correction]} over {m} comparison"
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


def decisions(outcome: Resolution, spec: UntilResolved) -> list[Decision]:
    """What the looks decided, for the store (``Store.record_decisions``): each comparison a look resolved,
    and, once the looks went to the end of the plan, each one still open there (decided unresolved at the
    last look's level). A loop stopped early (runs that did not end) decides nothing about its open
    comparisons: a rerun goes on with them."""
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
            grid=outcome.grid, treatment=variant_name(c.axes.get(VARIANT)), reference=spec.reference,
            metric=spec.name,
            cell={k: v for k, v in c.axes.items() if k != VARIANT}, runs=outcome.looks[last].runs[i],
            look=None if j is None else j + 1, n=history[-1].n, level=history[-1].level,
            p_adj=history[-1].p_adj, family=len(outcome.comparisons), correction=spec.correction,
            plan=tuple(outcome.plan), history=history))
    return out
