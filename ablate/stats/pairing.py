"""What pairing by seed did to a comparison: the arms' correlation across seeds, and how many unpaired seeds
the pairs were worth.

Runs of two arms at one seed share the data order (and, with ``model.init_rng: per-parameter``, every common
weight at step 0), so their results may correlate. A positive correlation is what pairing is for: the paired
difference is less noisy than two independent means. A negative one makes it noisier: the pairing costs. The
paired t interval keeps its coverage at any correlation, and an unpaired test of runs paired by seed does not
(it undercovers when the correlation is negative), so a report says what the pairing cost and keeps the paired
t (``tests/unit/stats/test_stats_validity.py`` simulates both).

Pure: no imports beyond the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pairing:
    """What pairing by seed did to a comparison of ``n`` pairs: the arms' spreads ``sd_a``, ``sd_b`` over the
    paired seeds, the paired differences' ``sd_d`` (on the test's scale), and ``r``, the arms' Pearson
    correlation across seeds (None below ``PAIRING_MIN_N`` pairs, where it says little, or for an arm without
    spread).

    The variance of a paired mean difference is ``(sd_a^2 + sd_b^2 - 2 r sd_a sd_b) / n``; two independent
    arms of ``k`` seeds each give ``(sd_a^2 + sd_b^2) / k``. So the ``n`` pairs are as precise as ``worth = n
    (sd_a^2 + sd_b^2) / sd_d^2`` unpaired seeds: more than n when r > 0, fewer when r < 0 (pairing costs).

    >>> p = pairing([(1.0, 1.1), (2.0, 2.3), (3.0, 2.9), (4.0, 4.2)]); round(p.r, 3), round(p.worth)
    (0.991, 457)
    """

    n: int
    sd_a: float | None
    sd_b: float | None
    sd_d: float | None
    r: float | None

    @property
    def worth(self) -> float | None:
        """The unpaired seeds per arm as precise as these ``n`` pairs; None without a correlation or when
        the pairs differ by one constant (no spread left: infinitely many)."""
        if self.r is None or not self.sd_d or self.sd_a is None or self.sd_b is None:
            return None
        return self.n * (self.sd_a ** 2 + self.sd_b ** 2) / self.sd_d ** 2

    def text(self) -> str:
        """``r=+0.41: worth ≈ 15 unpaired seeds`` / ``r=-0.40: pairing costs (as precise as ≈ 6 unpaired
        seeds; paired t kept)``; empty without a correlation."""
        if self.r is None:
            return ""
        worth = self.worth
        if worth is None:
            return f"r={self.r:+.2f}: the same difference at every seed"
        seeds = f"{worth:.1f}" if worth < 10 else f"{worth:.0f}"
        if self.r < 0:
            return f"r={self.r:+.2f}: pairing costs (as precise as ≈ {seeds} unpaired seeds; paired t kept)"
        return f"r={self.r:+.2f}: worth ≈ {seeds} unpaired seeds"


PAIRING_MIN_N = 3  # two pairs always correlate +-1


def pairing(values: Sequence[tuple[float, float]]) -> Pairing:
    """The ``Pairing`` of ``(treatment, reference)`` values paired by seed."""
    n = len(values)
    if n < 2:
        return Pairing(n, None, None, None, None)
    a = [x for x, _ in values]
    b = [y for _, y in values]
    sd_a, sd_b = _sd(a), _sd(b)
    sd_d = _sd([x - y for x, y in values])
    if sd_d <= 1e-9 * max(sd_a, sd_b, *map(abs, a), *map(abs, b)):
        sd_d = 0.0  # one difference at every seed, up to float rounding
    r = None
    if n >= PAIRING_MIN_N and sd_a > 0 and sd_b > 0:
        ma, mb = sum(a) / n, sum(b) / n
        cov = sum((x - ma) * (y - mb) for x, y in values) / (n - 1)
        r = max(-1.0, min(1.0, cov / (sd_a * sd_b)))
    return Pairing(n, sd_a, sd_b, sd_d, r)


def _sd(x: Sequence[float]) -> float:
    m = sum(x) / len(x)
    return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))
