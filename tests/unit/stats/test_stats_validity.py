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
    method_note,
    paired_delta,
    paired_ratio,
    sign_flip_pvalue,
    t_interval,
    t_pvalue,
)
from ablate.stats.power import mde, power, seeds_needed, unresolved_line

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


DISCRETE = {  # metrics that take few values, as runs measure them
    "share of 16 rows": lambda rng, shape: rng.binomial(16, 0.05, shape) / 16,  # massive_first
    "loss spikes": lambda rng, shape: rng.poisson(0.3, shape),  # a count, mostly 0
    "three levels": lambda rng, shape: rng.integers(0, 3, shape).astype(float),  # steps, a coarse score
}
DISCRETE_DRAWS = 2000


@pytest.mark.parametrize("metric", list(DISCRETE))
def test_a_metric_of_few_values_is_significant_at_most_alpha_of_the_time_under_the_null(metric: str) -> None:
    """Both arms from one discrete distribution, n = 2-10 pairs: the p the reports read (``compare``) stays
    at or below alpha. The t test alone read n equal differences as p = 0 (no spread), which the old
    reading turns into false positives well above alpha."""
    draw = DISCRETE[metric]
    rng = np.random.default_rng(len(metric))
    old_worst = 0.0
    for n in range(2, 11):
        x = draw(rng, (DISCRETE_DRAWS, n)) - draw(rng, (DISCRETE_DRAWS, n))
        rate = float(np.mean([compare(row).p < 0.05 for row in x]))
        assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / DISCRETE_DRAWS), f"n={n}: {rate:.3f}"
        sd, mean = x.std(axis=1, ddof=1), x.mean(axis=1)
        old = np.where(sd > 0, t_pvalue(np.where(sd[:, None] > 0, x, 1.0)), np.where(mean == 0, 1.0, 0.0))
        old_worst = max(old_worst, float(np.mean(old < 0.05)))
    if metric != "loss spikes":  # mostly 0, so equal nonzero differences are rare there
        assert old_worst > 0.08, old_worst  # what the plain t test with p = 0 at no spread did


def test_pairs_with_no_spread_carry_the_sign_flip_p_and_no_interval() -> None:
    from ablate.stats.power import needs, needs_text

    two = compare([0.0625, 0.0625])  # the quick start's massive_first: two seeds that both measured 1/16
    assert (two.p, two.lo, two.hi, two.no_spread) == (0.5, None, None, True) and not two.resolved
    assert needs(two) == 6 and needs_text(needs(two), two) == ("needs ≈ 6 seeds (no spread yet: if every "
                                                               "pair differs the same way)")
    assert delta_cell(two, 2, 2).text == "+0.06 (no spread)"
    six = compare([1.0] * 6)
    assert six.p == pytest.approx(2 / 64) and six.resolved  # the exact test's own evidence at 6 pairs
    tied = compare([0.0625, 0.0625, 0.125])  # spread, but ties: no smaller than the exact sign-flip p
    assert tied.tied and tied.p == pytest.approx(max(ss.ttest_1samp([0.0625, 0.0625, 0.125], 0).pvalue,
                                                     sign_flip_pvalue([0.0625, 0.0625, 0.125])))
    smooth = compare([0.013, -0.021, 0.007])  # measurements that vary continuously: the t test alone
    assert not smooth.tied and smooth.p == pytest.approx(ss.ttest_1samp([0.013, -0.021, 0.007], 0).pvalue)


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


# ---------------------------------------------------------------- pairing: any correlation, the sign included
RHOS = (-0.8, -0.4, 0.0, 0.4, 0.8)


def _correlated(rng: np.random.Generator, rho: float,
                shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Two arms of unit spread whose values at one seed correlate ``rho`` (no true difference)."""
    z1, z2 = rng.standard_normal(shape), rng.standard_normal(shape)
    return z1, rho * z1 + math.sqrt(1 - rho ** 2) * z2


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unpaired (Welch) 95% interval of mean(a) - mean(b) along the last axis, and its p."""
    n = a.shape[-1]
    va, vb = a.var(axis=-1, ddof=1) / n, b.var(axis=-1, ddof=1) / n
    df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
    diff, se = a.mean(axis=-1) - b.mean(axis=-1), np.sqrt(va + vb)
    half = ss.t.ppf(0.975, df) * se
    return diff - half, diff + half, 2 * ss.t.sf(np.abs(diff) / se, df)


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("n", (3, 5, 10))
def test_the_paired_interval_covers_at_any_correlation_between_the_arms(n: int, rho: float) -> None:
    """Pairing by seed is valid whatever the arms' correlation, negative too: a negative one widens the
    interval (the pairing costs) but never breaks its coverage, so the reports keep the paired t."""
    a, b = _correlated(np.random.default_rng(int(100 * (rho + 1)) + n), rho, (DRAWS, n))
    lo, hi = t_interval(a - b)
    coverage = float(np.mean((lo <= 0) & (0 <= hi)))
    assert 0.93 <= coverage <= 0.97, f"n={n} rho={rho}: coverage {coverage:.3f}"
    assert float(np.mean(t_pvalue(a - b) < 0.05)) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / DRAWS)


