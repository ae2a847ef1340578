"""The loss-spike rule's fast path decides exactly as the rule computed in full at every point (the window's
mean and std in two passes): on streams built to be hard for running sums (plateaus, a constant stretch, a
std near the 1e-10 floor, huge spikes leaving the window, magnitudes from 1e-8 to 1e8, non-finite losses), and
its work is counted: on a training curve, almost no point needs the full computation."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from ablate.stats.stability import Spike, SpikeDetector


def reference(window: int, sigma: float, points: list[float]) -> list[Spike]:
    """The rule as it reads, the window's mean and std computed in full before every loss."""
    history: deque[float] = deque(maxlen=window)
    out = []
    for step, loss in enumerate(points):
        if not math.isfinite(loss):
            continue
        if len(history) == window:
            mean = sum(history) / window
            std = math.sqrt(sum((x - mean) ** 2 for x in history) / window)
            if std > 1e-10 and loss > mean + sigma * std:
                out.append(Spike(step, loss, mean, (loss - mean) / std))
        history.append(loss)
    return out


def streams() -> dict[str, list[float]]:
    rng = random.Random(0)
    curve = [3.0 / (1 + i / 300) + rng.gauss(0, 0.02) for i in range(3000)]
    for at in (500, 1200, 2500):
        curve[at] += 1.0
    plateau = [2.0 + rng.gauss(0, 0.05) for _ in range(3000)]
    constant = [1.5] * 200 + [1.5 + 1e-12] + [1.5] * 200 + [1.6]
    constant += [1.5 + rng.gauss(0, 1e-11) for _ in range(300)]
    huge = [rng.gauss(1.0, 0.1) for _ in range(600)]
    for at in (100, 101, 350):
        huge[at] = 1e8
    scales = [10 ** rng.uniform(-8, 8) for _ in range(1500)]
    tiny = [1e-8 * (1 + rng.gauss(0, 1e-3)) for _ in range(1500)]
    broken = [x if i % 97 else (math.nan if i % 2 else math.inf) for i, x in enumerate(curve[:1500])]
    # a loss exactly at (or one rounding either side of) the threshold the rule computes
    edge = [rng.gauss(2.0, 0.1) for _ in range(60)]
    mean = sum(edge[-50:]) / 50
    std = math.sqrt(sum((x - mean) ** 2 for x in edge[-50:]) / 50)
    at = mean + 6.0 * std
    edges = [*edge, at, *edge[-50:], math.nextafter(at, math.inf), *edge[-50:], math.nextafter(at, -math.inf)]
    return {"curve": curve, "plateau": plateau, "constant": constant, "huge": huge, "scales": scales,
            "tiny": tiny, "broken": broken, "edges": edges}


@pytest.mark.parametrize("name", list(streams()))
@pytest.mark.parametrize(("window", "sigma"), [(50, 6.0), (10, 3.0), (7, 0.5), (50, 0.0)])
def test_the_fast_rule_decides_as_the_full_one(name, window, sigma):
    points = streams()[name]
    detector = SpikeDetector(window, sigma)
    fast = [s for i, x in enumerate(points) if (s := detector.update(i, x)) is not None]
    assert fast == reference(window, sigma, points)  # the same steps, losses, trends and sizes, bit for bit


def test_the_rule_computes_the_window_in_full_for_few_points_of_a_training_curve():
    points = streams()["curve"]
    detector = SpikeDetector(50, 6.0)
    spikes = [s.step for i, x in enumerate(points) if (s := detector.update(i, x)) is not None]
    assert spikes == [500, 1200, 2500]
    assert detector.exact <= 30  # the spikes and the points near them; 2,950 points judged
    # a restored detector (a resumed run) goes on deciding as the uninterrupted one
    restored = SpikeDetector(50, 6.0)
    restored.load_state_dict(detector.state_dict())
    more = [3.0 - 1e-4 * i for i in range(200)] + [9.0]
    assert [restored.update(i, x) for i, x in enumerate(more)] == [detector.update(i, x) for i, x in
                                                                   enumerate(more)]


def test_a_constant_stretch_needs_no_full_computation():
    """A metric printed unchanged step after step (a validation loss between evaluations): the window holds
    one value, its std is under the rule's floor, and no point is computed in full."""
    detector = SpikeDetector(50, 6.0)
    points = [2.1] * 3000 + [2.0] * 100 + [2.1] * 500
    assert [s for i, x in enumerate(points) if (s := detector.update(i, x)) is not None] == reference(
        50, 6.0, points)
    assert detector.exact <= 60  # the window that straddles the one change
