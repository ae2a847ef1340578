"""The scorecard on its own: each kind of claim (delta, ratio, level, stability) on constructed runs, which
claims a grid can test, and ``ablate report scorecard`` in markdown, JSON and CSV from a real store."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from store_data import Planned

from ablate.config import RunConfig
from ablate.reports.data import catalogue_info
from ablate.reports.scorecard import CLAIMS, CONTRADICTED, HOLDS, UNCLEAR, evaluate_claim, scorecard
from ablate.result import RunResult

LOW, HIGH = 3e-3, 3e-2
CAT = catalogue_info()


def claim(key: str) -> Any:
    return next(c for c in CLAIMS if c.key == key)


def frame(rows: list[dict[str, Any]]) -> Any:
    """The runs, each measurement moved by a relative 1e-4 or less that differs by arm and seed: a spread
    too small to show in the cells' digits, so that values equal across seeds are not read as no spread
    (which is no evidence beyond the signs)."""
    import pandas as pd

    base = {"status": "done", "train.lr": LOW, "loss_spikes": 0, "val_ppl": 6.0, "f_attn": None,
            "m_act": None}
    out = []
    for r in rows:
        row = {**base, **r, "run_id": f"{r['variant']}-{r['seed']}-{r.get('train.lr', LOW)}"}
        w = 1 + 1e-4 * (-1.0, 0.3, 0.7)[(len(str(row["variant"])) + int(row["seed"])) % 3] * (
            1 + 0.1 * len(str(row["variant"])))
        out.append({k: v * w if k in ("val_ppl", "f_attn", "m_act") and v is not None else v
                    for k, v in row.items()})
    return pd.DataFrame(out)


def arms(base: dict[str, Any], g1: dict[str, Any], seeds: int = 3, **extra: Any) -> list[dict[str, Any]]:
    return ([{"variant": "baseline", "seed": s, **extra, **base} for s in range(seeds)]
            + [{"variant": "sdpa-elementwise", "seed": s, **extra, **g1} for s in range(seeds)])


def test_the_sink_is_a_level_against_0_3():
    sink = claim("sink")
    v = evaluate_claim(sink, frame(arms({"f_attn": 0.45}, {"f_attn": 0.05})), CAT)
    assert (v.verdict, v.delta.n, v.effect, v.ci) == (HOLDS, 3, "F-Attn 0.450", "[0.450, 0.450]")
    weak = frame([{"variant": "baseline", "seed": s,
                   "f_attn": f} for s, f in enumerate([0.01, 0.012, 0.009])])
    w = evaluate_claim(sink, weak, CAT)
    assert w.verdict == CONTRADICTED and "baseline, mean of 3 run(s) against 0.3" in w.detail
    straddle = frame([{"variant": "baseline", "seed": s,
                       "f_attn": f} for s, f in enumerate([0.2, 0.4, 0.35])])
    assert "the CI crosses 0.3" in evaluate_claim(sink, straddle, CAT).detail
    assert evaluate_claim(sink, frame([{"variant": "baseline", "seed": 0}]), CAT).detail == \
        "no f_attn measured on baseline (probes off?)"


def test_g1_removes_the_sink_is_a_paired_ratio():
    removes = claim("g1_removes_sink")
    v = evaluate_claim(removes, frame(arms({"f_attn": 0.5}, {"f_attn": 0.05})), CAT)
    assert (v.verdict, v.effect, v.delta.mean) == (HOLDS, "F-Attn ratio 0.10", pytest.approx(0.1))
    half = evaluate_claim(removes, frame(arms({"f_attn": 0.5}, {"f_attn": 0.25})), CAT)
    assert half.verdict == CONTRADICTED and "against 0.33" in half.detail
    m = evaluate_claim(claim("g1_halves_m_act"), frame(arms({"m_act": 200.0}, {"m_act": 90.0})), CAT)
    assert m.verdict == HOLDS and m.ci == "[0.45, 0.45]"


def test_stability_counts_spikes_and_divergence():
    calm = arms({}, {}, **{"train.lr": LOW})
    storm = arms({"status": "diverged", "val_ppl": None}, {}, seeds=2, **{"train.lr": HIGH}) + [
        {"variant": "baseline", "seed": 2, "train.lr": HIGH, "loss_spikes": 3},
        {"variant": "sdpa-elementwise", "seed": 2, "train.lr": HIGH}]
    runs = frame(calm + storm)
    through = evaluate_claim(claim("stable_lr"), runs, CAT)
    # 3 of 3 pairs the same way (+1 each): no spread, so the evidence is the signs' alone, p = 2/2^3
    assert (through.verdict, through.delta.n, through.effect) == (UNCLEAR, 3, "Δ trained through +1.000")
    assert through.delta.p == 0.25 and through.needs == 6
    assert through.detail == ("at lr 0.03: sdpa-elementwise trained through 3/3, baseline 0/3; no spread: "
                              "the signs are the only evidence; not enough evidence: needs ≈ 6 seeds (no "
                              "spread yet: if every pair differs the same way) (Holm over 1 comparison in "
                              "this scorecard)")
    survived = evaluate_claim(claim("survives_lr"), runs, CAT)
    # one baseline seed spiked but survived: 2 of 3 pairs differ (+1, 0, +1); the t interval crosses 0, and an
    # effect of 0.67 with a spread of 0.58 needs 9 seeds for 80% power
    assert survived.detail == ("at lr 0.03: sdpa-elementwise survived 3/3, baseline 1/3; the CI crosses 0; "
                               "not enough evidence: needs ≈ 9 seeds (Holm over 1 comparison in this "
                               "scorecard)")
    assert survived.verdict == UNCLEAR and survived.needs == 9
    quiet = evaluate_claim(claim("stable_lr"), frame(calm), CAT)
    assert quiet.verdict == UNCLEAR and "raise the learning rate" in quiet.detail


def test_only_claims_the_grid_can_test():
    runs = frame(arms({"f_attn": 0.45, "m_act": 300.0, "val_ppl": 6.2}, {"f_attn": 0.04, "m_act": 60.0}))
    keys = [v.claim.key for v in scorecard(runs, CAT)]
    assert keys == ["sink", "lower_f_attn", "g1_removes_sink", "lower_m_act", "g1_halves_m_act",
                    "g1_beats_baseline", "stable_lr", "survives_lr"]
    everything = scorecard(runs, CAT, every_claim=True)
    assert len(everything) == len(CLAIMS)
    g2 = next(v for v in everything if v.claim.key == "g2_keeps_sink")
    assert g2.verdict == UNCLEAR and g2.detail == "the grid has no finished runs of v-elementwise"


# ---------------------------------------------------------------- the command, from a store
def _run(variant: str, seed: int, lr: float, *, f_attn: float, status: str = "done") -> tuple[Planned,
                                                                                              RunResult]:
    from ablate.grid import run_id

    config = RunConfig(variant=variant, seed=seed, model={"preset": "tiny"}, train={"lr": lr, "steps": 10})
    rid = run_id(config)
    done = status == "done"
    summary = {"steps": 10, "tokens": 10, "loss_spikes": 0,
               "val_ppl": (5.5 if variant == "baseline" else 5.0) + seed
               if done else None, "f_attn": f_attn if done else None,
               "m_act": (400.0 if variant == "baseline" else
                                                                                 50.0) if done else None}
    return (Planned(rid, config, 1000, 0, axes={"variant": variant, "seed": seed, "train.lr": lr}),
            RunResult(run_id=rid, config=config.model_dump(mode="json"), status=status, summary=summary,
                      metrics={"step": list(range(10)), "loss": [3.0] * 10}))


@pytest.fixture
def store_url(tmp_path) -> str:
    from ablate.store import Store

    url = f"sqlite:///{tmp_path / 'ablate.db'}"
    runs = [_run("baseline", s, LOW, f_attn=0.4 + 0.01 * s) for s in range(3)]
    runs += [_run("sdpa-elementwise", s, LOW, f_attn=0.03) for s in range(3)]
    # two seeds at the high rate: the low one is the grid's most common configuration, where probes are read
    runs += [_run("baseline", s, HIGH, f_attn=0.0, status="diverged") for s in range(2)]
    runs += [_run("sdpa-elementwise", s, HIGH, f_attn=0.04) for s in range(2)]
    with Store.open(url) as store:
        store.register_grid(name="sink", text="name: sink\n", runs=[p for p, _ in runs])
        for _, r in runs:
            store.ingest(r)
    return url


def test_report_scorecard_json_csv_markdown(store_url):
    from typer.testing import CliRunner

    from ablate.cli import app

    cli = CliRunner()
    res = cli.invoke(app, ["report", "scorecard", "--grid", "sink", "--store", store_url, "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["key"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"sink", "lower_f_attn", "g1_removes_sink", "lower_m_act", "g1_halves_m_act",
                         "g1_beats_baseline", "stable_lr", "survives_lr"}
    assert all(set(r) >= {"claim", "effect", "ci", "n", "verdict", "detail"} for r in rows.values())
    assert rows["sink"]["effect"] == pytest.approx(0.41) and rows["sink"]["verdict"] == HOLDS
    # every pair differs by exactly -0.5: no spread, no interval, and p = 2/2^3 (not a verdict)
    assert rows["g1_beats_baseline"]["ci"] is None and rows["g1_beats_baseline"]["p"] == 0.25
    assert rows["g1_beats_baseline"]["verdict"] == UNCLEAR
    assert rows["g1_halves_m_act"]["effect"] == pytest.approx(0.125) and rows["g1_halves_m_act"]["n"] == 3
    assert rows["sink"]["detail"].endswith("(at train.lr=0.003)") and rows["g1_beats_baseline"]["n"] == 3
    # two seeds, both survived by G1 only: p = 2/2^2 = 0.5, however clear it looks
    assert rows["survives_lr"]["verdict"] == UNCLEAR
    assert rows["survives_lr"]["detail"].startswith("at lr 0.03:")
    assert rows["survives_lr"]["p"] == 0.5

    res = cli.invoke(app, ["report", "scorecard", "--grid", "sink", "--store", store_url, "--format", "csv"])
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["key"] for r in table] == list(rows) and table[0]["ci_lo"] == str(rows["sink"]["ci"][0])

    res = cli.invoke(app, ["report", "scorecard", "--grid", "sink", "--store", store_url])
    assert res.stdout.startswith("| Claim | Effect | 95% CI | n | Verdict | Detail | Pairing | Paper |")
    assert "| G1 leaves at most 1/3 of the baseline's F-Attn | F-Attn ratio 0.07 |" in res.stdout

    res = cli.invoke(app,
                     ["report", "scorecard", "--grid", "sink", "--store", store_url, "--format", "latex"])
    assert res.exit_code == 2 and res.output == ("error: unknown scorecard format 'latex'; allowed: csv, "
                                                "html, json, markdown (option --format)\n")
    res = cli.invoke(app, ["report", "table1", "--grid", "sink", "--store", store_url, "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["table"] == "table1"  # tables have JSON too
