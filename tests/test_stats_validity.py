"""The reports' statistics hold their promises: simulation tests of the error rates (coverage of the 95%
intervals at 2-10 seeds, the family-wise error under Holm, the power formula), and closed-form checks against
scipy.

Every simulation draws from a fixed seed and runs vectorized through the same functions the reports call.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as ss

from ablate.errors import UserInputError
from ablate.reports.cells import delta_cell
from ablate.stats import (
    BOOTSTRAP_MIN_N,
    Stats,
    adjust,
    bootstrap_ci,
    compare,
    correct,
    mde,
    method_note,
    paired_delta,
    paired_ratio,
    power,
    seeds_needed,
    sign_flip_pvalue,
    t_interval,
    t_pvalue,
    unresolved_line,
)

DRAWS = 6000
NS = (2, 3, 5, 10)


def _noise(rng: np.random.Generator, dist: str, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape) if dist == "normal" else rng.standard_t(3, shape)


def _null_pairs(rng: np.random.Generator, dist: str, shape: tuple[int, ...]) -> np.ndarray:
    """Paired differences under the null: a treatment and a reference from one distribution, plus a per-seed
    offset both share (what pairing cancels)."""
    offset = 3.0 * _noise(rng, dist, shape)
    return (offset + _noise(rng, dist, shape)) - (offset + _noise(rng, dist, shape))


# ---------------------------------------------------------------- simulations
@pytest.mark.parametrize("dist", ["normal", "t3"])
@pytest.mark.parametrize("n", NS)
def test_the_95_percent_interval_covers_zero_95_percent_of_the_time_under_the_null(n: int, dist: str) -> None:
    rng = np.random.default_rng(1000 * n + len(dist))
    lo, hi = t_interval(_null_pairs(rng, dist, (DRAWS, n)))
    coverage = float(np.mean((lo <= 0) & (0 <= hi)))
    assert 0.93 <= coverage <= 0.97, f"n={n} {dist}: coverage {coverage:.3f}"


@pytest.mark.parametrize("n", NS)
def test_the_bootstrap_the_reports_used_to_print_undercovers_at_small_n(n: int) -> None:
    """Why the t interval is the default: the [min, max] of two seeds excludes 0 half the time (a check that
    the simulation can tell a bad interval; the bootstrap's own range is what limits it)."""
    x = _null_pairs(np.random.default_rng(n), "normal", (DRAWS, n))
    range_covers = float(np.mean((x.min(axis=1) <= 0) & (0 <= x.max(axis=1))))
    assert range_covers <= 1 - 2 * 0.5 ** n + 0.02  # the bootstrap never reaches outside [min, max]
    assert range_covers < 0.93 or n >= 5


def test_the_log_ratio_interval_covers_the_true_ratio() -> None:
    rng = np.random.default_rng(7)
    for n in NS:
        ref = np.exp(rng.normal(0, 0.3, (DRAWS, n)))
        treat = ref * np.exp(math.log(0.25) + rng.normal(0, 0.5, (DRAWS, n)))  # the true ratio is 0.25
        lo, hi = t_interval(np.log(treat / ref))
        coverage = float(np.mean((np.exp(lo) <= 0.25) & (0.25 <= np.exp(hi))))
        assert 0.93 <= coverage <= 0.97, f"n={n}: {coverage:.3f}"


@pytest.mark.parametrize("n", (3, 5))
def test_holm_keeps_a_30_comparison_tables_family_wise_error_at_5_percent(n: int) -> None:
    """30 arms against one shared baseline (correlated comparisons, as in a Table 1), all null."""
    rng = np.random.default_rng(30 + n)
    tables = 20000
    offset = 3.0 * rng.standard_normal((tables, 1, n))
    base = offset + rng.standard_normal((tables, 1, n))
    arms = offset + rng.standard_normal((tables, 30, n))
    p = t_pvalue(arms - base)  # (tables, 30)
    uncorrected = float(np.mean((p < 0.05).any(axis=1)))
    holm = float(np.mean((adjust(p, "holm") < 0.05).any(axis=1)))
    bh = float(np.mean((adjust(p, "bh") < 0.05).any(axis=1)))  # under the complete null, FDR = FWER
    mc = 2 * math.sqrt(0.05 * 0.95 / tables)  # two Monte Carlo standard errors at a rate of 5%
    assert uncorrected > 0.5  # what an uncorrected table claims
    assert holm <= 0.05 + mc and bh <= 0.05 + mc, (holm, bh)


@pytest.mark.parametrize("dist", ["normal", "t3"])
def test_the_sign_flip_p_is_valid_under_the_null(dist: str) -> None:
    x = _null_pairs(np.random.default_rng(5), dist, (1500, 10))
    p = np.array([sign_flip_pvalue(row) for row in x])
    assert float(np.mean(p <= 0.05)) <= 0.06


def test_power_grows_with_n_as_the_formula_says() -> None:
    rng = np.random.default_rng(11)
    effect, sd = 1.0, 1.0
    seen = []
    for n in (3, 5, 8, 12):
        x = effect + sd * rng.standard_normal((DRAWS, n))
        empirical = float(np.mean(t_pvalue(x) < 0.05))
        assert empirical == pytest.approx(float(power(effect, sd, n)), abs=0.025), n
        seen.append(empirical)
    assert seen == sorted(seen) and seen[-1] > 0.85 > 0.3 > seen[0]
    # the minimum detectable effect is found 80% of the time; seeds_needed is the first n with 80% power
    d = mde(sd, 6)
    x = d + sd * rng.standard_normal((DRAWS, 6))
    assert float(np.mean(t_pvalue(x) < 0.05)) == pytest.approx(0.8, abs=0.025)
    n = seeds_needed(0.7, 1.0)
    assert power(0.7, 1.0, n) >= 0.8 > power(0.7, 1.0, n - 1)


# ---------------------------------------------------------------- closed forms
TREAT = [5.10, 5.32, 4.95, 5.40, 5.05]
REF = [5.40, 5.35, 5.30, 5.61, 5.20]


def test_the_paired_t_interval_and_p_are_scipys() -> None:
    d = paired_delta(dict(enumerate(TREAT)), dict(enumerate(REF)))
    rel = ss.ttest_rel(TREAT, REF)
    ci = rel.confidence_interval()
    assert (d.lo, d.hi) == pytest.approx((ci.low, ci.high), rel=1e-12) and d.p == pytest.approx(rel.pvalue)
    assert d.mean == pytest.approx(np.mean(np.subtract(TREAT, REF))) and d.n == 5 and d.method == "t"
    # every difference is negative: 2 of the 32 sign flips are as extreme
    assert d.p_perm == pytest.approx(2 / 32)


def test_the_log_ratio_interval_is_the_exponentiated_t_interval_of_the_log_ratios() -> None:
    logs = np.log(np.divide(TREAT, REF))
    ci = ss.ttest_1samp(logs, math.log(0.9)).confidence_interval()
    d = paired_ratio(dict(enumerate(TREAT)), dict(enumerate(REF)), bound=0.9)
    assert d.mean == pytest.approx(ss.gmean(np.divide(TREAT, REF)))
    assert (d.lo, d.hi) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
    assert d.p == pytest.approx(ss.ttest_1samp(logs, math.log(0.9)).pvalue) and d.scale == "log"


def test_holm_and_bh_against_scipy_and_by_hand() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.2, 0.5]
    assert adjust(p, "bh") == pytest.approx(list(ss.false_discovery_control(p, method="bh")))
    # Holm by hand: sorted 0.005, 0.01, 0.03, 0.04, 0.2, 0.5 times 6, 5, 4, 3, 2, 1, then a running maximum
    assert adjust(p, "holm") == pytest.approx([0.05, 0.12, 0.12, 0.03, 0.4, 0.5])
    assert adjust(p, "none") == p
    with pytest.raises(UserInputError, match="unknown correction 'bonf'.*allowed: bh, holm, none"):
        adjust(p, "bonf")