@pytest.mark.parametrize("n", (3, 5, 10))
def test_an_unpaired_reading_of_seed_paired_runs_undercovers_when_the_correlation_is_negative(n: int) -> None:
    """Why a negative correlation is not read unpaired: Welch's interval assumes independent arms, and
    with rho = -0.8 it is too narrow (the paired difference's variance is 1.8x the sum it assumes)."""
    rng = np.random.default_rng(40 + n)
    for rho, low, high in ((-0.8, 0.0, 0.91), (0.0, 0.93, 0.98)):
        a, b = _correlated(rng, rho, (DRAWS, n))
        lo, hi, _ = _welch(a, b)
        coverage = float(np.mean((lo <= 0) & (0 <= hi)))
        assert low <= coverage <= high, f"n={n} rho={rho}: Welch coverage {coverage:.3f}"


def test_going_unpaired_when_the_measured_correlation_is_negative_inflates_false_positives() -> None:
    """The tempting rule (paired when r > 0, else unpaired, to dodge the cost) rejects a true null too
    often when the arms really are anti-correlated; always reading the paired t keeps 5%."""
    rng = np.random.default_rng(77)
    draws, n = 20000, 8
    a, b = _correlated(rng, -0.6, (draws, n))
    paired = t_pvalue(a - b)
    r = np.array([np.corrcoef(x, y)[0, 1] for x, y in zip(a, b, strict=True)])
    switched = np.where(r < 0, _welch(a, b)[2], paired)
    mc = 2 * math.sqrt(0.05 * 0.95 / draws)
    assert float(np.mean(paired < 0.05)) <= 0.05 + mc
    assert float(np.mean(switched < 0.05)) > 0.05 + 2 * mc


@pytest.mark.parametrize("rho", (-0.5, 0.5))
def test_worth_is_the_unpaired_seeds_with_the_same_precision(rho: float) -> None:
    """``Pairing.worth``: n pairs at correlation rho are as precise as n / (1 - rho) unpaired seeds per arm
    (equal spreads). Simulated: the paired mean difference's variance at n = 6 equals the variance of two
    independent means of that many seeds; and the estimate converges to it."""
    from ablate.stats.pairing import pairing

    rng = np.random.default_rng(5)
    n, worth = 6, 6 / (1 - rho)
    a, b = _correlated(rng, rho, (40000, n))
    paired_var = float(np.var((a - b).mean(axis=1)))
    k = round(worth)  # 12 seeds per arm at rho 0.5, 4 at rho -0.5
    ua, ub = rng.standard_normal((40000, k)), rng.standard_normal((40000, k))
    unpaired_var = float(np.var(ua.mean(axis=1) - ub.mean(axis=1)))
    assert paired_var == pytest.approx(2 * (1 - rho) / n, rel=0.03)
    assert paired_var == pytest.approx(unpaired_var, rel=0.04)
    big = pairing(list(zip(*_correlated(rng, rho, (50000,)), strict=True)))
    assert big.r == pytest.approx(rho, abs=0.01)
    assert big.worth / big.n == pytest.approx(1 / (1 - rho), rel=0.03)
    assert ("worth ≈" in big.text()) == (rho > 0) and ("pairing costs" in big.text()) == (rho < 0)


def test_a_paired_difference_of_exactly_zero_reads_identical_without_a_division() -> None:
    import warnings

    from ablate.stats.pairing import pairing
    from ablate.stats.power import needs, needs_text

    values = [(5.0, 5.0), (6.1, 6.1), (5.7, 5.7)]
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        d = paired_delta({i: a for i, (a, _) in enumerate(values)}, {i: b for i, (_, b) in enumerate(values)})
        p = pairing(values)
        assert d.identical and (d.mean, d.lo, d.hi, d.p, d.n) == (0.0, None, None, 1.0, 3) and not d.resolved
        assert needs(d) is None and needs_text(needs(d), d) == ("identical at every seed: no difference for "
                                                                 "more seeds to find")
        assert p.r == pytest.approx(1.0) and p.worth is None and p.sd_d == 0.0
        ratio = paired_ratio({i: a for i, (a, _) in enumerate(values)},
                             {i: b for i, (_, b) in enumerate(values)})
        assert ratio.identical and ratio.mean == 1.0 and ratio.p == 1.0
        assert "identical at every seed" in unresolved_line("x vs baseline", d, 2)
    shifted = paired_delta({0: 5.0, 1: 6.0, 2: 7.0}, {0: 4.5, 1: 5.5, 2: 6.5})  # one constant, not zero
    # one constant difference, not zero: no spread, so the signs are all the evidence (2/2^3), no interval
    assert not shifted.identical and shifted.no_spread and shifted.p == 0.25 and shifted.pairing.worth is None
    assert (shifted.lo, shifted.hi) == (None, None) and not shifted.resolved


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
    from ablate.stats.sequential import look_levels, looks

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
