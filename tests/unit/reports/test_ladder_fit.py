"""The ladder's fit on synthetic data: a known power law with noise is recovered, with intervals from the seed
bootstrap that hold the truth; bad ladders are called unreliable and get no prediction; curves that cross
do."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablate.reports.fit import PowerLaw, SeedBootstrap, crossover, fit_power_law, interval_of
from ablate.reports.ladder import Target, analyse

TRUE = {"E": 1.2, "A": 30.0, "alpha": 0.12}
RUNGS = np.logspace(12, 15, 5)


def law_points(seeds: int, noise: float, *, E=TRUE["E"], A=TRUE["A"], alpha=TRUE["alpha"], rungs=RUNGS,
               rng_seed=1):
    rng = np.random.default_rng(rng_seed)
    return {s: (list(rungs),
                list(E + A * rungs ** -alpha + rng.normal(0, noise, len(rungs)))) for s in range(seeds)}


def test_recovers_a_known_power_law_with_intervals_that_hold_it() -> None:
    points = law_points(seeds=6, noise=0.005)
    law = fit_power_law([c for cs, _ in points.values() for c in cs],
                        [y for _, ys in points.values() for y in ys])
    assert law is not None
    assert law.E == pytest.approx(TRUE["E"], abs=0.03)
    assert law.A == pytest.approx(TRUE["A"], rel=0.15)
    assert law.alpha == pytest.approx(TRUE["alpha"], abs=0.01)
    boot = SeedBootstrap(list(points))
    fits = boot.fits("law", points, start=law)
    for name, true in TRUE.items():
        iv = interval_of(fits, law, lambda f, name=name: getattr(f, name))
        assert iv.low < iv.value < iv.high
        assert iv.low <= true <= iv.high, (name, iv)
    # extrapolating three decades past the last rung stays close to the truth
    far = 1e18
    assert float(law(far)) == pytest.approx(TRUE["E"] + TRUE["A"] * far ** -TRUE["alpha"], abs=0.02)


def test_noise_free_data_is_fit_exactly_and_too_few_points_are_not() -> None:
    c = np.logspace(10, 13, 4)
    law = fit_power_law(c, 2.0 + 5.0 * (c / 1e10) ** -0.3)
    assert (law.E, law.A, law.alpha) == pytest.approx((2.0, 5.0 * 1e10 ** 0.3, 0.3), rel=1e-4)
    assert fit_power_law([1e10, 1e11, 1e10, 1e11], [3.0, 2.5, 3.1, 2.4]) is None  # two distinct budgets


def test_crossover_of_two_curves() -> None:
    a = PowerLaw(E=1.0, B=1.0, alpha=0.2, C0=1.0)
    # b starts lower, ends higher: they cross where 0.2 C^-0.2 = 0.2
    b = PowerLaw(E=1.2, B=0.8, alpha=0.2, C0=1.0)
    assert crossover(a, b, 1e-3, 1e6) == pytest.approx(1.0, rel=1e-6)
    assert crossover(a, a.__class__(E=0.5, B=1.0, alpha=0.2, C0=1.0), 1e-3, 1e6) is None


def frame(spec: dict[str, dict], seeds: int = 3, noise: float = 0.003) -> pd.DataFrame:
    """A runs frame (the columns the report reads) of a 5-rung ladder: variant -> power-law parameters."""
    rows = []
    for v, (variant, p) in enumerate(spec.items()):
        pts = law_points(seeds, noise, rng_seed=10 + v, **p)
        for seed, (cs, ys) in pts.items():
            for i, (c, y) in enumerate(zip(cs, ys, strict=True)):
                rows.append({"run_id": f"{variant}-{seed}-{i}", "variant": variant, "seed": seed,
                             "status": "done", "flops": c, "ppl/code": float(np.exp(y - 0.1)),
                             "ppl/prose": float(np.exp(y + 0.1)), "model.n_layers": 2 + i,
                             "model.d_model": 64, "train.steps": 100 * (i + 1), "train.lr": 0.01})
    return pd.DataFrame(rows)


TARGETS = [Target("near", 1e16), Target("farther", 1e17), Target("too far", 1e20)]  # the ladder ends at 1e15


def test_analyse_predicts_a_win_that_shrinks_with_scale() -> None:
    # the gated arm's A is 10% lower: its win in loss shrinks with compute but stays
    report = analyse(frame({"baseline": TRUE, "sdpa-elementwise": {**TRUE, "A": 27.0}}), TARGETS, grid="g")
    base, gated = report["variants"]["baseline"], report["variants"]["sdpa-elementwise"]
    assert base["fit"]["reliable"] and gated["fit"]["reliable"]
    assert base["fit"]["alpha"]["value"] == pytest.approx(0.12, abs=0.02)
    assert {"E", "A", "alpha"} <= set(base["fit"]) and {"value", "low", "high"} == set(base["fit"]["E"])
    for p in gated["predictions"][:2]:
        assert p["low"] <= p["loss"] <= p["high"] and p["refused"] is None
        assert p["delta"]["high"] < 0 and p["delta"]["resolved"]
    # five decades past the ladder: no number, and the reason
    far = gated["predictions"][2]
    assert far["loss"] is None and far["delta"]["value"] is None
    assert far["refused"] == "1.0e+05 x the largest rung's compute (the limit is 1e+03 x)"
    # one decade past the ladder the predicted difference is close to the truth (baseline - gated = 3
    # C^-0.12), and inside its interval
    near, truth = gated["predictions"][0]["delta"], -3.0 * 1e16 ** -0.12
    assert near["value"] == pytest.approx(truth, abs=0.005) and near["low"] <= truth <= near["high"]
    assert base["predictions"][0]["delta"] is None  # the baseline has no difference to itself
    assert [r["rung"] for r in gated["rungs"]] == [f"L{n}·d64" for n in range(2, 7)]
    assert all(r["delta"]["value"] < 0 for r in gated["rungs"])
    # measured, without the law: the win (baseline - gated = 3 C^-0.12) shrinks by a known amount per decade
    trend = gated["delta_trend"]["per_decade"]
    truth = np.polyfit(np.log10(RUNGS), -3.0 * RUNGS ** -0.12, 1)[0]
    assert (
        trend["value"] == pytest.approx(truth, abs=0.003)
        and trend["low"] > 0
        and gated["delta_trend"]["resolved"]
    )


def test_unreliable_fits_get_no_prediction() -> None:
    flat = {"E": 2.0, "A": 1.0, "alpha": -0.02}  # the loss rises with compute: alpha <= 0
    report = analyse(frame({"baseline": TRUE, "sdpa-headwise": flat}), TARGETS)
    bad = report["variants"]["sdpa-headwise"]
    assert not bad["fit"]["reliable"]
    assert any("alpha <= 0" in p or "non-monotone" in p for p in bad["fit"]["problems"])
    assert all(p["loss"] is None and p["delta"]["value"] is None for p in bad["predictions"])
    assert bad["predictions"][0]["refused"] == "unreliable fit"
    # a ladder that shows no floor: a straight line in log-log, E at its bound 0
    straight = analyse(frame({"baseline": {"E": 0.0, "A": 30.0, "alpha": 0.1}}),
                       TARGETS)["variants"]["baseline"]
    assert straight["fit"]["problems"] == [
        "the loss floor E is not identified (the fit puts it at 0): the ladder's losses do not bend towards "
        "a floor"]
    # three rungs are too few
    few = frame({"baseline": TRUE})
    few = few[few["model.n_layers"] <= 4]
    (only,) = analyse(few, TARGETS)["variants"].values()
    assert only["fit"]["problems"] == ["too few rungs (3 < 4)"] and only["predictions"][0]["loss"] is None


def test_an_effect_inside_its_interval_is_unresolved() -> None:
    report = analyse(frame({"baseline": TRUE, "sdpa-elementwise": TRUE}, noise=0.02), TARGETS)
    d = report["variants"]["sdpa-elementwise"]["predictions"][0]["delta"]
    assert d["low"] < 0 < d["high"] and d["resolved"] is False


def test_two_seeds_resolve_nothing() -> None:
    # the same clear win as above, measured with two seeds: three resamples are not an interval
    report = analyse(frame({"baseline": TRUE, "sdpa-elementwise": {**TRUE, "A": 27.0}}, seeds=2), TARGETS)
    gated = report["variants"]["sdpa-elementwise"]
    assert gated["fit"]["reliable"] and gated["predictions"][0]["delta"]["high"] < 0
    assert gated["predictions"][0]["delta"]["resolved"] is False and gated["delta_trend"]["resolved"] is False
    assert "2 seed(s): the intervals rest on 3 distinct resample(s)" in report["notes"][0]
