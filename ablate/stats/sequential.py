"""Looking again: adding seeds until a comparison resolves, and what such a comparison was decided as.

``ablate run --until-resolved`` looks at a family of comparisons several times, adding seeds to the open
ones in between. Looking again at alpha each time would raise the false-positive rate with every look, so:

- ``looks(first, round, most)`` plans the looks (the seeds each one has) and ``look_levels`` gives each its
  level: O'Brien-Fleming-shaped alpha spending (Lan-DeMets), each look tested at the alpha spent since the
  last, so the chance of a false resolution over every look is at most alpha, whatever their dependence;
- ``resolved_at_look`` corrects the whole family at a look and says which comparisons it resolves.

A ``Decision`` is what the loop decided for one comparison, with its looks. The store keeps it
(``Store.record_decisions``), and every report reads such a comparison at the level of the look that decided
it ("resolved at look 2 of 3, n=4 seeds"), never again at a fixed-n level: testing it again at alpha would be
one more look, which the spending did not pay for (``decided``).

Pure (numpy and scipy imported when called).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ablate.errors import UserInputError
from ablate.stats.corrections import correct
from ablate.stats.delta import ALPHA, DEFAULT, Decision, Delta, Stats


def looks(first: int, step: int, most: int) -> list[int]:
    """The planned looks of a comparison that starts with ``first`` seeds and adds ``step`` per round up to
    ``most``: ``looks(3, 2, 10) == [3, 5, 7, 9, 10]``."""
    if first < 2 or step < 1 or most < first:
        raise UserInputError(f"looks: need 2 <= first seeds ({first}) <= the most seeds ({most}) and a round "
                             f"of at least 1 seed ({step})")
    out = list(range(first, most + 1, step))
    return out if out[-1] == most else [*out, most]


def spent(fraction: float, alpha: float = ALPHA) -> float:
    """Lan-DeMets' O'Brien-Fleming-shaped alpha spending: the error allowed by the time ``fraction`` of the
    planned seeds has been seen, ``2 - 2 Phi(z_{alpha/2} / sqrt(fraction))``; ``spent(1) == alpha``."""
    from scipy.stats import norm

    if fraction <= 0:
        return 0.0
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(min(fraction, 1.0))))


def look_levels(plan: Sequence[int], alpha: float = ALPHA) -> list[float]:
    """The level each look's p must beat: the alpha spent since the previous look (O'Brien-Fleming spending
    over the planned seeds ``plan``). Each look spends its own share, so the chance of a false resolution at
    any look is at most their sum, ``alpha``, whatever the looks' dependence: a conservative split, exact to
    compute at any n.

    >>> [round(x, 5) for x in look_levels([5, 10])]
    [0.00557, 0.04443]
    """
    most = plan[-1]
    fractions = [n / most for n in plan]
    return [spent(f, alpha) - spent(prev, alpha) for prev, f in zip([0.0, *fractions[:-1]], fractions,
                                                                    strict=True)]


def resolved_at_look(deltas: Sequence[Delta], level: float, stats: Stats = DEFAULT) -> list[bool]:
    """Which of a family's comparisons one look resolves: its p, corrected over the whole family (``stats``'
    correction; a delta without a p is not part of it), below the look's ``level`` (``look_levels``).
    Correcting the whole family at every look keeps each look's family-wise error at ``level``, so over all
    looks it is at most their sum.

    >>> from ablate.stats import compare
    >>> resolved_at_look([compare([-1.0, -1.1, -0.9, -1.05]), compare([0.2, -0.3, 0.1, 0.0])], level=0.01)
    [True, False]
    """
    return [d.p_adj is not None and d.p_adj < level for d in correct(deltas, stats)]


def decided(decisions: Iterable[Decision], metric: str, runs: Iterable[str]) -> Decision | None:
    """The decision about exactly these paired ``runs`` on ``metric``, if ``--until-resolved`` made one.

    The runs identify the comparison (ids are content addressed): a report that pairs other runs (more seeds
    added since, a ``--where`` that leaves some out, several settings pooled) is reading another comparison,
    at a fixed n.
    """
    wanted = frozenset(runs)
    if not wanted:
        return None
    return next((d for d in decisions if d.metric == metric and frozenset(d.runs) == wanted), None)


def with_decision(delta: Delta, decision: Decision | None) -> Delta:
    """``delta`` read at the look that decided it: its corrected p is that look's and its level that look's
    (``Delta.resolved`` compares the two); unchanged without a decision."""
    from dataclasses import replace

    if decision is None:
        return delta
    return replace(delta, p_adj=decision.p_adj, decision=decision)