def test_one_seed_gets_no_interval_and_says_n_1() -> None:
    d = paired_delta({0: 5.0}, {0: 6.0})
    assert (d.mean, d.lo, d.hi, d.p, d.n) == (-1.0, None, None, None, 1)
    assert delta_cell(d, 2, 1).text == "-1.00 (n=1)"
    assert "n=1: no interval" in method_note([d])
    assert unresolved_line("G1 vs baseline", d,
                           2) == "G1 vs baseline: -1.00 (n=1), needs a second seed for a spread"


def test_the_bootstrap_is_opt_in_and_only_from_20_seeds() -> None:
    boot = Stats(interval="bootstrap")
    few = compare([0.1, -0.3, 0.2, 0.05, -0.1], stats=boot)
    assert few.method == "t" and (few.lo, few.hi) == t_interval([0.1, -0.3, 0.2, 0.05, -0.1])
    assert f"bootstrap needs n >= {BOOTSTRAP_MIN_N}, paired t used below that" in method_note([few], boot)
    x = list(np.random.default_rng(0).normal(size=BOOTSTRAP_MIN_N))
    many = compare(x, stats=boot)
    assert many.method == "bootstrap" and (many.lo, many.hi) == bootstrap_ci(x)
    assert method_note([many], boot).startswith("Δ: BCa bootstrap 95% CI (n=20 seeds)")
    with pytest.raises(UserInputError, match="unknown interval 'z'.*allowed: bootstrap, t"):
        Stats(interval="z")


