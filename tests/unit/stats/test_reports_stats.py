"""Reports' pure parts on constructed data: cell text (mean, spread, n, "-", empty), the scorecard's verdicts,
and which grid a report reads."""

from __future__ import annotations

from typing import Any

import pytest

from ablate.reports.cells import summary_cell
from ablate.stats import bootstrap_ci, paired_delta, summarize

LOW_LR, HIGH_LR = 3e-3, 2e-2


# ---------------------------------------------------------------- cells: mean, spread, n, "-", empty
def test_summary_cells() -> None:
    assert summary_cell(summarize([5.81, 5.83, 5.85]), 2, 3).text == "5.83 ± 0.02"
    assert summary_cell(summarize([5.81, 5.85]), 2, 3).text == "5.83 ± 0.03 (n=2)"
    assert summary_cell(summarize([5.83]), 2, 1).text == "5.83 (n=1)"
    assert summary_cell(summarize([], diverged=2), 2, 2).text == "-"
    assert summary_cell(summarize([6.0, 6.2], diverged=1), 2, 3).text == "6.10 ± 0.14 (n=2, 1 diverged)"
    assert summary_cell(summarize([None, float("nan")]), 2, 3).text == ""
    assert summary_cell(summarize([]), 2, 3).text == ""


# ---------------------------------------------------------------- scorecard
def _frame(rows: list[tuple[str, int, float | None, str]], lr: float = LOW_LR) -> Any:
    import pandas as pd

    return pd.DataFrame([{"run_id": f"{v}-{s}-{lr}", "variant": v, "seed": s, "status": st, "val_ppl": ppl,
                          "f_attn": None, "m_act": None, "train.lr": lr} for v, s, ppl, st in rows])


def test_scorecard_verdicts_on_constructed_data() -> None:
    import pandas as pd

    from ablate.reports.data import catalogue_info
    from ablate.reports.scorecard import CLAIMS, CONTRADICTED, HOLDS, UNCLEAR, evaluate_claim

    cat = catalogue_info()
    g1 = next(c for c in CLAIMS if c.key == "g1_beats_baseline")
    better = _frame([("baseline", s, 6.0 + 0.01 * s, "done") for s in range(3)]
                    + [("sdpa-elementwise", s, 5.8 + 0.02 * s, "done") for s in range(3)])
    v = evaluate_claim(g1, better, cat)
    assert (v.verdict, v.delta.n) == (HOLDS, 3) and v.delta.mean == pytest.approx(-0.19)
    assert v.delta.hi < 0 and v.effect == "Δ PPL -0.19"
    worse = _frame([("baseline", s, 5.8, "done") for s in range(3)]
                   + [("sdpa-elementwise", s, 6.0 + 0.01 * s, "done") for s in range(3)])
    assert evaluate_claim(g1, worse, cat).verdict == CONTRADICTED
    mixed = _frame([("baseline", s, 6.0, "done") for s in range(2)]
                   + [("sdpa-elementwise", 0, 5.9, "done"), ("sdpa-elementwise", 1, 6.1, "done")])
    assert evaluate_claim(g1, mixed, cat).verdict == UNCLEAR
    one = _frame([("baseline", 0, 6.0, "done"), ("sdpa-elementwise", 0, 5.0, "done")])
    v1 = evaluate_claim(g1, one, cat)
    assert (v1.verdict, v1.delta.n) == (UNCLEAR, 1) and "at least two" in v1.detail
    unpaired = _frame([("baseline", 0, 6.0, "done"), ("sdpa-elementwise", 1, 5.0, "done")])
    assert evaluate_claim(g1, unpaired, cat).delta.n == 0
    missing = evaluate_claim(next(c for c in CLAIMS if c.key == "g1_beats_g2"), better, cat)
    assert missing.verdict == UNCLEAR and "v-elementwise" in missing.detail

    stable = next(c for c in CLAIMS if c.key == "survives_lr")
    storm = pd.concat([better, _frame([("baseline", s, None, "diverged") for s in range(3)]
                                      + [("sdpa-elementwise", s, 5.9, "done") for s in range(3)],
                                      lr=HIGH_LR)])
    sv = evaluate_claim(stable, storm, cat)
    # 3 of 3 the same way, no spread: the signs' evidence alone (p = 2/2^3) resolves nothing yet
    assert (sv.verdict, sv.delta.n, sv.delta.mean, sv.delta.p) == (UNCLEAR, 3, 1.0, 0.25)
    assert "survived 3/3" in sv.detail and "no spread" in sv.detail
    more = (_frame([("baseline", s, None, "diverged") for s in range(3, 6)]
                   + [("sdpa-elementwise", s, 5.9, "done") for s in range(3, 6)], lr=HIGH_LR))
    six = pd.concat([storm, more])
    assert evaluate_claim(stable, six, cat).verdict == HOLDS  # 6 of 6: p = 2/2^6 < 0.05
    calm = evaluate_claim(stable, better, cat)
    assert calm.verdict == UNCLEAR and "diverged" in calm.detail
    both = pd.concat([better, _frame([("baseline", s, None, "diverged") for s in range(3)]
                                     + [("sdpa-elementwise", s, None, "diverged") for s in range(3)],
                                     lr=HIGH_LR)])
    assert evaluate_claim(stable, both, cat).verdict == UNCLEAR


def test_grid_resolution() -> None:
    from ablate.errors import UserInputError
    from ablate.reports.data import resolve_grid

    assert resolve_grid(["only"], None) == "only"
    assert resolve_grid(["a", "b"], "b") == "b"
    with pytest.raises(UserInputError, match="has 2 grids; name one with --grid: a, b"):
        resolve_grid(["b", "a"], None)
    with pytest.raises(UserInputError, match="no grids yet"):
        resolve_grid([], None)


def test_paired_delta_and_bootstrap() -> None:
    from scipy.stats import ttest_rel

    d = paired_delta({0: 5.0, 1: 5.2, 2: None}, {0: 6.0, 1: 6.0, 2: 6.1, 3: 6.0})
    assert d.n == 2 and d.diffs == pytest.approx((-1.0, -0.8)) and d.mean == pytest.approx(-0.9)
    # two seeds that agree in sign: the paired t interval (1 df) is wide, not the [min, max] the bootstrap
    # gave
    ci = ttest_rel([5.0, 5.2], [6.0, 6.0]).confidence_interval()
    assert (d.lo, d.hi) == pytest.approx((ci.low, ci.high))
    assert (d.lo, d.hi) == pytest.approx((-2.1706, 0.3706), abs=1e-4)
    assert d.side() == 0 and d.method == "t" and d.p == pytest.approx(ttest_rel([5.0, 5.2],
                                                                                [6.0, 6.0]).pvalue)
    assert bootstrap_ci([1.0]) == (None, None)
    lo, hi = bootstrap_ci([0.1, -0.3, 0.2, 0.05, -0.1])
    assert lo < 0 < hi and (lo, hi) == bootstrap_ci([0.1, -0.3, 0.2, 0.05, -0.1])  # fixed seed: reproducible
