"""Fitting L(C) = E + A * C^(-alpha) to a scaling ladder, with intervals from a bootstrap over seeds.

Pure numpy + scipy, deterministic (fixed bootstrap seed). The unit of resampling is a seed: one seed's runs at
every rung form one draw, so what varies between draws is what varies between seeds (init and data order), and
a variant and its baseline are resampled with the same seeds (a paired bootstrap).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, least_squares

from ablate.stats import BOOTSTRAP_SEED, CI_LEVEL

DRAWS = 1000
MIN_RUNGS = 4  # three parameters, and one rung to spare to see whether the curve bends the way the law says


@dataclass(frozen=True)
class PowerLaw:
    """``L(C) = E + A * C^(-alpha)``, C in FLOPs. ``A`` is kept as ``B * C0^alpha`` with C0 the fit's
    reference compute, so evaluating far from C0 stays finite."""

    E: float
    B: float
    alpha: float
    C0: float

    @property
    def A(self) -> float:
        return float(self.B * self.C0 ** self.alpha)

    def __call__(self, c: float | np.ndarray) -> np.ndarray:
        """The law's loss at compute ``c`` (an array of the same shape)."""
        loss: np.ndarray = self.E + self.B * (np.asarray(c, dtype=float) / self.C0) ** (-self.alpha)
        return loss


def fit_power_law(compute: Sequence[float], loss: Sequence[float], *, start: PowerLaw | None = None
                  ) -> PowerLaw | None:
    """Least-squares fit of ``E + A * C^(-alpha)`` (E >= 0, A > 0; alpha free, so a ladder whose loss rises
    with compute shows alpha <= 0 rather than being forced into a falling curve). Best of a few starts; None
    when no start converges or there are fewer than three distinct compute values. ``start`` (a fit of similar
    data: the bootstrap starts from the point fit) is tried first, alone when it converges.

    >>> import numpy as np
    >>> c = np.logspace(12, 15, 6)
    >>> law = fit_power_law(c, 1.5 + 40.0 * c ** -0.1)
    >>> round(law.E, 3), round(law.A, 2), round(law.alpha, 3)
    (1.5, 40.0, 0.1)
    """
    c = np.asarray(compute, dtype=float)
    y = np.asarray(loss, dtype=float)
    ok = np.isfinite(c) & np.isfinite(y) & (c > 0)
    c, y = c[ok], y[ok]
    if len(np.unique(c)) < 3:
        return None
    c0 = float(np.exp(np.log(c).mean()))
    x = np.log(c / c0)

    def residuals(p: np.ndarray) -> np.ndarray:
        e, b, alpha = p
        out: np.ndarray = e + np.exp(b - alpha * x) - y
        return out

    lo_y = float(y.min())
    bounds = ([0.0, -50.0, -5.0], [max(lo_y, 1e-9), 50.0, 5.0])
    starts = [(e0, math.log(max(float(y.mean()) - e0, 1e-6)), a0) for e0 in (0.0, 0.5 * lo_y, 0.9 * lo_y)
              for a0 in (0.05, 0.3, 1.0)]
    if start is not None:  # the same law seen from this fit's reference compute
        b = math.log(start.B) - start.alpha * math.log(c0 / start.C0)
        starts.insert(0,
                      (min(start.E, bounds[1][0]), min(max(b, -50.0), 50.0),
                       min(max(start.alpha, -5.0), 5.0)))
    best = None
    for i, p0 in enumerate(starts):
        try:
            sol = least_squares(residuals, p0, bounds=bounds, method="trf", x_scale="jac")
        except ValueError:
            continue
        if sol.success and (best is None or sol.cost < best.cost):
            best = sol
        if i == 0 and start is not None and best is not None:
            break
    if best is None:
        return None
    e, b, alpha = (float(v) for v in best.x)
    return PowerLaw(E=e, B=math.exp(b), alpha=alpha, C0=c0)


@dataclass(frozen=True)
class Interval:
    """A point value and its percentile interval over bootstrap draws (None where undefined)."""

    value: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "low": self.low, "high": self.high}

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def percentile(values: Sequence[float | None], point: float | None, level: float = CI_LEVEL) -> Interval:
    """``point`` with the ``level`` percentile interval of the finite ``values`` (None when there are
    none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not v.size or point is None:
        return Interval(point, None, None)
    tail = (1 - level) / 2
    lo, hi = np.quantile(v, [tail, 1 - tail])
    return Interval(point, float(lo), float(hi))


class SeedBootstrap:
    """Fits of one series resampled over its seeds: ``draws`` multisets of seeds (drawn once, shared by every
    series so a variant and its baseline see the same seeds), each fit once per distinct multiset (cached:
    with two seeds there are only three)."""

    def __init__(self, seeds: Sequence[Hashable], *, draws: int = DRAWS, seed: int = BOOTSTRAP_SEED):
        self.seeds = sorted(seeds, key=repr)
        rng = np.random.default_rng(seed)
        n = len(self.seeds)
        idx = rng.integers(0, n, size=(draws, n)) if n else np.zeros((0, 0), dtype=int)
        self.samples = [tuple(sorted(int(i) for i in row)) for row in idx]
        self._cache: dict[tuple[str, tuple[int, ...]], PowerLaw | None] = {}

    @property
    def distinct(self) -> int:
        return len(set(self.samples))

    def fits(self, key: str, points: Mapping[Hashable, tuple[Sequence[float], Sequence[float]]],
             start: PowerLaw | None = None) -> list[PowerLaw | None]:
        """One fit per draw for the series ``key``: ``points[seed] = (compute, loss)`` of that seed's runs;
        ``start``: the point fit, where each draw's fit starts."""
        out = []
        for sample in self.samples:
            cache_key = (key, sample)
            if cache_key not in self._cache:
                chosen = [points[self.seeds[i]] for i in sample if self.seeds[i] in points]
                c = [x for cs, _ in chosen for x in cs]
                y = [x for _, ys in chosen for x in ys]
                self._cache[cache_key] = fit_power_law(c, y, start=start)
            out.append(self._cache[cache_key])
        return out


def crossover(a: PowerLaw, b: PowerLaw, lo: float, hi: float) -> float | None:
    """The smallest compute in ``[lo, hi]`` where curves ``a`` and ``b`` cross (their difference changes
    sign)."""
    def diff(logc: float) -> float:
        return float(a(math.exp(logc)) - b(math.exp(logc)))

    grid = np.linspace(math.log(lo), math.log(hi), 2001)
    d = np.array([diff(g) for g in grid])
    for i in np.nonzero(np.sign(d[:-1]) * np.sign(d[1:]) < 0)[0]:
        return math.exp(brentq(diff, grid[i], grid[i + 1]))
    return None


def interval_of(fits: Sequence[PowerLaw | None], point: PowerLaw,
                fn: Callable[[PowerLaw], float]) -> Interval:
    """``fn`` of the point fit, with its interval over the bootstrap fits that converged."""
    return percentile([fn(f) for f in fits if f is not None], fn(point))
