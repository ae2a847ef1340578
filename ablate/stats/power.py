"""Power over seeds: how many seeds a comparison needs. The two-sided paired t test's power at n seeds for a
true mean with a given spread (noncentral t), the minimum effect n seeds detect with 80% power, the seeds an
observed effect needs at the level its family asks, and the line a report prints for a comparison still open.

The deltas (``stats.delta``), their families and their levels (``stats.corrections``) are read here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ablate.stats.corrections import family_of, level_for
from ablate.stats.delta import ALPHA, DEFAULT, MAX_SEEDS, POWER, Delta, Stats

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def power(effect: float, sd: float, n: ArrayLike, alpha: float = ALPHA) -> Any:
    """The two-sided paired t test's power at ``n`` seeds for a true mean ``effect`` with spread ``sd``
    (noncentral t). ``n`` may be an array.

    >>> round(float(power(1.0, 1.0, 10)), 3)
    0.803
    """
    import numpy as np
    from scipy.stats import nct
    from scipy.stats import t as student

    ns = np.asarray(n, dtype=float)
    df = ns - 1
    crit = student.ppf(1 - alpha / 2, df)
    nc = abs(effect) / sd * np.sqrt(ns)
    upper = np.nan_to_num(nct.sf(crit, df, nc), nan=1.0)
    lower = np.nan_to_num(nct.cdf(-crit, df, nc), nan=0.0)  # the far tail: scipy gives nan where it is ~0
    return np.minimum(1.0, upper + lower)


def mde(sd: float | None, n: int, alpha: float = ALPHA, target: float = POWER) -> float | None:
    """The minimum detectable effect: the true mean the paired t test finds with ``target`` power at ``n``
    seeds."""
    from scipy.optimize import brentq

    if sd is None or n < 2 or not sd > 0:
        return None
    return float(brentq(lambda d: float(power(d, sd, n, alpha)) - target, 1e-12 * sd, 1e4 * sd))


def seeds_needed(effect: float, sd: float | None, alpha: float = ALPHA, target: float = POWER) -> int | None:
    """The fewest seeds at which an effect of ``effect`` with spread ``sd`` is found with ``target`` power;
    None beyond ``MAX_SEEDS`` (an effect of zero is never found) or without a spread.

    >>> seeds_needed(1.0, 1.0)
    10
    """
    import numpy as np

    if sd is None or not sd > 0 or effect == 0:
        return None
    ns = np.arange(2, MAX_SEEDS + 1)
    ok = np.nonzero(np.asarray(power(effect, sd, ns, alpha)) >= target)[0]
    return int(ns[ok[0]]) if ok.size else None


def needs(d: Delta, stats: Stats = DEFAULT, m: int = 1) -> int | None:
    """Seeds needed to resolve ``d``'s observed effect at the level its family asks, or for a decided one its
    last look's level over its family, and more than it has (None: no spread yet, identical arms, or more
    than ``MAX_SEEDS``)."""
    level = d.decision.level / max(d.decision.family, 1) if d.decision is not None else level_for(stats, m)
    n = sign_seeds(level) if d.no_spread else seeds_needed(d.shift, d.sd, level)
    return max(n, d.n + 1) if n is not None else None  # an open comparison needs more than it has


def sign_seeds(level: float) -> int:
    """The fewest pairs of one sign whose exact sign-flip p, ``2 / 2**n``, is below ``level``: what n pairs
    with no spread need, if every further pair differs the same way.

    >>> sign_seeds(0.05), sign_seeds(0.05 / 13)
    (6, 10)
    """
    n = 2
    while 2.0 / 2.0**n >= level:
        n += 1
    return n


NEEDS_MEANING = ("needs ≈ N seeds: the paired seeds at which a true effect the size of the one observed "
                 "would be significant after the family's correction with 80% power (noncentral t); with no "
                 "spread, the pairs of one sign whose exact sign-flip p would be")


def needs_text(n: int | None, d: Delta | None = None) -> str:
    """``needs ≈ 9 seeds``; for identical arms, that no number of seeds would tell them apart; with no spread,
    that the figure assumes every pair keeps its sign."""
    if d is not None and d.identical:
        return "identical at every seed: no difference for more seeds to find"
    if d is not None and d.no_spread and n is not None:
        return f"needs ≈ {n} seeds (no spread yet: if every pair differs the same way)"
    return f"needs ≈ {n} seeds" if n is not None else f"needs > {MAX_SEEDS} seeds (effect ≈ 0)"


def unresolved_line(name: str, d: Delta, digits: int, stats: Stats = DEFAULT, m: int = 1,
                    where: str = "in this table") -> str:
    """``G1 vs baseline: -0.05 ± 0.08, needs ≈ 9 seeds (Holm over 4 comparisons in this table)``: the
    effect, its interval's half-width, the seeds and the family they were worked out for (a decided
    comparison: the look that left it open)."""
    if d.n < 2 or d.mean is None:
        return f"{name}: {d.mean:+.{digits}f} (n={d.n}), needs a second seed for a spread"
    said = f"{d.decision.reading()}, " if d.decision is not None else ""
    spread = (f" ± {(d.hi - d.lo) / 2:.{digits}f}" if d.lo is not None and d.hi is not None else
              f" at every one of {d.n} pairs")
    return (f"{name}: {d.mean:+.{digits}f}{spread}, {said}{needs_text(needs(d, stats, m), d)} "
            f"({family_of(d, stats, m, where)})")