def test_the_family_is_corrected_and_the_footer_says_how() -> None:
    deltas = [compare(x) for x in ([-1.0, -1.1, -0.9], [0.2, -0.1, 0.05], [-0.5, -0.52, -0.49], [0.3])]
    fam = correct(deltas)
    assert [d.p_adj is None for d in fam] == [False, False, False, True]  # n=1 is not in the family
    assert fam[0].p_adj == pytest.approx(min(1.0, 3 * min(d.p for d in deltas[:3])) if deltas[0].p == min(
        d.p for d in deltas[:3]) else fam[0].p_adj)
    assert method_note(fam) == ("Δ: paired Student t 95% CI (n=1/3 seeds, n-1 df); n=1: no interval; "
                                "significant (bold) after Holm over 3 comparisons at alpha=0.05")
    line = unresolved_line("x vs baseline", fam[1], 2, m=3)
    assert line.startswith("x vs baseline: +0.05 ± 0.37, needs ≈ ")
    assert line.endswith(" seeds (Holm over 3 comparisons in this table)")  # the family it was worked out for


# ---------------------------------------------------------------- looking again
def test_looking_again_with_alpha_spending_keeps_the_false_positive_rate_over_all_looks() -> None:
    from ablate.sequential import look_levels, looks

    plan = looks(3, 2, 12)
    assert plan == [3, 5, 7, 9, 11, 12]
    levels = look_levels(plan)
    assert sum(levels) == pytest.approx(0.05) and levels[0] < 0.001  # O'Brien-Fleming: little spent early
    rng = np.random.default_rng(12)
    for dist in ("normal", "t3"):
        x = _null_pairs(rng, dist, (20000, plan[-1]))
        p = np.stack([t_pvalue(x[:, :n]) for n in plan], axis=1)  # (draws, looks)
        spending = float(np.mean((p < np.asarray(levels)).any(axis=1)))
        naive = float(np.mean((p < 0.05).any(axis=1)))  # looking again at 0.05 each time
        assert spending <= 0.05 and naive > 0.08, (dist, spending, naive)
    # under a true effect, spending still resolves most comparisons by the last look
    x = 1.0 + rng.standard_normal((4000, plan[-1]))
    p = np.stack([t_pvalue(x[:, :n]) for n in plan], axis=1)
    assert float(np.mean((p < np.asarray(levels)).any(axis=1))) > 0.6
    with pytest.raises(UserInputError, match="need 2 <= first seeds"):
        looks(1, 2, 10)
