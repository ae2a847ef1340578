"""Reports on a store the test fills itself: known numbers in, known cells out.

One SQLite store (module scope) holds a grid of tiny-preset runs whose summaries, probes, histograms, curves
and events the test writes: three seeds per arm at lr 3e-3 (PPL = base + {-0.02, 0, +0.02}, so each cell reads
``base ± 0.02``), one arm with a single seed, arms with no runs, and a large learning rate at which every
baseline seed diverges and the SDPA-gated model does not.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from store_data import Planned

from ablate.config import RunConfig
from ablate.reports.cells import fmt_count
from ablate.reports.render import csv_header, render
from ablate.reports.spec import paper_rows
from ablate.result import RunResult

GRID = "reports-test"
LOW_LR, HIGH_LR = 3e-3, 2e-2
SEEDS = (0, 1, 2)
OFFSETS = (-0.02, 0.0, 0.02)
# variant -> base Avg PPL at LOW_LR (all seeds)
PPL = {"baseline": 6.03, "sdpa-elementwise": 5.83, "v-elementwise": 5.88, "sdpa-head-shared": 5.90,
       "sdpa-additive-silu": 5.95, "sdpa-elementwise-silu": 5.92, "sdpa-headwise": 5.86,
       "switch-v-4top4": 5.97, "sdpa-ns-sigmoid": 5.99}
SINGLE = ("v-headwise", 5.79)  # one seed only
HIGH = {"sdpa-elementwise": 5.90}  # at HIGH_LR; the baseline diverges there
GATED = {v for v in [*PPL, "v-headwise"] if v not in ("baseline", "switch-v-4top4")}
N_LAYERS = 2


def _added(variant: str) -> int:
    from ablate.ablations import ModelConfig, added_params

    return added_params(ModelConfig(preset="tiny"), variant)


def _result(variant: str, seed: int, lr: float, ppl: float | None, *,
            status: str = "done") -> tuple[Planned, RunResult]:
    from ablate.grid import run_id as make_id

    config = RunConfig(variant=variant, seed=seed, model={"preset": "tiny"}, train={"lr": lr, "steps": 40})
    rid = make_id(config)
    gated = variant in GATED
    k = 1.0 if variant == "baseline" else 0.2
    # a little per-seed spread that sums to zero over the three seeds (each arm's mean is its base), shifted
    # by arm, so that every paired difference has a spread: equal values carry no evidence beyond their signs
    # (irregular weights: no two pairs' differences tie, as measurements that vary continuously never do)
    idx = sorted([*PPL, *HIGH, SINGLE[0]]).index(variant)
    jitter = 0.002 * (1 + 0.1 * idx) * (-1.0, 0.3, 0.7)[(idx + seed) % 3]
    steps = list(range(40))
    loss = [5.0 * math.exp(-s / 10) + ppl / 3 if ppl else 5.0 + s * 0.5 for s in steps]
    summary: dict[str, Any] = {"steps": 40, "tokens": 40 * 16 * 256, "train_loss": loss[-1], "params": 119168,
                               "added_params": _added(variant), "loss_spikes": 1}
    probes: dict[str, list[Any]] = {}
    hist: dict[str, list[list[float]]] = {}
    ppl = round(ppl + jitter, 6) if ppl is not None else None
    if status == "done":
        summary.update({"val_ppl": ppl, "ppl/code": ppl - 1, "ppl/prose": ppl + 1, "bench/niah": 50.0 + seed,
                        "bench/niah@256": 40.0 + seed, "bench/niah@512": 20.0 + seed,
                        "gate_score": 0.2 + jitter if gated else None, "f_attn": 0.4 * k + jitter,
                        "m_act": 100.0 * k * (1 + jitter)})
        probes = {"f_attn": [0.3 * k, 0.5 * k], "m_act": [50.0 * k, 150.0 * k],
                  "mean_abs_pre": [0.5, 0.6], "mean_abs_post": [0.2, 0.25] if gated else [0.5, 0.6],
                  "frac_below_1e-2_pre": [0.05, 0.06], "frac_below_1e-3_pre": [0.01, 0.01]}
        if gated:
            probes.update({"gate_score": [0.15, 0.25], "frac_below_1e-2_post": [0.3, 0.4],
                           "frac_below_1e-3_post": [0.1, 0.2], "frac_below_1e-2_scaled": [0.1, 0.12],
                           "frac_below_1e-3_scaled": [0.02, 0.03]})
            hist = {"gate_score": [[0.5, 0.3, 0.1, 0.1], [0.2, 0.4, 0.3, 0.1]]}
    result = RunResult(
        run_id=rid, config=config.model_dump(mode="json"), status=status, summary=summary,
        metrics={"step": steps, "loss": loss}, probes=probes, histograms=hist,
        histogram_edges=[0.0, 0.25, 0.5, 0.75, 1.0] if hist else [],
        events=[{"kind": "loss_spike", "step": 12, "data": {"loss": 4.0, "trend": 2.0}}],
    )
    axes = {"variant": variant, "seed": seed, "train.lr": lr}  # what the grid varies, as expand records it
    return Planned(rid, config, summary["params"], summary["added_params"], axes), result


def _arms() -> list[tuple[Planned, RunResult]]:
    out = []
    for variant, base in PPL.items():
        for seed, off in zip(SEEDS, OFFSETS, strict=True):
            out.append(_result(variant, seed, LOW_LR, round(base + off, 6)))
    out.append(_result(SINGLE[0], 0, LOW_LR, SINGLE[1]))
    for seed, off in zip(SEEDS, OFFSETS, strict=True):
        out.append(_result("baseline", seed, HIGH_LR, None, status="diverged"))
        out.append(_result("sdpa-elementwise", seed, HIGH_LR, round(HIGH["sdpa-elementwise"] + off, 6)))
    return out


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A SQLite store holding grid GRID: the arms above, registered and ingested."""
    from ablate.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('reports') / 'ablate.db'}"
    store = Store.open(url)
    arms = _arms()
    store.register_grid(name=GRID, text="name: reports-test\n", runs=[p for p, _ in arms])
    for _, result in arms:
        store.ingest(result)
    yield store
    store.close()


