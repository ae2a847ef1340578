"""Training-stability rules on the per-step loss: loss spikes (events) and divergence (ends the run).

Both are plain Python with a ``state_dict``, so they are saved in checkpoints and a resumed run judges its
steps exactly as an uninterrupted one would.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spike:
    """A loss above its trend: ``trend`` is the window mean, ``size`` how many window stds above it."""

    step: int
    loss: float
    trend: float
    size: float


EPS = sys.float_info.epsilon


class SpikeDetector:
    """OLMo-core's stability-monitor rule: once ``window`` losses are seen, a loss above
    ``mean + sigma * std`` of the previous ``window`` losses (population std) is a spike. Every loss, spike or
    not, then joins the window; non-finite losses are left to the divergence rule.

    The window's mean and std are computed exactly (in order, two passes: ``O(window)``) only for a loss that
    may be a spike. Running sums of the window, summed anew every ``window`` losses, bound the exact mean and
    std from below within their rounding error; a loss under that bound is no spike whatever the rounding, so
    the decisions (and every spike's trend and size) are the exact rule's, at ``O(1)`` for most losses
    (``exact`` counts the exact computations; a command's run judges every point it printed).

    >>> d = SpikeDetector(window=4, sigma=3.0)
    >>> [d.update(i, x) for i, x in enumerate([2.0, 2.1, 1.9, 2.0])]
    [None, None, None, None]
    >>> d.update(4, 5.0).step
    4
    """

    def __init__(self, window: int, sigma: float):
        self.window, self.sigma = window, sigma
        self.history: deque[float] = deque(maxlen=window)
        self.exact = 0
        self._sum = self._sumsq = self._abs_bound = self._sq_bound = 0.0
        self._pushes = self._same = 0
        self._resum()

    def update(self, step: int, loss: float) -> Spike | None:
        """Judge ``loss`` at ``step`` against the trailing window, then add it to the window."""
        if not math.isfinite(loss):
            return None
        spike = None
        if len(self.history) == self.window and not self._surely_not(loss):
            self.exact += 1
            mean = sum(self.history) / self.window
            std = math.sqrt(sum((x - mean) ** 2 for x in self.history) / self.window)
            if std > 1e-10 and loss > mean + self.sigma * std:
                spike = Spike(step, loss, mean, (loss - mean) / std)
        self._push(loss)
        return spike

    def _surely_not(self, loss: float) -> bool:
        """``loss`` is at most the exact rule's ``mean + sigma * std`` whatever the rounding of either: under
        a lower bound of it from the running sums, less the most their rounding can be off (generous
        multiples of ``EPS`` times the sums of ``|x|`` and ``x**2`` they went through)."""
        if self.sigma < 0:
            return False
        w = self.window
        if self._same >= w and 4 * w * EPS * abs(self.history[-1]) <= 1e-10:
            return True  # one value the whole window: its std is at most the sum's rounding, under the floor
        mean = self._sum / w
        tol_mean = 64 * EPS * self._abs_bound
        var = self._sumsq / w - mean * mean
        tol_var = 512 * EPS * (self._sq_bound + self._abs_bound ** 2 / w) + 64 * w * EPS * abs(var)
        std = math.sqrt(var - tol_var) if var > tol_var else 0.0
        bound = mean - tol_mean + self.sigma * std
        return loss < bound - 16 * EPS * (abs(mean) + self.sigma * std + abs(loss))

    def _push(self, loss: float) -> None:
        if len(self.history) == self.window:
            old = self.history[0]
            self._sum -= old
            self._sumsq -= old * old
        self._same = self._same + 1 if self.history and self.history[-1] == loss else 1
        self.history.append(loss)
        self._sum += loss
        self._sumsq += loss * loss
        self._abs_bound += abs(loss)  # never decreased: a bound over the values since the last resum
        self._sq_bound += loss * loss
        self._pushes += 1
        if self._pushes >= self.window:
            self._resum()

    def _resum(self) -> None:
        """The running sums summed anew from the window (their rounding error starts over)."""
        self._sum = sum(self.history)
        self._sumsq = sum(x * x for x in self.history)
        self._abs_bound = sum(abs(x) for x in self.history)
        self._sq_bound = self._sumsq
        self._pushes = 0
        self._same = 0
        for x in reversed(self.history):  # how many of the last values equal the latest
            if x != self.history[-1]:
                break
            self._same += 1

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = deque(state["history"], maxlen=self.window)
        self._resum()


class DivergenceDetector:
    """A run has diverged at the first non-finite loss, or once its loss has stayed above ``factor`` x the
    best loss so far, and at least ``margin`` above it, for ``patience`` consecutive steps. ``update`` returns
    the reason, else None. The margin (in nats) keeps a loss that has fallen near zero (an answer-only loss at
    ~1e-4) from being called diverged by noise that doubles it.

    >>> d = DivergenceDetector(factor=2.0, patience=2)
    >>> [d.update(x) for x in [3.0, 1.0, 2.5, 2.5, float("nan")]]
    [None, None, None, 'loss 2.5 above 2 x best 1 for 2 steps', 'non-finite loss nan']
    >>> d = DivergenceDetector(factor=2.0, patience=2, margin=0.1)
    >>> [d.update(x) for x in [1e-4, 3e-4, 5e-4, 0.2, 0.3]]
    [None, None, None, None, 'loss 0.3 above 2 x best 0.0001 (and 0.1 above it) for 2 steps']
    """

    def __init__(self, factor: float, patience: int, margin: float = 0.0):
        self.factor, self.patience, self.margin = factor, patience, margin
        self.best = math.inf
        self.streak = 0

    @classmethod
    def for_run(cls, train: Any) -> DivergenceDetector:
        """The rule a run's ``TrainConfig`` asks for."""
        return cls(train.diverge_factor, train.diverge_patience, train.diverge_margin)

    def update(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return f"non-finite loss {loss}"
        self.best = min(self.best, loss)
        above = loss > self.factor * self.best and loss - self.best >= self.margin
        self.streak = self.streak + 1 if above else 0
        if self.streak >= self.patience:
            margin = f" (and {self.margin:g} above it)" if self.margin else ""
            return f"loss {loss:g} above {self.factor:g} x best {self.best:g}{margin} for {self.streak} steps"
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "streak": self.streak}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.streak = state["best"], state["streak"]
