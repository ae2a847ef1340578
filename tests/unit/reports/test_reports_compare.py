"""``ablate report compare``: every arm (plugin arms too) against the reference, on a store of known numbers
(``compare_data``), checked against scipy; the decisions of ``--until-resolved`` read at their look in every
report; bad input in one line; the formats.
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compare_data import ANTI, ARM, BASE, LR, SAME, both_grids, cmp_runs, fill, values
from scipy import stats as ss
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import UserInputError
from ablate.stats import Decision, LookRecord, sign_flip_pvalue

runner = CliRunner()
G1 = "sdpa-elementwise"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = both_grids(tmp_path_factory.mktemp("compare"))
    yield store
    store.close()


def _report(store: Any, grid: str = "cmp", **kw: Any) -> Any:
    from ablate.reports.compare import build_compare
    from ablate.reports.data import load_grid_data

    return build_compare(load_grid_data(store, grid), **kw)


def _one(report: Any, arm: str, metric: str = "val_ppl", cell: str = "train.lr=0.003") -> Any:
    return next(c for c in report.comparisons if (c.arm, c.metric, c.cell) == (arm, metric, cell))


def _ask(*args: str, store: Any) -> Any:
    return runner.invoke(app, ["report", *args, "--store", store.url])


# ---------------------------------------------------------------- what each comparison says
def test_every_arm_against_the_baseline_by_cell_with_scipys_numbers(filled: Any) -> None:
    rep = _report(filled, metrics=["val_ppl"])
    v = values()
    arms = [c.arm for c in rep.comparisons if c.cell == "train.lr=0.003"]
    assert arms == [G1, ANTI, ARM, SAME]  # the catalogue's arm, then the plugin arms by name
    for arm in arms:
        c = _one(rep, arm)
        rel = ss.ttest_rel(v[arm], v["baseline"])
        assert c.delta.n == 5 and c.delta.mean == pytest.approx(np.mean(np.subtract(v[arm], v["baseline"])))
        if arm != SAME:
            ci = rel.confidence_interval()
            assert (c.delta.lo, c.delta.hi) == pytest.approx((ci.low, ci.high))
            # ARM's noise ties (|0.15| twice): its p is no smaller than the exact sign-flip p
            flip = sign_flip_pvalue(np.subtract(v[arm], v["baseline"]))
            assert c.delta.tied == (arm in (ARM, ANTI))  # ANTI's differences tie too (+-0.2, +-0.4, 0)
            assert c.delta.p == pytest.approx(max(rel.pvalue, flip) if c.delta.tied else rel.pvalue)
        assert c.arm_runs.mean == pytest.approx(np.mean(v[arm])) and c.arm_runs.std == pytest.approx(
            np.std(v[arm], ddof=1))
        assert c.family == "Holm over 4 comparisons of val_ppl against baseline in this grid" and c.m == 4
    p = [_one(rep, a).delta.p for a in arms]
    holm = [min(1.0, max((4 - j) * q for j, q in enumerate(sorted(p)) if q <= pi)) for pi in p]
    assert [_one(rep, a).delta.p_adj for a in arms] == pytest.approx(holm)
    assert _one(rep, G1).delta.resolved and not _one(rep, ARM).delta.resolved
    # the lr 1e-2 cell has G1 but no baseline run: a note and no delta, not an error
    high = _one(rep, G1, cell="train.lr=0.01")
    assert high.delta.mean is None and high.arm_runs.n == 3 and high.reference_runs.n == 0
    assert any(n.startswith("train.lr=0.01: no finished baseline run") for n in rep.notes)


def test_the_pairing_says_what_it_was_worth_or_cost(filled: Any) -> None:

    rep = _report(filled, metrics=["val_ppl"])
    v = values()
    for arm in (G1, ARM, ANTI):
        c = _one(rep, arm)
        a, b = np.array(v[arm]), np.array(v["baseline"])
        r = np.corrcoef(a, b)[0, 1]
        worth = 5 * (a.var(ddof=1) + b.var(ddof=1)) / (a - b).var(ddof=1)
        assert c.delta.pairing.r == pytest.approx(r) and c.delta.pairing.worth == pytest.approx(worth)
    assert _one(rep, G1).delta.pairing.r > 0.99 and _one(rep, G1).pairing_text.startswith(
        "r=+1.00: worth ≈ ")
    anti = _one(rep, ANTI)
    assert anti.delta.pairing.r == pytest.approx(-1.0) and anti.delta.pairing.worth < 5
    assert re.fullmatch(r"r=-1\.00: pairing costs \(as precise as ≈ \d+\.\d unpaired seeds; paired t kept\)",
                        anti.pairing_text)
    # read the way the simulations show valid: the paired t, whose interval is wide here, not an unpaired one
    rel = ss.ttest_rel(v[ANTI], v["baseline"]).confidence_interval()
    assert (anti.delta.lo, anti.delta.hi) == pytest.approx((rel.low, rel.high))
    assert _one(rep, ARM).verdict.startswith("needs ≈ ")


def test_two_arms_that_are_one_function_read_identical_not_a_division_error(filled: Any) -> None:
    from ablate.reports.compare_render import as_rows

    rep = _report(filled, metrics=["val_ppl"])
    same = _one(rep, SAME)
    d = same.delta
    assert d.identical and (d.mean, d.lo, d.hi, d.p) == (0.0, None, None, 1.0) and not d.resolved
    assert d.pairing.r == pytest.approx(1.0) and d.pairing.worth is None  # no spread left: not a number
    # every metric of its runs is the baseline's (train_loss, F-Attn and M-Act too): identical runs
    assert same.same_runs and same.verdict == "identical runs: every metric equal at every seed"
    assert same.pairing_text == "identical runs: nothing left to pair away"
    row = next(r for r in as_rows(rep) if r["arm"] == SAME)
    assert row["identical"] is True and row["needs_seeds"] is None and row["worth_unpaired_seeds"] is None
    json.dumps(row)  # plain values only


def test_a_ratio_metric_is_read_by_its_paired_log_ratio(filled: Any) -> None:
    rep = _report(filled, metrics=["m_act", "f_attn"])
    m = _one(rep, G1, "m_act")
    assert m.scale == "ratio" and m.delta.mean == pytest.approx(0.1) and m.delta.scale == "log"
    f = _one(rep, G1, "f_attn")
    assert f.scale == "diff" and f.delta.mean == pytest.approx(-0.3)
    assert rep.metrics == ["m_act", "f_attn"] and {c.metric for c in rep.comparisons} == {"m_act", "f_attn"}


def test_every_metric_the_runs_have_by_default_in_the_declared_order(filled: Any) -> None:
    from ablate.metrics import order

    rep = _report(filled)
    assert rep.metrics == order(["train_loss", "val_ppl", "f_attn", "m_act"])  # not params, steps, tokens


# ---------------------------------------------------------------- the formats
def test_markdown_latex_html_csv_and_json(filled: Any) -> None:
    import pandas as pd

    from ablate.reports.compare_render import ROW_FIELDS

    md = _ask("compare", "--grid", "cmp", "--metric", "val_ppl", store=filled)
    assert md.exit_code == 0, md.output
    assert "**Every arm against baseline, grid 'cmp'**" in md.stdout
    assert "| **val_ppl (Avg PPL, lower is better) at train.lr=0.003** |" in md.stdout
    g1 = next(ln for ln in md.stdout.splitlines() if ln.startswith(f"| {G1} |"))
    assert "| **-0.30 [" in g1 and "| < 0.001 | 5 |" in g1 and "resolved: lower, better" in g1
    mine = next(ln for ln in md.stdout.splitlines() if ln.startswith(f"| {ARM} |"))
    assert "**" not in mine and "needs ≈ " in mine
    assert "*cells: mean ± standard deviation over seeds (sample std, n-1)" in md.stdout
    assert f"*{ARM} vs baseline (val_ppl, train.lr=0.003): " in md.stdout  # its needs-N line, with its family
    # the family named once, under the table, for the rows the page shows and every page reads
    assert md.stdout.count("Holm over 4 comparisons of val_ppl against baseline in this grid") == 1

    tex = _ask("compare", "--grid", "cmp", "--format", "latex", store=filled).stdout
    assert tex.count("{") == tex.count("}") and r"\textbf{-0.30 [" in tex and r"\toprule" in tex

    page = _ask("compare", "--grid", "cmp", "--format", "html", store=filled).stdout
    assert page.startswith("<!DOCTYPE html>") and '<table class="ablate" id="compare">' in page
    assert '<th class="method">Arm</th>' in page

    out = _ask("compare", "--grid", "cmp", "--format", "csv", "--metric", "val_ppl", store=filled)
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert list(frame.columns) == ["grid", "cell:train.lr", *ROW_FIELDS] and len(frame) == 5
    assert frame.loc[frame["arm"] == G1, "delta"].iloc[0] == pytest.approx(-0.3)
    assert "unresolved: " in out.stderr and out.stdout.count("\n") == 6  # the lines go to stderr

    doc = json.loads(_ask("compare", "--grid", "cmp", "--format", "json", store=filled).stdout)
    assert set(doc) == {"grid", "reference", "interval", "correction", "metrics", "notes", "unresolved",
                        "comparisons"}
    first = doc["comparisons"][0]
    assert first["cell"] == {"train.lr": LR} and set(first) == {"cell", *ROW_FIELDS}


# ---------------------------------------------------------------- bad input: one line, exit 2, no file
@pytest.mark.parametrize(("args", "message"), [
    (("--reference", "baselin"), r"^error: grid 'cmp' has no runs of the reference arm 'baselin' \(did you "
                                 r"mean 'baseline'\?\); its arms: .* \(option --reference\)$"),
    (("--metric", "val_pl"), r"^error: unknown metric 'val_pl' \(did you mean 'val_ppl'\?\); allowed: .* "
                             r"\(option --metric\)$"),
    (("--metric", "params"), r"^error: unknown metric 'params'.*\(option --metric\)$"),
    (("--metric", "gate_score"), r"^error: grid 'cmp' has no gate_score values; its metrics: train_loss, "
                                 r"val_ppl, f_attn, m_act \(option --metric\)$"),
    (("--format", "docx"), r"^error: "),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(filled: Any, tmp_path: Path, args: tuple,
                                                         message: str) -> None:
    out = tmp_path / "compare.md"
    res = _ask("compare", "--grid", "cmp", *args, "--out", str(out), store=filled)
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert re.search(message, res.output.strip()), res.output
    assert not out.exists()


@pytest.mark.parametrize("args", [("--reference", "baselin"), ("--metric", "val_pl")])
def test_report_all_with_a_bad_reference_or_metric_writes_nothing(filled: Any, tmp_path: Path,
                                                                   args: tuple[str, str]) -> None:
    res = _ask("all", "--grid", "cmp", *args, "--out", str(tmp_path / "r"), store=filled)
    assert res.exit_code == 2 and "did you mean" in res.output and len(res.output.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_a_grid_without_the_reference_arm_is_one_line(tmp_path: Path) -> None:
    from ablate.store import Store

    url = f"sqlite:///{tmp_path / 'a.db'}"
    with Store.open(url) as store:
        fill(store, "plugins-only", [r for r in cmp_runs() if r[1].config["variant"] in (ARM, SAME)])
        res = _ask("compare", store=store)
        assert res.exit_code == 2 and res.output == (
            "error: grid 'plugins-only' has no runs of the reference arm 'baseline'; its arms: "
            "mine:Arm(k=1), mine:Same (option --reference)\n")
        ok = _ask("compare", "--reference", SAME, "--metric", "val_ppl", store=store)
        assert ok.exit_code == 0 and f"| {ARM} |" in ok.stdout
        # report all still writes everything, and says why there is no comparison table
        written = _ask("all", "--out", str(tmp_path / "r"), store=store)
        assert written.exit_code == 0, written.output
        assert "no comparison table: grid 'plugins-only' has no runs of the reference arm 'baseline'" in (
            html.unescape((tmp_path / "r" / "report.html").read_text()))
    assert _ask("table1", "--reference", "x", store=store).output == (
        "error: option --reference is for `ablate report compare` and `ablate report all`, not table1\n")


# ---------------------------------------------------------------- one verdict per comparison
def _decide(store: Any, arm: str, *, look: int | None, p_adj: float, runs: list[str] | None = None) -> None:
    frame = store.runs_frame(grid="cmp")
    at = frame[(frame["train.lr"] == LR) & frame["variant"].isin([arm, "baseline"])]
    ids = runs if runs is not None else sorted(at["run_id"])
    history = (LookRecord(3, 0.0056, -0.3, -0.4, -0.2, 0.01, 0.04), LookRecord(5, 0.0444, -0.3, -0.35, -0.25,
                                                                              0.001, p_adj))
    store.record_decisions(grid="cmp", decisions=[Decision(
        grid="cmp", treatment=arm, reference="baseline", metric="val_ppl", cell={"train.lr": LR},
        runs=tuple(ids), look=look, n=5, level=0.0444, p_adj=p_adj, family=3, correction="holm", plan=(3, 5),
        history=history[:look or 2])])


def test_a_comparison_until_resolved_decided_reads_resolved_in_every_report(tmp_path: Path) -> None:
    from ablate.store import Store

    with Store.open(f"sqlite:///{tmp_path / 'd.db'}") as store:
        fill(store, "cmp", cmp_runs())
        _decide(store, ARM, look=2, p_adj=0.03)  # fixed-n Holm would leave it open; the look resolved it
        _decide(store, G1, look=None, p_adj=0.06)
        assert [(d.treatment, d.look) for d in store.decisions("cmp")] == [(ARM, 2), (G1, None)]
        _decide(store, ARM, look=2, p_adj=0.03)  # recorded again: replaced, not added
        assert len(store.decisions("cmp")) == 2

        rep = _report(store, metrics=["val_ppl"])
        mine = _one(rep, ARM)
        assert mine.delta.resolved and mine.delta.p_adj == 0.03 and mine.delta.decision.look == 2
        assert mine.family.startswith("Holm over 3 comparisons at each look of --until-resolved")
        # a decided comparison leaves the fixed-n family, which shrinks to the other two
        assert _one(rep, ANTI).family == "Holm over 2 comparisons of val_ppl against baseline in this grid"
        g1 = _one(rep, G1)  # open at the last look: never called resolved, whatever fixed-n Holm would say
        assert not g1.delta.resolved and g1.delta.p_adj == 0.06
        md = _ask("compare", "--grid", "cmp", "--metric", "val_ppl", store=store).stdout
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {ARM} |"))
        assert "**+" in row and "resolved at look 2 of 2, n=5 seeds" in row
        assert "(look 2 of 2, level 0.044)" in row
        assert "unresolved after 2 looks, n=5 seeds; needs ≈ " in next(
            ln for ln in md.splitlines() if ln.startswith(f"| {G1} |"))

        t1 = _ask("table1", "--grid", "cmp", store=store).stdout
        assert "| SDPA Elementwise G1 |" in t1 and "(look 2 of 2)" in t1 and "**-0.30" not in t1
        assert "decided by `ablate run --until-resolved`, read at the look that decided it" in t1
        assert ("SDPA Elementwise G1 (Gating Position Variants) vs baseline (val_ppl): -0.30 ± 0.02, "
                "unresolved after 2 looks, n=5 seeds, needs ≈ 6 seeds (Holm over 3 comparisons at each look "
                "of --until-resolved") in t1
        card = json.loads(_ask("scorecard", "--grid", "cmp", "--format", "json", store=store).stdout)
        beats = next(r for r in card if r["key"] == "g1_beats_baseline")
        assert beats["verdict"] == "not enough evidence" and "unresolved after 2 looks, n=5 seeds" in (
            beats["detail"])
        assert beats["family"].startswith("Holm over 3 comparisons at each look of --until-resolved")

        # a decision about other runs (a seed fewer) is another comparison: read at a fixed n
        _decide(store, ANTI, look=1, p_adj=0.001, runs=sorted(
            store.runs_frame(grid="cmp").query("variant in @ANTI_ARMS and seed < 4", local_dict={
                "ANTI_ARMS": [ANTI, "baseline"]})["run_id"]))
        assert _one(_report(store, metrics=["val_ppl"]), ANTI).delta.decision is None


# ---------------------------------------------------------------- report all: every grid, the plugin arm too
def test_report_all_writes_the_comparison_and_the_plugin_arms_curve(filled: Any, tmp_path: Path) -> None:
    from ablate.reports.data import load_grid_data
    from ablate.reports.figure_draw import draw_fig1

    res = _ask("all", "--grid", "cmp", "--out", str(tmp_path / "r"), store=filled)
    assert res.exit_code == 0, res.output
    for suffix in (".md", ".tex", ".csv", ".json"):
        assert (tmp_path / "r" / f"compare{suffix}").stat().st_size > 200
    assert f"| {ARM} |" in (tmp_path / "r" / "compare.md").read_text()
    page = (tmp_path / "r" / "report.html").read_text()
    assert page.index('id="compare-section"') < page.index('id="scorecard-section"') < page.index(
        'id="table1"')
    assert all((tmp_path / "r" / f"table{n}.md").exists() for n in range(1, 7))
    table1 = (tmp_path / "r" / "table1.md").read_text()
    assert f"arms this table has no row for: {ANTI}, {ARM}, {SAME}" in table1
    labels = draw_fig1(load_grid_data(filled, "cmp")).axes[0].get_legend_handles_labels()[1]
    assert {f"{v} (n=5)" for v in ("baseline", G1, ANTI, ARM, SAME)} <= set(labels)


def test_the_reference_has_a_base_level_but_no_comparison_of_its_own(filled: Any) -> None:
    rep = _report(filled)
    assert "baseline" not in {c.arm for c in rep.comparisons}
    means = [c.reference_runs.mean for c in rep.comparisons if c.metric == "val_ppl" and c.reference_runs.n]
    assert means == pytest.approx([np.mean(BASE)] * 4)


def test_check_reference_and_metrics_directly() -> None:
    from ablate.reports.compare import check_metrics, check_reference

    with pytest.raises(UserInputError, match=r"has no runs of the reference arm 'G1'"):
        check_reference("G1", ["baseline"], "g")
    assert check_metrics(["val_ppl", "val_ppl"], ["val_ppl"], "g") == ["val_ppl"]


# ---------------------------------------------------------------- real runs: a plugin arm, the baseline twin
SAME_FN = '''"""The built-in softmax attention weights as a plugin arm: the baseline's function."""