@pytest.fixture(scope="module")
def data(filled: Any) -> Any:
    from ablate.reports.data import load_grid_data

    return load_grid_data(filled, GRID)


def table(data: Any, n: int, *, paper: bool = False) -> Any:
    from ablate.reports.api import grid_table

    return grid_table(data, n, paper=paper)


# ---------------------------------------------------------------- shapes and order against the paper's CSVs
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6], ids=[f"table{n}" for n in range(1, 7)])
def test_rows_keep_the_papers_labels_groups_and_order(data: Any, n: int) -> None:
    t = table(data, n)
    paper = paper_rows(n)
    ours = [(r.paper_row, r.label) for r in t.rows if r.paper_row is not None]
    assert ours == [(int(p["row"]), p["method"]) for p in paper]
    if n in (1, 5):  # groups in the paper's order (Table 5's first group is named after the grid's length)
        groups = list(dict.fromkeys(r.group for r in t.rows))
        expected = list(dict.fromkeys(p["group"] for p in paper))
        assert len(groups) == len(expected)
        if n == 1:
            assert groups == expected
        else:
            assert groups == ["Trained at 256", "YaRN Extended"]
    if n == 2:  # one group per paper setting; the grid's own setting names the first one
        groups = list(dict.fromkeys(r.group for r in t.rows))
        assert len(groups) == 4
        assert groups[0] == "2 Layer, 119.2K Parameters, 163.8K Tokens, Batch Size=16"
        assert groups[1:] == list(dict.fromkeys(p["setting"] for p in paper))[1:]
    for row in t.rows:
        assert set(row.cells) == {c.key for c in t.columns}


