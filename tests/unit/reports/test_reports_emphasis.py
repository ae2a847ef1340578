"""Honest emphasis and a page that fits: bold marks only what the correction calls significant (a null grid's
page has no bold number, read in real Chromium), the HTML tables wrap inside a 1400-px window, and the small
things a reader trips on (what ± is, the paper's units, Table 2's parameter count, Figures 5 and 6).
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compare_data import both_grids
from typer.testing import CliRunner

from ablate.cli import app

WIDTH = 1400
# after the page loads: its scroll width, the right edge of its widest table, and every number shown bold
PROBE = """<script>
window.addEventListener("load", () => {
  const b = document.body;
  b.setAttribute("data-scroll-width", document.documentElement.scrollWidth);
  let right = 0;
  for (const t of document.querySelectorAll("table")) {
    right = Math.max(right, t.getBoundingClientRect().right);
  }
  b.setAttribute("data-table-right", Math.ceil(right));
  const bold = [];
  for (const c of document.querySelectorAll("tbody td, tbody th")) {
    const text = (c.innerText || "").trim();
    const heavy = [c, ...c.querySelectorAll("*")].some(e => parseInt(getComputedStyle(e).fontWeight) >= 600);
    if (/^[-+×]?\\d/.test(text) && heavy) bold.push(text);
  }
  b.setAttribute("data-bold", JSON.stringify(bold));
});
</script>"""


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (scripts/system-deps.sh installs it)")
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    return browser


def _open(page: Path, tmp: Path) -> tuple[dict[str, Any], Path]:
    """The page in headless Chromium at a 1400-px window: what ``PROBE`` measured, and a screenshot."""
    probed = tmp / f"probed-{page.parent.name}.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={WIDTH},1000"]
    dom = subprocess.run([*flags, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    shot = tmp / f"{page.parent.name}.png"
    subprocess.run([*flags, f"--screenshot={shot}", probed.as_uri()], capture_output=True, timeout=120)
    found = {k: re.search(rf'data-{k}="([^"]*)"', dom.stdout) for k in ("scroll-width", "table-right",
                                                                          "bold")}
    assert all(found.values()), dom.stdout[:500]
    return {k: html.unescape(m.group(1)) for k, m in found.items() if m}, shot


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    opened = both_grids(tmp_path_factory.mktemp("emphasis"))
    yield opened
    opened.close()


def _report_all(store: Any, grid: str, out: Path) -> Path:
    res = CliRunner().invoke(app, ["report", "all", "--grid", grid, "--paper", "--store", store.url, "--out",
                                   str(out)])
    assert res.exit_code == 0, res.output
    return out / "report.html"


def test_a_null_grids_page_has_no_bold_number_and_fits_1400_px(store: Any, tmp_path: Path) -> None:
    page = _report_all(store, "null", tmp_path / "null")
    text = page.read_text()
    assert "<strong>" not in text and "<b>" not in text  # nothing significant: nothing bold
    for f in (tmp_path / "null").glob("*.tex"):
        assert r"\textbf" not in f.read_text(), f.name
    seen, shot = _open(page, tmp_path)
    assert json.loads(seen["bold"]) == []
    assert int(seen["scroll-width"]) <= WIDTH and int(seen["table-right"]) <= WIDTH, seen
    assert struct.unpack(">II", shot.read_bytes()[16:24])[0] == WIDTH  # the PNG's width: what was shown


def test_a_grid_with_real_differences_bolds_its_significant_deltas_only(store: Any, tmp_path: Path) -> None:
    from ablate.reports.compare_render import to_table
    from ablate.reports.data import load_grid_data

    page = _report_all(store, "cmp", tmp_path / "cmp")
    seen, _ = _open(page, tmp_path)
    assert int(seen["scroll-width"]) <= WIDTH and int(seen["table-right"]) <= WIDTH, seen
    from ablate.reports.api import grid_table
    from ablate.reports.compare import build_compare

    data = load_grid_data(store, "cmp")
    tables = [to_table(build_compare(data)), *(grid_table(data, n, paper=True) for n in range(1, 7))]
    significant = [c.text for t in tables for r in t.rows for c in r.cells.values() if c.significant]
    assert significant and sorted(json.loads(seen["bold"])) == sorted(significant)


# ---------------------------------------------------------------- what a reader trips on
@pytest.fixture(scope="module")
def paper_data(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Tests/test_reports.py's grid (every table's arms, probes on gated runs)."""
    from test_reports import GRID, _arms

    from ablate.reports.data import load_grid_data
    from ablate.store import Store

    opened = Store.open(f"sqlite:///{tmp_path_factory.mktemp('paper') / 'ablate.db'}")
    arms = _arms()
    opened.register_grid(name=GRID, text="name: x\n", runs=[p for p, _ in arms])
    for _, result in arms:
        opened.ingest(result)
    yield load_grid_data(opened, GRID)
    opened.close()


