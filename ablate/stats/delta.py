"""A comparison's result and how a report reads it: ``Stats`` (the interval method and the family
correction), ``Summary`` (the runs behind one table cell), ``Delta`` (one comparison: its mean, interval,
p-values and what pairing and the looks of ``--until-resolved`` did), ``Decision`` and ``LookRecord`` (what
those looks decided, as the store keeps it), and the constants every reading uses.

Pure: the standard library (and ``ablate.errors``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ablate.errors import UserInputError, one_of
from ablate.stats.pairing import Pairing
from ablate.stats.pvalues import ties

BOOTSTRAP_SEED = 0
BOOTSTRAP_DRAWS = 4000
BOOTSTRAP_MIN_N = 20  # below this a bootstrap of n values undercovers badly (it never leaves their range)
CI_LEVEL = 0.95
ALPHA = 0.05
POWER = 0.8
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


# ---------------------------------------------------------------- what the looks of --until-resolved decided
@dataclass(frozen=True)
class LookRecord:
    """One look at one comparison: its seeds, the look's level, and what the paired t test found there
    (``p_adj``: corrected over the family at that look)."""

    n: int
    level: float
    mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    p: float | None = None
    p_adj: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "level": self.level, "mean": self.mean, "lo": self.lo, "hi": self.hi,
                "p": self.p, "p_adj": self.p_adj}


@dataclass(frozen=True)
class Decision:
    """What ``--until-resolved`` decided for one comparison of grid ``grid``: ``treatment`` against
    ``reference`` on ``metric`` at ``cell`` (the grid's other axes), over the paired ``runs`` (both arms' run
    ids) read at the deciding look. ``look`` is the look (1-based) that resolved it, None when it was still
    open at the last planned look; ``n``, ``level`` and ``p_adj`` are that look's (or the last one's).
    ``family`` comparisons were corrected together (``correction``) at every look of the plan ``plan`` (the
    seeds of each look); ``history`` holds each look it took part in."""

    grid: str
    treatment: str
    reference: str
    metric: str
    cell: dict[str, Any]
    runs: tuple[str, ...]
    look: int | None
    n: int
    level: float
    p_adj: float | None
    family: int
    correction: str
    plan: tuple[int, ...]
    history: tuple[LookRecord, ...] = field(default=(), repr=False)

    @property
    def resolved(self) -> bool:
        return self.look is not None

    @property
    def last_look(self) -> int:
        """The look it was decided at: the one that resolved it, else the last planned one."""
        return self.look if self.look is not None else len(self.plan)

    def reading(self) -> str:
        """``resolved at look 2 of 3, n=4 seeds`` / ``unresolved after 3 looks, n=6 seeds``."""
        if self.look is not None:
            return f"resolved at look {self.look} of {len(self.plan)}, n={self.n} seeds"
        return f"unresolved after {len(self.plan)} looks, n={self.n} seeds"

    def family_text(self) -> str:
        """The family its p was corrected over, in words."""
        m, name = self.family, CORRECTION_NAMES.get(self.correction, self.correction)
        return (f"{name} over {m} comparison{'s' * (m != 1)} at each look of --until-resolved, "
                f"O'Brien-Fleming spending over n="
                f"{', '.join(map(str, self.plan))} (level {self.level:.2g} at look {self.last_look})")


# ---------------------------------------------------------------- one comparison
@dataclass(frozen=True)
class Delta:
    """One comparison: ``mean`` with its interval ``[lo, hi]`` over ``n`` values, on the scale the reader sees
    (a difference, a ratio, a level). ``p`` is the paired t p-value against ``null`` (on the test's scale: the
    log of the bound for a ratio; where the values tie, no smaller than the exact sign-flip p:
    ``evidence_p``), ``p_perm`` the exact sign-flip p (n <= 12), ``p_adj`` the p after the family's
    correction; ``sd`` the spread of the tested values; ``method`` the interval actually used.
    ``pairing``: what pairing by seed did (paired comparisons); ``decision``: what ``--until-resolved``
    decided about exactly these runs (``ablate.stats.sequential``), whose look's level it is read at."""

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