def test_table1_known_cells(data: Any) -> None:
    t = table(data, 1)
    assert [c.label for c in t.columns] == ["Act Func", "Score Shape", "Added Param", "PPL code", "PPL prose",
                                            "Avg PPL", "niah", "Δ Avg PPL vs baseline [95% CI]"]
    assert t.cell("SDPA Elementwise G1", "val_ppl").text == "5.83 ± 0.02"
    assert t.cell("Baseline", "val_ppl").text == "6.03 ± 0.02"
    assert t.cell("SDPA Elementwise G1", "ppl/code").text == "4.83 ± 0.02"
    assert t.cell("SDPA Elementwise G1", "bench/niah").text == "51.0 ± 1.0"
    assert t.cell("SDPA Elementwise G1", "act_func").text == "sigmoid"
    assert t.cell("SDPA Elementwise G1", "score_shape").text == "n x q x dk"
    assert t.cell("SDPA Elementwise G1",
                  "added_params").text == fmt_count(_added("sdpa-elementwise")) == "8.2K"
    assert t.cell("v Headwise G2", "val_ppl").text == "5.79 (n=1)"
    # a row with no runs stays, empty, but still describes itself (its Added Param computed at this scale)
    empty = t.cell("k Elementwise G3", "val_ppl")
    assert (empty.text, empty.value, empty.n) == ("", None, 0)
    assert t.cell("k Elementwise G3", "added_params").text == fmt_count(_added("k-elementwise"))
    # paired delta to the baseline: the same seed offsets, so every pair differs by -0.20 and a little jitter;
    # corrected over the grid's family (every arm against the baseline), not over the table's rows
    delta = t.cell("SDPA Elementwise G1", "delta:val_ppl")
    assert delta.text == "-0.20 [-0.21, -0.19]" and delta.n == 3
    from ablate.reports.family import families

    g1 = next(c for c in families(data).of("val_ppl").comparisons
              if (c.arm, c.cell) == ("sdpa-elementwise", "train.lr=0.003"))
    assert delta.significant and delta.p < delta.p_adj == g1.delta.p_adj < 0.05 and g1.m == 8
    assert "**-0.20 [-0.21, -0.19]**" in render(t, "markdown")
    assert t.cell("Baseline", "delta:val_ppl").text == ""
    footer = [n for n in t.notes if n.startswith("Δ: ")]
    assert len(footer) == 1 and "paired Student t 95% CI" in footer[0] and "after Holm over" in footer[0]
    assert all(" vs baseline (val_ppl): " in line for line in t.unresolved)
    assert any("left out" in note and "train.lr=0.003" in note for note in t.notes)


def test_table2_diverged_is_a_dash_and_learning_rates_line_up(data: Any) -> None:
    t = table(data, 2, paper=True)
    first = [r for r in t.rows if r.group == t.rows[0].group]
    assert first[0].group.endswith("(paper: 28 Layer, 1.7B Parameters, 400B Tokens, Batch Size=1024)")
    # setting 1 of the paper has one LR (4.0e-3): the grid's largest; the smaller LR becomes extra rows
    assert [(r.label, r.cells["max_lr"].text, r.paper_row) for r in first] == [
        ("Baseline", "2.0e-2", 1), ("SDPA Elementwise", "2.0e-2", 2),
        ("Baseline", "3.0e-3", None), ("SDPA Elementwise", "3.0e-3", None), ("SDPA Headwise", "3.0e-3", None)]
    assert first[0].cells["val_ppl"].text == "-" and first[0].cells["val_ppl"].diverged == 3
    assert first[1].cells["val_ppl"].text == "5.90 ± 0.02"
    assert first[1].cells["paper:max_lr"].text == "4.0e-3"
    assert first[1].cells["paper:avg_ppl"].text == "7.404"
    assert first[3].cells["delta:val_ppl"].text == "-0.20 [-0.21, -0.19]"
    assert first[1].cells["delta:val_ppl"].text == ""  # its baseline diverged: no pair
    row12 = next(r for r in t.rows if r.paper_row == 12)
    assert row12.cells["paper:avg_ppl"].text == "-" and row12.cells["val_ppl"].text == ""


def test_table4_probes_and_table6_switch_rows(data: Any) -> None:
    t4 = table(data, 4, paper=True)
    keys = [c.key for c in t4.columns]
    assert keys[:7] == ["act_func", "gate_score", "paper:gate_score", "m_act", "paper:m_act", "f_attn",
                        "paper:f_attn"]
    assert t4.cell("SDPA Elementwise Gate", "gate_score").text == "0.200 ± 0.002"
    assert t4.cell("Baseline", "gate_score").text == ""
    assert t4.cell("Baseline", "m_act").text == "100.0 ± 0.2"
    assert t4.cell("Baseline", "f_attn").text == "0.400 ± 0.002"
    assert t4.cell("SDPA Elementwise Gate", "paper:f_attn").text == "0.048"
    assert t4.cell("SDPA Elementwise Gate", "val_ppl").text == "5.83 ± 0.02"
    ns = next(r for r in t4.rows if r.paper_row == 7)
    assert ns.cells["act_func"].text == "NS-sigmoid" and ns.cells["val_ppl"].text == "5.99 ± 0.02"
    t6 = table(data, 6)
    assert t6.cell("Switch v, 4top4", "val_ppl").text == "5.97 ± 0.02"
    assert t6.cell("Switch v, 4top4", "added_params").text == fmt_count(_added("switch-v-4top4"))
    assert t6.cell("Switch kv, 8top8", "val_ppl").text == ""


