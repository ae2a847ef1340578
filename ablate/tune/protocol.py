"""The learning-rate protocol, pure: the best value of a study, the largest stable value, and the bracketing
search for it. No Optuna, no torch, no I/O: everything works on ``Point``s (a tried value and what came of
it).

- **best**: the point with the lowest metric among those that finished without diverging (the highest, with
  ``higher=True``: a command grid's objective may be higher-is-better, such as an accuracy).
- **stable**: a point that did not diverge and whose metric is within ``tolerance`` of the best
  (``metric <= best + tolerance * |best|``; ``>= best - tolerance * |best|`` when higher is better).
- **largest stable**: the largest tried value that is stable. A pruned or failed point says nothing about
  stability (it was cut off, or crashed) and is ignored.
- **at the edge**: a best value within ``EDGE`` (a tenth) of the searched range's width of either end, on the
  search's scale (``edge_of``): the best may lie beyond the range, and ``ablate tune`` says so.
- **bracketing search** (``Bracket``): between a stable ``low`` and an unstable ``high``, try the geometric
  (or arithmetic) midpoint, keep the half where stability flips, a fixed number of steps. The answer lies in
  ``[stable, unstable)``, whose ratio is ``(high / low) ** (1 / 2 ** steps)`` on the log scale.

>>> b = bracket(lambda lr: lr < 0.01, 1e-3, 1e-1, steps=4)
>>> b.stable < 0.01 <= b.unstable, round(b.unstable / b.stable, 3)
(True, 1.334)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["ok", "diverged", "pruned", "failed"]
DEFAULT_TOLERANCE = 0.05
# What Optuna is told for a diverged trial (and reported for a non-finite validation metric): a finite value
# above any trained model's perplexity or loss, so TPE ranks the trial worst and learns to avoid its region
# (a FAIL would be dropped from TPE's model and the region sampled again). Reports mark such trials apart.
# A study of a higher-is-better metric is told ``-PENALTY`` (``worst``).
PENALTY = 1e9
EDGE = 0.1  # a best value this close to an end of the range searched, in shares of its width, is at the edge


@dataclass(frozen=True)
class Point:
    """One tried value of the tuned parameter: what came of it and its final metric (``ok`` points only).

    ``source`` is ``trial`` (a study trial) or ``probe`` (a run of the bracketing search)."""

    value: float
    outcome: Outcome
    metric: float | None = None
    run_id: str | None = None
    source: str = "trial"


def worst(*, higher: bool = False) -> float:
    """What Optuna is told for a diverged trial of a study: ``PENALTY``, or ``-PENALTY`` when higher is
    better."""
    return -PENALTY if higher else PENALTY


def _finished(points: Iterable[Point]) -> list[Point]:
    return [p for p in points if p.outcome == "ok" and p.metric is not None and math.isfinite(p.metric)]


def best_point(points: Iterable[Point], *, higher: bool = False) -> Point | None:
    """The point with the lowest metric (``higher``: the highest) among those that finished (ties: the
    smaller value); None if none did."""
    done = _finished(points)
    sign = -1.0 if higher else 1.0
    return min(done, key=lambda p: (sign * (p.metric or 0.0), p.value)) if done else None


def best_metric(points: Iterable[Point], *, higher: bool = False) -> float | None:
    """``best_point``'s metric (finite), or None if nothing finished."""
    best = best_point(points, higher=higher)
    return best.metric if best is not None else None


def edge_of(value: float, low: float, high: float, *, log: bool) -> Literal["low", "high"] | None:
    """The end of the searched range ``[low, high]`` that ``value`` lies at, within ``EDGE`` of the range's
    width (on the log scale for a log search); None when it lies inside.

    >>> edge_of(0.0286, 1e-4, 0.03, log=True), edge_of(3e-3, 1e-4, 0.03, log=True)
    ('high', None)
    >>> edge_of(0.05, 0, 1, log=False)
    'low'
    """
    if log and min(value, low, high) <= 0:
        return None
    lo, hi, x = (math.log(low), math.log(high), math.log(value)) if log else (low, high, value)
    width = hi - lo
    if width <= 0:
        return None
    if hi - x <= EDGE * width:
        return "high"
    return "low" if x - lo <= EDGE * width else None


def is_stable(point: Point, best: float, tolerance: float = DEFAULT_TOLERANCE, *,
              higher: bool = False) -> bool | None:
    """True: finished within ``tolerance`` of ``best`` (on the worse side: above it, or below it when
    ``higher`` is better); False: diverged, or finished outside it; None: pruned or failed (no evidence
    either way).

    >>> is_stable(Point(0.1, "ok", 10.4), 10.0), is_stable(Point(0.1, "ok", 0.94), 1.0, higher=True)
    (True, False)
    """
    if point.outcome == "diverged":
        return False
    if point.outcome != "ok":
        return None
    if point.metric is None or not math.isfinite(point.metric):
        return False
    if higher:
        return point.metric >= best - tolerance * abs(best)
    return point.metric <= best + tolerance * abs(best)