def test_table1_says_what_plus_minus_is_and_the_papers_unit(paper_data: Any) -> None:
    from ablate.reports.api import grid_table
    from ablate.reports.render import render

    t = grid_table(paper_data, 1, paper=True)
    md = render(t, "markdown")
    assert "*cells: mean ± standard deviation over seeds (sample std, n-1); '-': every seed diverged*" in md
    assert "Added Param (paper, M)" in [c.label for c in t.columns]


def test_table2_counts_the_baselines_parameters_not_a_median_over_arms(paper_data: Any) -> None:
    from ablate.reports.tables import build_table

    runs = paper_data.runs.copy()
    runs.loc[runs["variant"] != "baseline", "params"] = 200_000  # gated arms outnumber the baseline
    t = build_table(2, runs, paper_data.catalogue, grid="g")
    assert t.rows[0].group == "2 Layer, 119.2K Parameters, 163.8K Tokens, Batch Size=16"


def test_figure5s_legend_covers_no_data(paper_data: Any) -> None:
    from ablate.reports.figure_draw import draw_fig5

    fig = draw_fig5(paper_data)
    fig.canvas.draw()
    legend = fig.legends[0]
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1  # wholly on the canvas
    lines = [ln for ax in fig.axes for ln in ax.get_lines()]
    texts = [t.get_text() for t in legend.get_texts()]
    arms = {ln.get_label() for ln in lines if not ln.get_label().startswith("_")}  # the arms, with their n
    assert len(lines) >= 4 and len(texts) == len(set(texts)) == len(arms) + 2 and arms <= set(texts)
    for ax in fig.axes:
        assert ax.get_window_extent().y0 > box.y1  # the panels sit above the legend
        for line in ax.get_lines():
            points = ax.transData.transform(np.column_stack(line.get_data()))
            assert not any(box.contains(x, y) for x, y in points), line.get_label()


@pytest.mark.parametrize("arms", [("baseline",), None], ids=["one-decade", "every-arm"])
def test_figure6s_log_axis_is_labelled_where_the_lines_are(paper_data: Any, arms: tuple | None) -> None:
    from ablate.reports.figure_draw import draw_fig6

    data = paper_data
    if arms:  # M-Act 50..150: inside one decade, where matplotlib's own labels sit at 10 and 1000 only
        keep = set(data.runs.loc[data.runs["variant"].isin(arms), "run_id"])
        data = dataclasses.replace(data, probes=data.probes[data.probes["run_id"].isin(keep)])
    fig = draw_fig6(data)
    fig.canvas.draw()
    ax = fig.axes[0]
    values = np.concatenate([ln.get_ydata() for ln in ax.get_lines()])
    lo, hi = ax.get_ylim()
    labelled = [(t, float(lab.get_text())) for t, lab in zip(ax.get_yticks(), ax.get_yticklabels(),
                                                             strict=True)
                if lab.get_text() and lo <= t <= hi]
    assert all(t == pytest.approx(v) for t, v in labelled)
    inside = [t for t, _ in labelled if values.min() <= t <= values.max()]
    assert len(inside) >= 2, (labelled, values.min(), values.max())