def test_table5_retrieval_per_length_with_the_papers_beside(data: Any) -> None:
    t = table(data, 5, paper=True)
    assert [c.key for c in t.columns][:4] == ["len/256", "paper:len_32k", "len/512", "paper:len_64k"]
    assert t.cell("Baseline", "len/256", group="Trained at 256").text == "41.0 ± 1.0"
    assert t.cell("SDPA-Gate", "len/512", group="Trained at 256").text == "21.0 ± 1.0"
    assert t.cell("SDPA-Gate", "paper:len_32k", group="Trained at 256").text == "79.77"
    assert t.cell("SDPA-Gate", "len/256", group="YaRN Extended").text == ""


# ---------------------------------------------------------------- formats
def test_latex_is_a_balanced_booktabs_table_with_only_significant_deltas_in_bold(data: Any) -> None:
    t = table(data, 1)
    tex = render(t, "latex")
    assert tex.count("{") == tex.count("}")
    for env in ("table", "tabular"):
        assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}") == 1
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    body = tex[tex.index(r"\toprule"):tex.index(r"\bottomrule")]
    rows = [ln for ln in body.splitlines() if ln.endswith(r"\\") and not ln.startswith(r"\multicolumn")]
    assert len(rows) == 1 + len(t.rows)  # header + one line per row
    assert all(ln.count("&") == len(t.columns) for ln in rows)
    # v headwise G2 has the lowest Avg PPL, and that is not what bold means: only a significant delta is
    assert r"\textbf{5.79" not in tex and r"\textbf{-0.20 [-0.21, -0.19]}" in tex
    bolded = re.findall(r"\\textbf\{([^}]*)\}", tex)
    sig = [c.text for r in t.rows for c in r.cells.values() if c.significant]
    assert sorted(bolded) == sorted(sig) and sig
    assert r"5.83 $\pm$ 0.02" in tex and r"95\% CI" in tex


@pytest.fixture(scope="module")
def pdflatex() -> str:
    """pdflatex, which scripts/system-deps.sh installs (Debian's texlive-latex-base, and
    texlive-latex-recommended for booktabs): the LaTeX tests never skip for want of it."""
    found = shutil.which("pdflatex")
    if found is None:
        pytest.fail("pdflatex not found: scripts/system-deps.sh installs texlive-latex-base and "
                    "texlive-latex-recommended (make test runs it)")
    return found


def test_every_tables_and_compares_latex_compiles_with_pdflatex(data: Any, tmp_path: Path,
                                                                pdflatex: str) -> None:
    from compare_data import both_grids

    from ablate.reports.compare import build_compare
    from ablate.reports.compare_render import render_compare
    from ablate.reports.data import load_grid_data

    store = both_grids(tmp_path / "cmp")  # plugin arms, a ratio metric, a cell without its reference
    try:
        compared = [build_compare(data), build_compare(load_grid_data(store, "cmp"))]
    finally:
        store.close()
    tables = [table(data, n, paper=paper) for n in range(1, 7) for paper in (False, True)]
    parts = [render(t, "latex") for t in tables] + [render_compare(c, "latex") for c in compared]
    text = "".join(parts)
    # what pdflatex once stopped at, in the reports' own words: needs ≈ N, `ablate report compare`, ×, Δ, ±
    said = [n for t in tables for n in [*t.notes, *t.unresolved]]
    assert any("≈" in n for n in said) and any("`" in n for n in said)
    assert r"$\approx$" in text and r"\texttt{ablate report compare}" in text and r"$\times$" in text
    assert not re.search(r"[^\x00-\x7f]", text)  # every other character as pdflatex reads it by default
    doc = ("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
           + "\\clearpage\n".join(parts) + "\\end{document}\n")
    (tmp_path / "tables.tex").write_text(doc)
    proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "tables.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    log = (tmp_path / "tables.log").read_text(errors="replace")
    assert "Missing character" not in log and (tmp_path / "tables.pdf").stat().st_size > 0


