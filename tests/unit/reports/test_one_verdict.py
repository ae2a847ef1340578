"""One comparison, one verdict, on every page: a grid with known effects (results written straight into a
store), read by Table 1 (markdown and JSON), ``report compare`` (JSON), the scorecard and the HTML page,
which must give each comparison the same corrected p, significance, family and seeds needed.

The grid has two learning rates, so its family of val_ppl comparisons against the baseline (every arm, both
cells) is larger than Table 1's rows (one cell): a table that corrected over its own rows alone would read a
comparison differently from ``report compare`` (the bug this guards).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.result import RunResult

runner = CliRunner()
GRID = "agree"
LOW, HIGH = 3e-3, 1e-2
SEEDS = range(5)
BASE = (6.0, 6.3, 5.9, 6.2, 6.1)
NOISE = (0.021, -0.013, 0.004, 0.017, -0.026)  # irregular: no two pairs' differences tie
# arm -> (its val_ppl shift, its F-Attn): G1 a clear gain and no sink, headwise a small gain, G2 none
ARMS = {"baseline": (0.0, 0.45), "sdpa-elementwise": (-0.30, 0.05), "sdpa-headwise": (-0.04, 0.06),
        "v-elementwise": (0.0, 0.40)}


def _run(variant: str, seed: int, lr: float) -> tuple[dict[str, Any], RunResult]:
    shift, f_attn = ARMS[variant]
    k = list(ARMS).index(variant)
    wobble = 0.0 if variant == "baseline" else NOISE[(seed + k) % 5] * (1 + 0.3 * k)
    ppl = BASE[seed] + shift + wobble + (0.2 if lr == HIGH else 0.0)
    config = RunConfig(variant="baseline", seed=seed, model={"preset": "tiny"},
                       train={"lr": lr, "steps": 40}).model_dump(mode="json")
    config["variant"] = variant
    rid = hashlib.sha256(f"{GRID}/{variant}/{seed}/{lr}".encode()).hexdigest()[:16]
    summary = {"steps": 40, "tokens": 40 * 16 * 256, "train_loss": ppl / 3, "val_ppl": ppl, "params": 119168,
               "added_params": 0, "f_attn": f_attn + 0.01 * seed + abs(wobble) / 10,
               "m_act": 100.0 * (1 + 0.1 * seed) * (0.2 if variant == "sdpa-elementwise" else 1.0)
               * (1 + wobble)}
    loss = [5.0 * math.exp(-s / 10) + ppl / 3 for s in range(40)]
    result = RunResult(run_id=rid, config=config, status="done", summary=summary,
                       metrics={"step": list(range(40)), "loss": loss}, probes={"m_act": [1.0, 2.0]},
                       started="2025-01-01T10:00:00+00:00", finished="2025-01-01T10:05:00+00:00")
    planned = {"run_id": rid, "config": config, "params": 119168, "added_params": 0,
               "axes": {"variant": variant, "seed": seed, "train.lr": lr}}
    return planned, result


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ablate.store import Store

    runs = [_run(v, s, LOW) for v in ARMS for s in SEEDS]
    runs += [_run(v, s, HIGH) for v in ARMS for s in SEEDS[:3]]
    opened = Store.open(f"sqlite:///{tmp_path_factory.mktemp('agree') / 'ablate.db'}")
    opened.register_grid(name=GRID, text=f"name: {GRID}\n", runs=[p for p, _ in runs])
    for _, result in runs:
        opened.ingest(result)
    yield opened
    opened.close()


def _ask(store: Any, *args: str) -> str:
    res = runner.invoke(app, ["report", *args, "--grid", GRID, "--store", store.url])
    assert res.exit_code == 0, res.output
    return res.stdout


def _compare(store: Any) -> dict[tuple[str, str, float], dict[str, Any]]:
    rows = json.loads(_ask(store, "compare", "--format", "json"))["comparisons"]
    return {(r["arm"], r["metric"], r["cell"]["train.lr"]): r for r in rows}


READ = ("p", "p_adj", "significant", "family", "family_size", "needs_seeds", "delta", "lo", "hi", "n")


def test_table1_and_compare_give_each_comparison_the_same_verdict(store: Any) -> None:
    compared = _compare(store)
    table = json.loads(_ask(store, "table1", "--format", "json"))
    deltas = table["comparisons"]
    assert {d["arm"] for d in deltas} == {"sdpa-elementwise", "sdpa-headwise", "v-elementwise"}
    for d in deltas:
        c = compared[(d["arm"], "val_ppl", LOW)]
        assert {k: d[k] for k in READ} == {k: c[k] for k in READ}, d["arm"]
        # the family is the grid's: 3 arms x 2 learning rates, not Table 1's 3 rows
        assert d["family"] == "Holm over 6 comparisons of val_ppl against baseline in this grid"
        assert d["family_size"] == 6
    g1 = next(d for d in deltas if d["arm"] == "sdpa-elementwise")
    head = next(d for d in deltas if d["arm"] == "sdpa-headwise")
    assert g1["significant"] and not head["significant"] and head["needs_seeds"] > 5
    # Table 1's cells say the same, and bold (markdown) is exactly the significant cells
    cells = {r["label"]: r["cells"]["delta:val_ppl"] for r in reversed(table["rows"])}  # the first row wins
    g1_cell = cells["SDPA Elementwise G1"]
    assert g1_cell["p_adj"] == g1["p_adj"] and g1_cell["significant"]
    md = _ask(store, "table1")
    assert re.findall(r"\*\*([-+][^*]+)\*\*", md) == [g1_cell["text"]]
    assert md.count("Holm over 6 comparisons of val_ppl against baseline in this grid") >= 1
    assert "needs ≈ N seeds: the paired seeds" in md  # what the figure means, where it is printed


def test_the_scorecard_reads_the_grids_family_for_its_comparisons(store: Any) -> None:
    compared = _compare(store)
    rows = {r["key"]: r for r in json.loads(_ask(store, "scorecard", "--format", "json"))}
    for key, arm, name in (("g1_beats_baseline", "sdpa-elementwise", "val_ppl"),
                           ("lower_f_attn", "sdpa-elementwise", "f_attn"),
                           ("headwise_lower_f_attn", "sdpa-headwise", "f_attn"),
                           ("lower_m_act", "sdpa-elementwise", "m_act")):
        c, r = compared[(arm, name, LOW)], rows[key]
        assert (r["p_adj"], r["family"], r["needs_seeds"]) == (c["p_adj"], c["family"], c["needs_seeds"]), key
        assert (r["verdict"] == "holds") == c["significant"], key
    # M-Act reads as the ratio compare reads it (its declared scale), not a difference
    ratio = compared[("sdpa-elementwise", "m_act", LOW)]["delta"]
    assert rows["lower_m_act"]["effect"] == pytest.approx(ratio) and ratio < 0.5
    # a claim between two arms neither of which is the baseline is the scorecard's own question, said so
    assert rows["g1_beats_g2"]["family"].endswith("of the scorecard's own claims")


def test_the_html_page_bolds_what_compare_calls_significant(store: Any, tmp_path: Path) -> None:
    compared = _compare(store)
    out = tmp_path / "report"
    res = runner.invoke(app, ["report", "all", "--grid", GRID, "--store", store.url, "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "report.html").read_text()
    table1 = page[page.index('id="table1"'):]
    table1 = table1[:table1.index("</table>")]
    bold = [re.sub(r"<[^>]+>", "", b) for b in re.findall(r"<strong>(.*?)</strong>", table1)]
    significant = [c for (arm, name, lr), c in compared.items() if name == "val_ppl" and lr == LOW
                   and c["significant"]]
    assert len(bold) == len(significant) == 1 and bold[0].startswith("-0.30")
    compare_html = page[page.index('id="compare"'):]
    compare_html = compare_html[:compare_html.index("</table>")]
    assert len(re.findall(r"<strong>", compare_html)) == sum(c["significant"] for c in compared.values())