from pydantic import BaseModel, ConfigDict
from torch import nn

from ablate.ablations.weights import Softmax


class SameSoftmax(nn.Module):
    slot = "weights"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def __init__(self, args, cfg) -> None:
        super().__init__()
        self.inner = Softmax()

    def forward(self, q, k, v, probe: bool = False):
        return self.inner(q, k, v, probe)
'''


@pytest.mark.slow
def test_a_plugin_arm_trained_beside_the_baseline_is_compared_in_report_compare_and_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module_cache: Path) -> None:
    """Real runs: the baseline, G1 and a plugin arm that computes the baseline's function (so its runs are
    the baseline's, bit for bit, and its comparison reads identical: a null no correction can call)."""
    from tiny_grids import tiny_grid

    from ablate.reports.data import load_grid_data
    from ablate.reports.figure_draw import draw_fig1
    from ablate.store import Store

    (tmp_path / "src" / "samefn").mkdir(parents=True)
    (tmp_path / "src" / "samefn" / "__init__.py").write_text(SAME_FN)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    arm = "samefn:SameSoftmax"
    grid = tmp_path / "g.yaml"
    grid.write_text("plugins: [samefn]\n" + tiny_grid(
        "own-arm", variants=["baseline", "sdpa-elementwise", '{arm: "samefn:SameSoftmax"}'], seeds=[0, 1, 2],
        steps=20).replace("'{arm: \"samefn:SameSoftmax\"}'", '{arm: "samefn:SameSoftmax"}'))
    home = tmp_path / "home"
    ran = runner.invoke(app, ["run", str(grid), "--jobs", "2", "--home", str(home), "--no-mlflow"])
    assert ran.exit_code == 0, ran.output

    asked = runner.invoke(app, ["report", "compare", "--home", str(home), "--format", "json"])
    assert asked.exit_code == 0, asked.output
    rows = json.loads(asked.stdout)["comparisons"]
    mine = {r["metric"]: r for r in rows if r["arm"] == arm}
    assert {"val_ppl", "train_loss", "f_attn", "m_act", "tokens_per_s"} <= set(mine)
    ppl = mine["val_ppl"]
    assert ppl["identical"] and ppl["n"] == 3 and ppl["p"] == 1.0 and not ppl["significant"], ppl
    assert ppl["verdict"] == "identical runs: every metric equal at every seed"  # tokens/s aside: timing
    g1 = next(r for r in rows if r["arm"] == "sdpa-elementwise" and r["metric"] == "val_ppl")
    assert g1["n"] == 3 and g1["family"] == "Holm over 2 comparisons of val_ppl against baseline in this grid"

    out = tmp_path / "report"
    written = runner.invoke(app, ["report", "all", "--home", str(home), "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert f"| {arm} |" in (out / "compare.md").read_text()
    with Store.open(home=home) as store:
        labels = draw_fig1(load_grid_data(store)).axes[0].get_legend_handles_labels()[1]
    assert f"{arm} (n=3)" in labels and "baseline (n=3)" in labels


def test_decisions_round_trip_through_sqlite_and_postgresql(store: Any) -> None:
    """The store keeps a decision as it was recorded, replaces it when the comparison is recorded again, and
    says clearly when the grid is not there."""
    from ablate.errors import StoreError

    store.register_grid(name="g", text="name: g\n", runs=[])
    first = Decision(grid="g", treatment="mine:Arm(k=1)", reference="baseline", metric="val_ppl",
                     cell={"train.lr": 0.003, "model.n_layers": 4}, runs=("b", "a"), look=None, n=6,
                     level=0.03, p_adj=0.2, family=2, correction="holm", plan=(2, 4, 6),
                     history=(LookRecord(2, 0.001, 0.1, -1.0, 1.2, 0.5, 0.9), LookRecord(4, 0.01),
                              LookRecord(6, 0.03, p_adj=0.2)))
    assert store.record_decisions(grid="g", decisions=[first]) == 1
    (back,) = store.decisions("g")
    assert back == Decision(**{**first.__dict__, "runs": ("a", "b")})
    assert back.history == first.history and back.reading() == "unresolved after 3 looks, n=6 seeds"
    again = Decision(**{**first.__dict__, "look": 2, "n": 4, "level": 0.01, "p_adj": 0.004})
    store.record_decisions(grid="g", decisions=[again])
    (kept,) = store.decisions("g")
    assert (kept.look, kept.reading()) == (2, "resolved at look 2 of 3, n=4 seeds")
    assert store.decisions("other") == []
    with pytest.raises(StoreError, match="the store has no grid 'nope'"):
        store.record_decisions(grid="nope", decisions=[first])