def test_csv_round_trips_into_pandas(data: Any) -> None:
    import pandas as pd

    t = table(data, 2, paper=True)
    text = render(t, "csv")
    assert next(csv.reader(io.StringIO(text))) == csv_header(t)
    frame = pd.read_csv(io.StringIO(text))
    assert frame.shape == (len(t.rows), len(csv_header(t)))
    assert list(frame["method"]) == [r.label for r in t.rows]
    first = frame.iloc[0]
    assert math.isnan(first["val_ppl"]) and first["val_ppl:diverged"] == 3 and first["max_lr"] == HIGH_LR
    assert frame.iloc[1]["val_ppl"] == pytest.approx(5.90) and frame.iloc[1]["val_ppl:std"] == pytest.approx(
        0.02, abs=0.002)  # the offsets' 0.02 and the jitter
    assert frame.iloc[1]["paper:avg_ppl"] == pytest.approx(7.404)
    assert frame.iloc[3]["delta:val_ppl"] == pytest.approx(-0.20)


def test_markdown_and_html(data: Any) -> None:
    t = table(data, 3)
    md = render(t, "markdown")
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(t.rows)  # no groups in Table 3
    assert all(ln.count(" | ") == len(t.columns) for ln in lines[2:])
    page = render(t, "html")
    assert page.startswith("<!DOCTYPE html>") and 'id="table3"' in page
    assert page.count("<tr>") == 1 + len(t.rows)
    with pytest.raises(Exception, match="unknown format 'excel'"):
        render(t, "excel")


# ---------------------------------------------------------------- figures
def test_every_figure_is_written(data: Any, tmp_path: Path) -> None:
    from ablate.reports.data import GridData
    from ablate.reports.figure_kit import per_layer
    from ablate.reports.figures import FIGURES, write_figures

    paths = write_figures(data, tmp_path / "figs")
    assert sorted(paths) == list(range(1, 8))
    for n, p in paths.items():
        assert p.name == FIGURES[n]
        head = p.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
        assert p.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"  # vector, beside it
    f_attn = per_layer(data, "f_attn")
    assert list(f_attn)[:2] == ["baseline", "sdpa-elementwise"]
    assert list(f_attn["baseline"]) == pytest.approx([0.3, 0.5])
    # a grid with nothing measured still gets all seven figures, each saying what is missing
    empty = GridData("empty", data.runs.iloc[0:0], data.curves.iloc[0:0], data.probes.iloc[0:0],
                     data.histograms.iloc[0:0], data.events.iloc[0:0], data.catalogue)
    assert all(p.stat().st_size > 1000 for p in write_figures(empty, tmp_path / "empty").values())


# ---------------------------------------------------------------- scorecard
def test_scorecard_on_the_store(data: Any) -> None:
    from ablate.reports.scorecard import HOLDS, UNCLEAR, scorecard

    verdicts = {v.claim.key: v for v in scorecard(data.runs, data.catalogue)}
    assert verdicts["g1_beats_baseline"].verdict == HOLDS and verdicts["g1_beats_baseline"].delta.n == 3
    assert verdicts["g1_beats_g2"].verdict == HOLDS
    assert verdicts["lower_f_attn"].verdict == HOLDS and verdicts["lower_m_act"].verdict == HOLDS
    # the pairs' deltas are identical (-0.07): the bootstrap CI is one point, wholly below zero
    assert verdicts["head_specific"].ci == "[-0.07, -0.07]"
    # G1 survived 3 of 3 where the baseline diverged 3 of 3: one sign, no spread, p = 2/2^3: not yet a verdict
    assert verdicts["survives_lr"].verdict == UNCLEAR and "lr 0.02" in verdicts["survives_lr"].detail
    assert "no spread: the signs are the only evidence" in verdicts["survives_lr"].detail
    # a claim that is one of the grid's comparisons reads the grid's family; the others are the scorecard's
    assert verdicts["g1_beats_baseline"].family == ("Holm over 8 comparisons of val_ppl against baseline in "
                                                    "this grid")
    assert verdicts["head_specific"].family == "Holm over 13 comparisons of the scorecard's own claims"
    # every run of this store records a loss spike: no arm trains through anywhere, so no difference to see
    assert verdicts["stable_lr"].verdict == UNCLEAR and "trained through 0/6" in verdicts["stable_lr"].detail
    assert verdicts["sink"].verdict == HOLDS and verdicts["g1_removes_sink"].effect == "F-Attn ratio 0.20"
    assert "independent_keeps_sink" not in verdicts  # the grid has no input-independent gate: not testable


