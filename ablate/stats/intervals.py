"""Intervals and the comparison they make: the paired Student t interval (the default; it keeps its coverage
at 2-10 seeds), the BCa bootstrap (opt-in, from ``BOOTSTRAP_MIN_N`` values), and ``compare``, which reads a
set of paired values (differences, log ratios, or a level's values) against a null into a ``Delta``; with
``paired_delta``, ``paired_ratio`` and ``level`` over two arms' values by key.

Pure: numpy and scipy, imported when called.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ablate.stats.delta import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_MIN_N,
    BOOTSTRAP_SEED,
    CI_LEVEL,
    DEFAULT,
    EMPTY,
    Delta,
    Scale,
    Stats,
    summarize,
)
from ablate.stats.pairing import pairing
from ablate.stats.pvalues import evidence_p, sign_flip_pvalue

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

K = TypeVar("K")  # what makes two runs a pair (paired_delta)


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