def max_stable(points: Sequence[Point], tolerance: float = DEFAULT_TOLERANCE, *,
               higher: bool = False) -> Point | None:
    """The stable point with the largest value (None when nothing finished)."""
    best = best_metric(points, higher=higher)
    if best is None:
        return None
    stable = [p for p in points if is_stable(p, best, tolerance, higher=higher)]
    return max(stable, key=lambda p: p.value)


def first_unstable_above(points: Sequence[Point], value: float, tolerance: float = DEFAULT_TOLERANCE, *,
                         higher: bool = False) -> Point | None:
    """The unstable point with the smallest value above ``value`` (the upper end of a bracket), or None."""
    best = best_metric(points, higher=higher)
    above = [p for p in points if p.value > value
             and (p.outcome == "diverged"
                  or (best is not None and is_stable(p, best, tolerance, higher=higher) is False))]
    return min(above, key=lambda p: p.value) if above else None


def worse_header(tolerance: float) -> str:
    """The column of the smallest value above the largest stable one that did worse: it diverged, or ended
    more than ``tolerance`` over the best (what the protocol calls unstable)."""
    return f"first >{tolerance:.0%} worse"


def worse_cell(point: Point | None, best: Point | None) -> str:
    """That value and how it did worse: ``0.0201 (diverged)`` or ``0.0201 (+7%)``, its metric against the
    best's.

    >>> best = Point(0.01, "ok", 10.0)
    >>> worse_cell(Point(0.02, "diverged"), best), worse_cell(Point(0.02, "ok", 10.7), best)
    ('0.02 (diverged)', '0.02 (+7%)')
    """
    if point is None:
        return "-"
    if point.outcome != "ok" or point.metric is None or best is None or best.metric is None:
        return f"{point.value:.3g} ({point.outcome if point.outcome != 'ok' else 'worse'})"
    return f"{point.value:.3g} ({point.metric / best.metric - 1:+.0%})"


@dataclass
class Bracket:
    """A bracketing search for the largest stable value between a stable ``stable`` and an unstable
    ``unstable``: ``probe()`` says what to try next (None when done), ``record(value, ok)`` what came of it.

    ``log``: bisect geometrically (learning rates), else arithmetically. ``steps`` bounds the probes."""

    stable: float
    unstable: float
    steps: int = 4
    log: bool = True
    tried: list[tuple[float, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.stable < self.unstable:
            raise ValueError(f"a bracket needs stable < unstable, got {self.stable} and {self.unstable}")
        if self.log and self.stable <= 0:
            raise ValueError(f"a geometric bracket needs a positive lower end, got {self.stable}")

    @property
    def done(self) -> bool:
        return len(self.tried) >= self.steps

    @property
    def ratio(self) -> float:
        """How wide the bracket still is: ``unstable / stable`` (log) or ``unstable - stable``."""
        return self.unstable / self.stable if self.log else self.unstable - self.stable

    def probe(self) -> float | None:
        """The next value to try: the midpoint of the bracket; None when the steps are used up."""
        if self.done:
            return None
        if self.log:
            return math.sqrt(self.stable * self.unstable)
        return (self.stable + self.unstable) / 2

    def record(self, value: float, ok: bool) -> None:
        """What trying ``value`` showed: stable (``ok``) moves the lower end up, unstable the upper end
        down."""
        self.tried.append((value, ok))
        if ok and value > self.stable:
            self.stable = min(value, self.unstable)
        elif not ok and value < self.unstable:
            self.unstable = max(value, self.stable)


def bracket(is_stable_at: Callable[[float], bool], low: float, high: float, *, steps: int = 4,
            log: bool = True) -> Bracket:
    """Run a ``Bracket`` from ``low`` (taken as stable) to ``high`` (taken as unstable) against
    ``is_stable_at``."""
    b = Bracket(low, high, steps=steps, log=log)
    while (x := b.probe()) is not None:
        b.record(x, bool(is_stable_at(x)))
    return b


def bracket_from_points(points: Sequence[Point], *, high: float, steps: int, log: bool,
                        tolerance: float = DEFAULT_TOLERANCE, higher: bool = False
                        ) -> tuple[Bracket | None, str]:
    """The bracket the study's points leave (tightest stable/unstable pair), or None and why not.

    The lower end is the largest stable point; the upper end the smallest unstable point above it. Without an
    unstable point the search cannot start: nothing in ``[low, high]`` was seen to fail.
    """
    top = max_stable(points, tolerance, higher=higher)
    if top is None:
        return None, "no trial finished, so there is no stable point to start from"
    bad = first_unstable_above(points, top.value, tolerance, higher=higher)
    if bad is None:
        return None, (f"no trial above {top.value:.3g} diverged or fell outside the tolerance: the largest "
                      f"stable value is at least that; raise --high (now {high:g}) to find where it breaks")
    return Bracket(top.value, bad.value, steps=steps, log=log), ""