# ---------------------------------------------------------------- the page, in a real browser
def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_all_page_in_headless_chromium(filled: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ablate.cli import app

    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (scripts/system-deps.sh installs it)")
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    res = CliRunner().invoke(app,
                             ["report", "all", "--store", filled.url, "--paper", "--out",
                              str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    for n in range(1, 7):
        for suffix in (".md", ".tex", ".csv"):
            assert (tmp_path / "report" / f"table{n}{suffix}").stat().st_size > 100
    assert len(list((tmp_path / "report" / "figures").glob("fig*.png"))) == 7
    assert "| G1 (SDPA output gate) beats the baseline's PPL | Δ PPL -0.20 |" in (
        tmp_path / "report" / "scorecard.md").read_text()
    page = tmp_path / "report" / "report.html"
    assert "src=\"figures/" not in page.read_text()  # self-contained
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60)
    dom = proc.stdout
    assert proc.returncode == 0 and "</html>" in dom, proc.stderr[-2000:]
    for n in range(1, 7):
        assert re.search(rf'<table class="ablate" id="table{n}"', dom)
    from ablate.reports.data import load_grid_data
    from ablate.reports.scorecard import HOLDS, scorecard

    data = load_grid_data(filled, GRID)
    holding = sum(v.verdict == HOLDS for v in scorecard(data.runs, data.catalogue))
    # every claim that holds is shown as holding (8 when the scorecard had its first claims; more were added
    # since)
    assert 'id="scorecard"' in dom and dom.count('class="holds"') == holding >= 8
    for n in range(1, 8):
        assert re.search(rf'<figure id="fig{n}"><img '
                         r'[^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{2000,}"', dom)


# ---------------------------------------------------------------- the command
def test_cli_report(filled: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ablate.cli import app

    runner = CliRunner()
    url = filled.url
    res = runner.invoke(app, ["report", "table3", "--store", url, "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith("group,method,paper_row,runs,act_func")
    assert len(res.output.splitlines()) == 1 + len(paper_rows(3))
    out = tmp_path / "t1.tex"
    res = runner.invoke(app,
                        ["report", "table1", "--store", url, "--grid", GRID, "--format", "latex", "--paper",
                              "--out", str(out)])
    assert res.exit_code == 0 and r"\toprule" in out.read_text() and "(paper)" in out.read_text()
    res = runner.invoke(app, ["report", "table9", "--store", url])
    assert res.exit_code == 2 and "unknown report 'table9'" in res.output
    res = runner.invoke(app, ["report", "table1", "--store", url, "--grid", "reports-tset"])
    assert res.exit_code == 2 and "did you mean 'reports-test'" in res.output
    res = runner.invoke(app, ["report", "table1", "--store", url, "--format", "docx"])
    assert res.exit_code == 2 and "unknown format 'docx'" in res.output
    # two grids and no --grid: the one run (here: registered) last, said on stderr with the other
    from ablate.store import Store

    two = f"sqlite:///{tmp_path / 'two.db'}"
    with Store.open(two) as s:
        s.register_grid(name="b", text="name: b\n", runs=[])
        s.register_grid(name="a", text="name: a\n", runs=[])
    res = runner.invoke(app, ["report", "table1", "--store", two])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == ("report of grid a, the one run last; the store also holds b "
                                          "(--grid names one)")
    # a grid with no runs: all rows, empty
    res = runner.invoke(app, ["report", "table1", "--store", two, "--grid", "a"])
    assert res.exit_code == 0, res.output
    groups = len({r["group"] for r in paper_rows(1)})
    assert sum(ln.startswith("| ") for ln in res.output.splitlines()) == 2 + len(paper_rows(1)) + groups


def test_the_cli_offers_and_report_all_writes_what_the_registry_holds(filled: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.reports import TARGETS
    from ablate.reports.registry import REPORTS
    from ablate.reports.spec import TABLES

    res = CliRunner().invoke(app, ["report", "nosuch", "--store", filled.url])
    assert res.exit_code == 2 and "unknown report 'nosuch'; allowed: " in res.stderr
    offered = res.stderr.strip().split("allowed: ")[1].split(", ")
    assert sorted(offered) == sorted(REPORTS) and list(REPORTS) == list(TARGETS)
    assert tuple(r.table for r in REPORTS.values() if r.table) == TABLES
    assert all(REPORTS[f"table{n}"].table == n for n in TABLES)
    assert {"lr", "scorecard", "ladder", "figures", "all"} <= set(REPORTS)
    from ablate.reports.files import report_all

    written = report_all(filled, tmp_path / "r", grid=GRID)
    assert {f"table{n}.md" for n in TABLES} <= set(written) and "scorecard.md" in written
