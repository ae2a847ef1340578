"""Statistics over seeds: the one owner of every interval, p-value, family correction and power figure that
the tables, the scorecard and ``ablate run --until-resolved`` use (below the reports and the executors in the
layer order of docs/internals.md, so both import it downward).

A comparison is a set of paired values ``x`` (treatment minus reference per seed; for a ratio, the log of
treatment over reference per seed; for a level, the runs' values) read against a null value ``m0``:

- the interval is paired Student t with n-1 degrees of freedom (``Stats.interval = "t"``, the default). It
  keeps its 95% coverage at 2-10 seeds, where a bootstrap of n values cannot reach outside their range. The
  BCa bootstrap is opt-in (``"bootstrap"``) and used only from ``BOOTSTRAP_MIN_N`` pairs; below that the t
  interval is used and the table says so. One value gets no interval ("n=1");
- a ratio's interval is the t interval of the mean paired log ratio, exponentiated: its point estimate is the
  geometric mean of the per-seed ratios;
- the p-value is the paired t test's (two-sided), beside an exact sign-flip permutation p for n <=
  ``PERM_MAX_N`` as a distribution-free check (reported; with 3 seeds it cannot go below 0.25, so it does not
  replace the t test for measurements that vary continuously);
- no verdict from no evidence: a metric that takes few values (a count, loss spikes, a share of 16 probe
  rows) ties, and n pairs with no spread at all carry only the evidence of their signs. Where the paired
  values tie (two equal magnitudes, or a zero), the p is the larger of the t p and the exact sign-flip p; with
  no spread it is the sign-flip p itself, ``2 / 2**n`` (0.5 at n = 2), never 0, and there is no interval
  (``Delta.no_spread``: a t interval of zero width is not a measurement of the spread).
  ``tests/test_stats_validity.py`` simulates such metrics under the null at n = 2-10;
- a family (a table's deltas, the scorecard's claims) is corrected together: Holm by default (family-wise
  error), Benjamini-Hochberg or none. A comparison is *resolved* (bold, "holds") only when its corrected p is
  below ``ALPHA``;
- power: the minimum effect the seeds detect with 80% power, and the seeds needed to resolve the effect
  observed (noncentral t, at the per-comparison level ``ALPHA / m`` of a corrected family of m), are
  ``ablate.power``'s, on these deltas and families;
- pairing: the arms' correlation across seeds, and how many unpaired seeds the pairing was worth
  (``Pairing``). A negative correlation makes the paired difference noisier than two independent means; the
  paired t is kept all the same, because it keeps its coverage at any correlation while an unpaired test of
  runs paired by seed does not (``tests/test_stats_validity.py`` simulates both);
- a paired difference of exactly zero at every seed (two arms that are one function give the same runs) is
  read as such (``Delta.identical``): p = 1, nothing to resolve, no seeds that would.

The looks of ``ablate run --until-resolved`` and what it decided are ``ablate.sequential``'s.

Everything is deterministic: the bootstrap draws from a fixed seed, the permutation is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ablate.errors import UserInputError, one_of
from ablate.pairing import Pairing, pairing

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ablate.sequential import Decision

K = TypeVar("K")  # what makes two runs a pair (paired_delta)

BOOTSTRAP_SEED = 0
BOOTSTRAP_DRAWS = 4000
BOOTSTRAP_MIN_N = 20  # below this a bootstrap of n values undercovers badly (it never leaves their range)
CI_LEVEL = 0.95
ALPHA = 0.05
POWER = 0.8
PERM_MAX_N = 12  # 2**12 sign flips: exact and instant
MAX_SEEDS = 1000  # seeds_needed gives up beyond this
INTERVALS = ("t", "bootstrap")
CORRECTIONS = ("holm", "bh", "none")
CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}
Scale = Literal["diff", "log", "level"]


@dataclass(frozen=True)
class Stats:
    """How a report reads its comparisons: the interval method and the family correction."""

    interval: str = "t"
    correction: str = "holm"

    def __post_init__(self) -> None:
        if self.interval not in INTERVALS:
            raise UserInputError(one_of(self.interval, INTERVALS, what="interval") + " (option --interval)")
        if self.correction not in CORRECTIONS:
            raise UserInputError(one_of(self.correction, CORRECTIONS,
                                        what="correction") + " (option --correction)")


DEFAULT = Stats()


@dataclass(frozen=True)
class Summary:
    """The runs behind one table cell: ``values`` are the finite measurements (one per seed that finished),
    ``diverged`` counts the runs that diverged (the paper's "-")."""

    values: tuple[float, ...] = ()
    diverged: int = 0

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def empty(self) -> bool:
        return not self.values and not self.diverged

    @property
    def mean(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        """Sample standard deviation over seeds (ddof=1); None with fewer than two values."""
        if len(self.values) < 2:
            return None
        m = sum(self.values) / len(self.values)  # the mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (len(self.values) - 1))


def summarize(values: Iterable[float | None], *, diverged: int = 0) -> Summary:
    """A Summary of the finite values (None and NaN are dropped: not measured)."""
    finite = tuple(float(v) for v in values if v is not None and math.isfinite(float(v)))
    return Summary(finite, diverged)


@dataclass(frozen=True)
class Delta:
    """One comparison: ``mean`` with its interval ``[lo, hi]`` over ``n`` values, on the scale the reader sees
    (a difference, a ratio, a level). ``p`` is the paired t p-value against ``null`` (on the test's scale: the
    log of the bound for a ratio; where the values tie, no smaller than the exact sign-flip p:
    ``evidence_p``), ``p_perm`` the exact sign-flip p (n <= 12), ``p_adj`` the p after the family's
    correction; ``sd`` the spread of the tested values; ``method`` the interval actually used.
    ``pairing``: what pairing by seed did (paired comparisons); ``decision``: what ``--until-resolved``
    decided about exactly these runs (``ablate.sequential``), whose look's level it is read at."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int
    diffs: tuple[float, ...] = field(default=(), repr=False)
    p: float | None = None
    p_perm: float | None = None
    p_adj: float | None = None
    sd: float | None = None
    method: str = "t"
    scale: Scale = "diff"
    # the tested values' mean minus the null, on the test's scale
    shift: float = field(default=0.0, repr=False)
    pairing: Pairing | None = field(default=None, repr=False)
    decision: Decision | None = field(default=None, repr=False)

    def side(self) -> int:
        """+1 when the whole CI is above zero, -1 when below, 0 when it straddles zero or is unknown."""
        if self.lo is None or self.hi is None:
            return 0
        if self.lo > 0:
            return 1
        if self.hi < 0:
            return -1
        return 0

    @property
    def level(self) -> float:
        """The level its corrected p must beat: alpha, or the level of the look that decided it."""
        return self.decision.level if self.decision is not None else ALPHA

    @property
    def resolved(self) -> bool:
        """Significant after the family's correction (before one, uncorrected), at its level."""
        p = self.p_adj if self.p_adj is not None else self.p
        return p is not None and p < self.level

    @property
    def no_spread(self) -> bool:
        """Two or more values, all equal and not all zero: their signs are the only evidence (p =
        ``2 / 2**n``), and there is no interval."""
        return self.n >= 2 and self.sd == 0 and not self.identical

    @property
    def tied(self) -> bool:
        """The tested values tie (``ties``: a metric of few values), so ``p`` is no smaller than the exact
        sign-flip p."""
        if len(self.diffs) < 2:
            return False
        null = sum(self.diffs) / len(self.diffs) - self.shift
        return ties([x - null for x in self.diffs])

    @property
    def identical(self) -> bool:
        """Every paired difference is exactly zero (on the tested scale): the arms gave the same values."""
        return bool(self.diffs) and self.scale != "level" and all(x == 0 for x in self.diffs)

    @property
    def sign(self) -> int:
        """The side of the null the estimate lies on (+1, -1, 0)."""
        return (self.shift > 0) - (self.shift < 0)


EMPTY = Delta(None, None, None, 0)


# ---------------------------------------------------------------- the t machinery
def t_interval(x: ArrayLike, *, level: float = CI_LEVEL) -> tuple[Any, Any]:
    """Student t interval (n-1 df) of the mean of ``x``; ``(None, None)`` with fewer than two values. ``x``
    may be an array of samples along its last axis (then the bounds are arrays).

    >>> lo, hi = t_interval([1.0, 2.0, 3.0]); round(lo, 3), round(hi, 3)
    (-0.484, 4.484)
    """
    import numpy as np
    from scipy.stats import t as student

    a = np.asarray(x, dtype=float)
    n = a.shape[-1]
    if n < 2:
        return None, None
    mean = a.mean(axis=-1)
    half = student.ppf(0.5 + level / 2, n - 1) * a.std(ddof=1, axis=-1) / math.sqrt(n)
    lo, hi = mean - half, mean + half
    return (float(lo), float(hi)) if a.ndim == 1 else (lo, hi)


def t_pvalue(x: ArrayLike, null: float = 0.0) -> Any:
    """Two-sided one-sample t p-value of ``mean(x) == null`` (a float; an array for samples along the last
    axis); None with fewer than two values. No spread has no t statistic: it gives the exact sign-flip p of n
    values of one sign, ``2 / 2**n`` (1 exactly at the null), the evidence n equal values carry.

    >>> t_pvalue([0.0625, 0.0625]), t_pvalue([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    (0.5, 0.03125)
    """
    import numpy as np
    from scipy.stats import t as student

    a = np.asarray(x, dtype=float) - null
    n = a.shape[-1]
    if n < 2:
        return None
    mean, sd = a.mean(axis=-1), a.std(ddof=1, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * student.sf(np.abs(mean) / (sd / math.sqrt(n)), n - 1)
    p = np.where(sd > 0, p, np.where(mean == 0, 1.0, 2.0 / 2.0 ** n))
    return float(p) if a.ndim == 1 else p


def sign_flip_pvalue(x: Sequence[float], null: float = 0.0) -> float | None:
    """Exact two-sided sign-flip permutation p of ``mean(x) == null`` (every one of the 2**n flips), for
    2 <= n <= ``PERM_MAX_N``; None otherwise.

    >>> sign_flip_pvalue([1.0, 2.0, 3.0])
    0.25
    """
    import numpy as np

    a = np.asarray(x, dtype=float) - null
    if not 2 <= a.size <= PERM_MAX_N:
        return None
    flips = 1 - 2 * ((np.arange(2 ** a.size)[:, None] >> np.arange(a.size)) & 1)  # (2**n, n) of +-1
    sums = np.abs(flips @ a)
    return float(np.mean(sums >= abs(a.sum()) * (1 - 1e-12)))


def ties(x: ArrayLike) -> bool:
    """Whether the values ``x`` (differences from the null) take few values: two of them equal in magnitude,
    or one of them zero. Measurements that vary continuously never do; a count, a share of a few rows or two
    arms that agree at a seed do.

    >>> ties([0.0625, 0.0625, 0.125]), ties([0.013, -0.02, 0.007])
    (True, False)
    """
    import numpy as np

    mags = np.round(np.abs(np.asarray(x, dtype=float)), 12)
    return bool(mags.size and (np.unique(mags).size < mags.size or (mags == 0).any()))


def evidence_p(x: ArrayLike, null: float = 0.0) -> float | None:
    """The p a verdict reads: the t p (``t_pvalue``), or where the values tie (``ties``) the larger of it and
    the exact sign-flip p, whose error rate holds for any symmetric null however few values the metric
    takes. None with fewer than two values.

    >>> evidence_p([0.0625, 0.0625]), evidence_p([1.0, 1.0, 0.0])
    (0.5, 0.5)
    """
    import numpy as np

    a = np.asarray(x, dtype=float)
    p = t_pvalue(a, null)
    if p is None:
        return None
    perm = sign_flip_pvalue(a, null)
    return float(max(p, perm)) if perm is not None and ties(a - null) else float(p)


def bootstrap_ci(diffs: Iterable[float], *, level: float = CI_LEVEL, draws: int = BOOTSTRAP_DRAWS,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float | None, float | None]:
    """BCa bootstrap CI of the mean of ``diffs`` (``scipy.stats.bootstrap``, ``draws`` resamples from
    ``seed``). Valid only for many values: the reports use it from ``BOOTSTRAP_MIN_N`` on, and only when
    asked.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    import numpy as np
    from scipy.stats import bootstrap

    x = np.asarray(list(diffs), dtype=float)
    if x.size < 2:
        return None, None
    if np.ptp(x) == 0:  # no spread to estimate; BCa's acceleration is undefined there
        return float(x[0]), float(x[0])
    res = bootstrap((x,), np.mean, vectorized=True, method="BCa", confidence_level=level, n_resamples=draws,
                    rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def compare(x: Sequence[float], *, null: float = 0.0, scale: Scale = "diff", stats: Stats = DEFAULT) -> Delta:
    """The comparison of values ``x`` (paired differences, paired log ratios with ``scale="log"``, or a
    level's values) against ``null`` on the same scale. A log comparison reports its mean and interval
    exponentiated.

    >>> d = compare([-1.0, -0.8]); round(d.lo, 2), round(d.hi, 2), d.method
    (-2.17, 0.37, 't')
    """
    import numpy as np

    a = np.asarray(x, dtype=float)
    if a.size == 0 or not np.all(np.isfinite(a)):
        return EMPTY
    mean = float(a.mean())
    method = "bootstrap" if stats.interval == "bootstrap" and a.size >= BOOTSTRAP_MIN_N else "t"
    lo, hi = bootstrap_ci(a) if method == "bootstrap" else t_interval(a)
    if a.size > 1 and np.ptp(a) == 0:  # no spread: a zero-width interval would claim a precision never seen
        lo, hi = None, None

    def out(v: float | None) -> float | None:  # on the reader's scale
        return math.exp(v) if scale == "log" and v is not None else v

    return Delta(round(math.exp(mean) if scale == "log" else mean, 12), out(lo), out(hi), int(a.size),
                 tuple(map(float, a)), evidence_p(a, null), sign_flip_pvalue(a, null), None,
                 float(a.std(ddof=1)) if a.size > 1 else None, method, scale, mean - null)


def pairs(treatment: Mapping[K, float | None],
          reference: Mapping[K, float | None]) -> list[tuple[float, float]]:
    """``(treatment[k], reference[k])`` over the keys both measured (finite), in key order."""
    out = []
    for key in sorted(set(treatment) & set(reference), key=repr):
        a, b = treatment[key], reference[key]
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
            out.append((float(a), float(b)))
    return out


def paired_delta(treatment: Mapping[K, float | None], reference: Mapping[K, float | None], *,
                 stats: Stats = DEFAULT) -> Delta:
    """Mean of ``treatment[k] - reference[k]`` over keys both measured (finite), with its interval and p.

    Keys are what makes two runs a pair: the same config apart from the variant, and the same seed.

    >>> paired_delta({0: 5.0, 1: 5.2}, {0: 6.0, 1: 6.0, 2: 6.1}).mean
    -0.9
    """
    both = pairs(treatment, reference)
    return replace(compare([a - b for a, b in both], stats=stats), pairing=pairing(both))


def paired_ratio(treatment: Mapping[K, float | None], reference: Mapping[K, float | None], *,
                 bound: float = 1.0, stats: Stats = DEFAULT) -> Delta:
    """The geometric mean of the paired ratios ``treatment[k] / reference[k]``, with the exponentiated t
    interval of the mean log ratio, tested against ``bound``. Pairs with a non-positive value are dropped (no
    log).

    >>> round(paired_ratio({0: 1.0, 1: 2.0}, {0: 4.0, 1: 8.0}).mean, 6)
    0.25
    """
    both = [(math.log(a), math.log(b)) for a, b in pairs(treatment, reference) if a > 0 and b > 0]
    return replace(compare([a - b for a, b in both], null=math.log(bound), scale="log", stats=stats),
                   pairing=pairing(both))


def level(values: Iterable[float | None], *, bound: float, stats: Stats = DEFAULT) -> Delta:
    """The mean of the finite ``values`` with its interval, tested against ``bound``."""
    return compare(summarize(values).values, null=bound, scale="level", stats=stats)


# ---------------------------------------------------------------- the family
def adjust(p: ArrayLike, correction: str = "holm") -> Any:
    """p-values corrected over their family: Holm's step-down (family-wise error), Benjamini-Hochberg's
    step-up (false discovery rate) or ``none``. A list gives a list; an array gives an array, one family per
    row.

    >>> adjust([0.01, 0.04, 0.03], "holm")
    [0.03, 0.06, 0.06]
    """
    import numpy as np

    a = np.asarray(p, dtype=float)
    m = a.shape[-1] if a.ndim else 0
    if correction not in CORRECTIONS:
        raise UserInputError(one_of(correction, CORRECTIONS, what="correction") + " (option --correction)")
    if m == 0 or correction == "none":
        adj = a
    else:
        order = np.argsort(a, axis=-1, kind="stable")
        ranked = np.take_along_axis(a, order, axis=-1)
        if correction == "holm":
            steps = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked), axis=-1)
        else:  # bh
            scaled = (m / np.arange(1, m + 1) * ranked)[..., ::-1]
            steps = np.minimum(1.0, np.minimum.accumulate(scaled, axis=-1)[..., ::-1])
        adj = np.empty_like(a)
        np.put_along_axis(adj, order, steps, axis=-1)
    return [round(float(v), 15) for v in adj] if a.ndim == 1 else adj


def _in_family(d: Delta) -> bool:
    """A delta with a p that no ``--until-resolved`` look decided (that one carries its look's correction)."""
    return d.p is not None and d.decision is None


def correct(deltas: Sequence[Delta], stats: Stats = DEFAULT) -> list[Delta]:
    """The family's deltas with ``p_adj`` set; a delta without a p (n < 2) is not part of the family, nor one
    that ``--until-resolved`` decided (its ``p_adj`` is its deciding look's)."""
    idx = [i for i, d in enumerate(deltas) if _in_family(d)]
    adjusted = adjust([deltas[i].p for i in idx], stats.correction)
    out = list(deltas)
    for i, q in zip(idx, adjusted, strict=True):
        out[i] = replace(deltas[i], p_adj=q)
    return out


def family_size(deltas: Iterable[Delta]) -> int:
    """How many of ``deltas`` were corrected together (``correct``)."""
    return sum(_in_family(d) for d in deltas)


def family_text(stats: Stats, m: int, where: str = "in this table") -> str:
    """The family a p was corrected over, in words: ``Holm over 4 comparisons in this table``."""
    if stats.correction == "none":
        return f"no correction ({m} comparison{'s' * (m != 1)} {where})"
    return f"{CORRECTION_NAMES[stats.correction]} over {m} comparison{'s' * (m != 1)} {where}"


def level_for(stats: Stats, m: int) -> float:
    """The per-comparison level a planned comparison must reach: ``ALPHA / m`` under a correction (Holm's
    first step, the strictest; BH's too), ``ALPHA`` without."""
    return ALPHA if stats.correction == "none" else ALPHA / max(m, 1)


def family_of(d: Delta, stats: Stats = DEFAULT, m: int = 1, where: str = "in this table") -> str:
    """The family ``d``'s p was corrected over: its deciding look's, or ``m`` comparisons ``where``."""
    return d.decision.family_text() if d.decision is not None else family_text(stats, m, where)



# ---------------------------------------------------------------- what a table says under it
def method_note(deltas: Sequence[Delta], stats: Stats = DEFAULT, what: str = "Δ",
                family: str | None = None) -> str:
    """The line under a table: the interval method, the n, the correction and the family's size, or the
    ``family`` the deltas were corrected in, in words, where a page shows some of a larger family's."""
    ns = sorted({d.n for d in deltas if d.mean is not None})
    m = family_size(deltas)
    nn = "n=" + ("/".join(map(str, ns)) if ns else "0")
    text = f"{what}: paired Student t 95% CI ({nn} seeds, n-1 df)"
    if stats.interval == "bootstrap":
        boot = [d for d in deltas if d.method == "bootstrap"]
        text = f"{what}: BCa bootstrap 95% CI ({nn} seeds)" if boot and len(boot) == len(
            [d for d in deltas if d.lo is not None]) else text
        if len(boot) < len([d for d in deltas if d.lo is not None]):
            text += f"; bootstrap needs n >= {BOOTSTRAP_MIN_N}, paired t used below that"
    if any(d.n == 1 for d in deltas):
        text += "; n=1: no interval"
    decided = [d.decision for d in deltas if d.decision is not None]
    if family is not None and m:
        text = f"{text}; significant (bold) after {family} at alpha={ALPHA:g}"
    elif m or not decided:
        text = (f"{text}; significant (bold) after {CORRECTION_NAMES[stats.correction]} over {m} comparison"
                f"{'s' * (m != 1)} at alpha={ALPHA:g}")
    if any(d.no_spread for d in deltas):
        text += ("; no spread (every pair differs by the same amount): no interval, and the p is the exact "
                 "sign-flip p, 2/2^n")
    elif any(d.tied and not d.identical for d in deltas):
        text += ("; where the pairs tie (a metric of few values), p is the larger of the t and the exact "
                 "sign-flip p")
    if decided:
        one = len(decided) == 1
        text += (f"; {len(decided)} decided by `ablate run --until-resolved`, read at the look that decided "
                 f"{'it' if one else 'them'} (bold only where a look resolved {'it' if one else 'one'}; "
                 f"{decided[0].family_text()})")
    return text
