"""Statistics over seeds: a cell's mean and spread, and paired deltas with a bootstrap confidence interval.

The intervals are ``scipy.stats.bootstrap``'s BCa (bias-corrected and accelerated), resampling the pairs
together; deterministic: the resampling draws from a fixed seed, so a report regenerated from the same store is
the same report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

BOOTSTRAP_SEED = 0
BOOTSTRAP_DRAWS = 4000
CI_LEVEL = 0.95


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
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (len(self.values) - 1))


def summarize(values: Iterable[float | None], *, diverged: int = 0) -> Summary:
    """A Summary of the finite values (None and NaN are dropped: not measured)."""
    finite = tuple(float(v) for v in values if v is not None and math.isfinite(float(v)))
    return Summary(finite, diverged)


@dataclass(frozen=True)
class Delta:
    """A paired difference ``treatment - reference`` over the keys (seeds, configs) both have measured."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int
    diffs: tuple[float, ...] = field(default=(), repr=False)

    def side(self) -> int:
        """+1 when the whole CI is above zero, -1 when below, 0 when it straddles zero or is unknown."""
        if self.lo is None or self.hi is None:
            return 0
        if self.lo > 0:
            return 1
        if self.hi < 0:
            return -1
        return 0


def bootstrap_ci(diffs: Iterable[float], *, level: float = CI_LEVEL, draws: int = BOOTSTRAP_DRAWS,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float | None, float | None]:
    """BCa bootstrap CI of the mean of ``diffs`` (``scipy.stats.bootstrap``, ``draws`` resamples from ``seed``).

    Fewer than two values give ``(None, None)``: one pair says nothing about the spread. Values that are all
    equal give that value twice (no spread; BCa's acceleration is undefined there).

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    import numpy as np

    x = np.asarray(list(diffs), dtype=float)
    return _bca((x,), lambda d, axis: np.mean(d, axis=axis), level=level, draws=draws, seed=seed)


def _bca(samples: tuple, statistic: object, *, level: float, draws: int, seed: int
         ) -> tuple[float | None, float | None]:
    import numpy as np
    from scipy.stats import bootstrap

    first = samples[0]
    if first.size < 2:
        return None, None
    observed = float(statistic(*samples, axis=-1))  # type: ignore[operator]
    if np.ptp(first - samples[1] if len(samples) > 1 else first) == 0:  # no spread to estimate
        return observed, observed
    res = bootstrap(samples, statistic, paired=len(samples) > 1, vectorized=True, method="BCa",
                    confidence_level=level, n_resamples=draws, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def bootstrap_ratio_ci(treatment: Iterable[float], reference: Iterable[float], *, level: float = CI_LEVEL,
                       draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED) -> tuple[float | None, float | None]:
    """BCa bootstrap CI of ``mean(treatment) / mean(reference)``, resampling the pairs together.

    >>> bootstrap_ratio_ci([1.0, 2.0], [4.0, 8.0])
    (0.25, 0.25)
    """
    import numpy as np

    t, b = np.asarray(list(treatment), dtype=float), np.asarray(list(reference), dtype=float)
    if t.size >= 2 and np.ptp(t / b) == 0:  # every pair has the same ratio: no spread to estimate
        return float(t.mean() / b.mean()), float(t.mean() / b.mean())
    return _bca((t, b), lambda x, y, axis: np.mean(x, axis=axis) / np.mean(y, axis=axis), level=level, draws=draws,
                seed=seed)


def paired_delta(treatment: Mapping[object, float | None], reference: Mapping[object, float | None]) -> Delta:
    """Mean of ``treatment[k] - reference[k]`` over keys both measured (finite), with its bootstrap CI.

    Keys are what makes two runs a pair: the same config apart from the variant, and the same seed.

    >>> paired_delta({0: 5.0, 1: 5.2}, {0: 6.0, 1: 6.0, 2: 6.1}).mean
    -0.9
    """
    import numpy as np

    pairs = []
    for key in sorted(set(treatment) & set(reference), key=repr):
        a, b = treatment[key], reference[key]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            continue
        pairs.append((float(a), float(b)))
    if not pairs:
        return Delta(None, None, None, 0)
    treat, ref = np.array(pairs).T
    lo, hi = _bca((treat, ref), lambda t, r, axis: np.mean(t - r, axis=axis), level=CI_LEVEL,
                  draws=BOOTSTRAP_DRAWS, seed=BOOTSTRAP_SEED)
    diffs = tuple(a - b for a, b in pairs)
    return Delta(round(sum(diffs) / len(diffs), 12), lo, hi, len(diffs), diffs)
