"""Figures 1-7 fit for a paper, read from the matplotlib objects: one colour per arm in every figure, the mean
over seeds with its 95% t band and n in the legend, what coincides by construction said and not drawn twice,
one colour scale where panels are compared, grids of panels instead of strips, PNG at 200 dpi and a PDF.

Grid ``figs`` has known numbers with a spread over seeds: three seeds of the baseline, G1
(``sdpa-elementwise``), G1 headwise, G2 (``v-elementwise``) and G3 (``k-elementwise``), whose probes after the
gate equal those before it as a real run's do (the probe reads the SDPA output, which a G2 or G3 gate does not
touch), and a plugin arm; 4 layers, 60 steps of loss, a loss spike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from PIL import Image

from ablate.config import RunConfig
from ablate.reports.data import load_grid_data
from ablate.reports.figure_kit import (
    DPI,
    MAX_LINES,
    PALETTE,
    PRIORITY,
    REFERENCE_COLOR,
    arm_colors,
    ema,
    ordered_variants,
    pyplot,
    variant_of,
)
from ablate.reports.figures import DRAW, FIGURES, captions, write_figures
from ablate.reports.page import report_page
from ablate.result import RunResult
from ablate.stats import t_interval
from ablate.store import Store
from ablate.studies import shipped

GRID = "figs"
SEEDS = (0, 1, 2)
LAYERS = 4
STEPS = 60
PLUGIN = "mine:Arm(k=1)"
G1, G1H, G2, G3 = "sdpa-elementwise", "sdpa-headwise", "v-elementwise", "k-elementwise"
GATED = (G1, G1H, G2, G3)
ON_SDPA = (G1, G1H)  # gates on the SDPA output: after != before
ARMS = ("baseline", *GATED, PLUGIN)
BINS = 10


def _noise(variant: str, seed: int, n: int) -> np.ndarray:
    digest = hashlib.sha256(f"{variant}/{seed}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).normal(size=n)


def probe_values(variant: str, seed: int) -> dict[str, list[float]]:
    """A run's per-layer probes: F-Attn and M-Act high for the ungated arms, a spread over seeds in each."""
    z = _noise(variant, seed, 6 * LAYERS).reshape(6, LAYERS)
    layer = np.arange(LAYERS)
    sink = variant not in GATED
    f_attn = (0.3 + 0.08 * layer if sink else 0.05 + 0.01 * layer) * (1 + 0.1 * z[0])
    m_act = (40.0 * 2.0 ** layer if sink else 8.0 + 2 * layer) * np.exp(0.2 * z[1])
    pre = 0.5 + 0.05 * layer + 0.02 * z[2]
    out = {"f_attn": f_attn, "m_act": m_act, "mean_abs_pre": pre, "mean_abs_post": pre,
           "frac_below_1e-2_pre": 0.04 + 0.005 * layer + 0.004 * z[3],
           "frac_below_1e-3_pre": 0.01 + 0.001 * z[3]}
    if variant in GATED:
        out["gate_score"] = 0.25 + 0.03 * layer + 0.02 * z[4]
        for t in ("1e-2", "1e-3"):
            out[f"frac_below_{t}_post"] = out[f"frac_below_{t}_pre"]
            out[f"frac_below_{t}_scaled"] = out[f"frac_below_{t}_pre"] * 2
    if variant in ON_SDPA:
        out["mean_abs_post"] = pre * (0.3 + 0.02 * z[5])
        out["frac_below_1e-2_post"] = 0.3 + 0.04 * layer + 0.02 * z[5]
        out["frac_below_1e-3_post"] = 0.1 + 0.02 * layer + 0.01 * z[5]
    return {k: [float(x) for x in v] for k, v in out.items()}


def gate_hist(variant: str, seed: int) -> list[list[float]]:
    """Per layer, shares of gate scores over ``BINS`` bins: most near 0, fewer with depth."""
    z = _noise(variant, seed + 100, LAYERS * BINS).reshape(LAYERS, BINS)
    raw = np.exp(-np.arange(BINS)[None, :] / (1.5 + np.arange(LAYERS)[:, None])) * np.exp(0.2 * z)
    return (raw / raw.sum(axis=1, keepdims=True)).tolist()


def loss(variant: str, seed: int) -> list[float]:
    offset = {"baseline": 0.3, G1: 0.0, G1H: 0.05, G2: 0.15, G3: 0.25}.get(variant, 0.2)
    z = _noise(variant, seed + 200, STEPS)
    return [float(5 * math.exp(-s / 15) + 2 + offset + 0.05 * z[s]) for s in range(STEPS)]


def _run(variant: str, seed: int) -> tuple[dict[str, Any], RunResult]:
    config = RunConfig(variant="baseline", seed=seed, model={"preset": "tiny"},
                       train={"lr": 3e-3, "steps": STEPS}).model_dump(mode="json")
    config["variant"] = variant  # a plugin arm's label as RunConfig writes it
    rid = hashlib.sha256(f"{GRID}/{variant}/{seed}".encode()).hexdigest()[:16]
    probes = probe_values(variant, seed)
    summary = {"steps": STEPS, "tokens": STEPS * 16 * 256, "train_loss": 2.5, "val_ppl": 8.0 + seed * 0.1,
               "params": 119168, "added_params": 0, "f_attn": float(np.mean(probes["f_attn"])),
               "m_act": float(np.mean(probes["m_act"])),
               "gate_score": float(np.mean(probes["gate_score"])) if "gate_score" in probes else None}
    gated = variant in GATED
    result = RunResult(
        run_id=rid, config=config, status="done", summary=summary,
        metrics={"step": list(range(STEPS)), "loss": loss(variant, seed)}, probes=probes,
        histograms={"gate_score": gate_hist(variant, seed)} if gated else {},
        histogram_edges=np.linspace(0, 1, BINS + 1).tolist() if gated else [],
        events=[{"kind": "loss_spike", "step": 20, "data": {"loss": 4.0, "trend": 2.0}}]
        if (variant, seed) == ("baseline", 1) else [])
    planned = {"run_id": rid, "config": config, "params": 119168, "added_params": 0,
               "axes": {"variant": variant, "seed": seed, "train.lr": 3e-3}}
    return planned, result


def fill(store: Any) -> None:
    """Grid ``GRID`` into ``store``: every arm of ``ARMS`` at every seed."""
    runs = [_run(v, s) for v in ARMS for s in SEEDS]
    store.register_grid(name=GRID, text=f"name: {GRID}\n", runs=[p for p, _ in runs])
    for _, result in runs:
        store.ingest(result)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('figs') / 'ablate.db'}")
    fill(store)
    yield load_grid_data(store, GRID)
    store.close()


@pytest.fixture(scope="module")
def drawn(data: Any) -> Any:

    figures = {n: draw(data) for n, draw in DRAW.items()}
    for fig in figures.values():
        fig.canvas.draw()
    yield figures
    for fig in figures.values():
        pyplot().close(fig)


@pytest.fixture(scope="module")
def written(data: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:

    return write_figures(data, tmp_path_factory.mktemp("written"))


def _by_gid(fig: Any, prefix: str) -> dict[str, list[Any]]:
    """The figure's artists whose gid is ``prefix:ARM``, by arm."""
    out: dict[str, list[Any]] = {}
    for artist in fig.findobj(lambda a: (a.get_gid() or "").startswith(prefix + ":")):
        out.setdefault(artist.get_gid().split(":", 1)[1], []).append(artist)
    return out


def _colour(artist: Any) -> str:

    if hasattr(artist, "get_facecolor") and not hasattr(artist, "get_xydata"):
        face = artist.get_facecolor()
        return to_hex(face[0] if np.ndim(face) == 2 else face)
    return to_hex(artist.get_color())


def _legend_labels(fig: Any) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _seeds(data: Any, variant: str, name: str) -> np.ndarray:
    """Probe ``name`` of ``variant``'s runs: layers x seeds, in seed order."""
    return np.array([probe_values(variant, s)[name] for s in SEEDS]).T


# ---------------------------------------------------------------- one colour per arm
def test_each_arm_has_one_colour_in_every_figure(data: Any, drawn: dict[int, Any]) -> None:

    colors = arm_colors(data)
    assert set(colors) == set(ARMS) and colors["baseline"] == REFERENCE_COLOR
    assert len(set(colors.values())) == len(ARMS)  # no two arms alike
    assert colors[G1] == PALETTE[0] and colors[G2] == PALETTE[1]  # the paper's first arms, first colours
    seen: dict[str, set[str]] = {}
    for fig in drawn.values():
        for kind in ("mean", "mean-band", "seed", "after", "after-band", "control", "control-band", "bar"):
            for arm, artists in _by_gid(fig, kind).items():
                seen.setdefault(arm, set()).update(_colour(a) for a in artists)
    assert {arm: c for arm, cs in seen.items() for c in cs} == {arm: colors[arm] for arm in seen}
    assert all(len(cs) == 1 for cs in seen.values()), seen
    assert set(seen) == set(ARMS)


def test_colours_hold_across_grids(data: Any) -> None:
    """The baseline and the paper's figure arms have the same colour in every grid, a plugin arm its own
    wherever no catalogue arm takes it, and no two arms of a shipped study share one while the palette
    lasts."""



    def colours(arms: list[str]) -> dict[str, str]:
        return arm_colors(dataclasses.replace(data, runs=pd.DataFrame({"variant": arms})))

    paper = [v for ref in PRIORITY if (v := variant_of(data, ref))]
    fixed = colours(paper)
    assert len(set(fixed.values())) == len(paper)
    for name, path in shipped().items():
        arms = yaml.safe_load(path.read_text())["grid"].get("variant") or ["baseline", G1]
        got = colours(arms)
        assert len(set(got.values())) == min(len(arms), len(PALETTE) + 1), name  # Table 1: 15 arms
        shown = ordered_variants(data, arms)[:MAX_LINES]  # what a figure draws: never two alike
        assert len({got[v] for v in shown}) == len(shown), name
        assert {v: got[v] for v in arms if v in fixed} == {v: fixed[v] for v in arms if v in fixed}, name
    # a plugin arm's colour is its name's wherever no catalogue arm of the grid has it; else the paper's arm
    # keeps its colour and the plugin arm takes another
    own = colours(["baseline", PLUGIN])[PLUGIN]
    assert colours(["baseline", *(v for v in paper if fixed[v] != own), PLUGIN])[PLUGIN] == own
    taker = next(v for v in paper if fixed[v] == own)
    got = colours(["baseline", taker, PLUGIN])
    assert got[taker] == own and got[PLUGIN] != own
    assert colours([*paper, PLUGIN])[PLUGIN] not in fixed.values()


# ---------------------------------------------------------------- the mean, its band, n
@pytest.mark.parametrize("n", [1, 2, 4, 5, 6])
def test_line_figures_draw_each_arms_mean_with_its_band_and_n(drawn: dict[int, Any], n: int) -> None:

    fig = drawn[n]
    means, bands = _by_gid(fig, "mean"), _by_gid(fig, "mean-band")
    assert means and set(bands) == set(means), (set(means), set(bands))
    assert all(isinstance(b, PolyCollection) for bs in bands.values() for b in bs)
    labels = _legend_labels(fig)
    for arm in means:
        assert any(label.startswith(f"{arm} (n=3") for label in labels), (arm, labels)
    assert fig.get_size_inches()[0] <= 6.8 + 1e-9  # the text's width at most: readable as drawn


def test_figure2s_band_is_the_t_interval_over_seeds(data: Any, drawn: dict[int, Any]) -> None:
    seeds = _seeds(data, "baseline", "f_attn")
    (line,) = _by_gid(drawn[2], "mean")["baseline"]
    assert line.get_ydata() == pytest.approx(seeds.mean(axis=1))
    (band,) = _by_gid(drawn[2], "mean-band")["baseline"]
    xy = band.get_paths()[0].vertices
    at_first = xy[np.isclose(xy[:, 0], 0), 1]  # the band's edges over layer 0
    assert (min(at_first), max(at_first)) == pytest.approx(t_interval(seeds[0]))


def test_figure1_draws_each_seed_faint_behind_the_mean(data: Any, drawn: dict[int, Any]) -> None:

    fig = drawn[1]
    seeds, means = _by_gid(fig, "seed"), _by_gid(fig, "mean")
    assert set(means) == {"baseline", G1, PLUGIN}  # the baseline, G1 and the plugin arm
    for arm in means:
        assert len(seeds[arm]) == 3 and all(line.get_alpha() < 0.5 for line in seeds[arm])
        smoothed = np.array([ema(loss(arm, s)) for s in SEEDS])
        assert means[arm][0].get_ydata() == pytest.approx(smoothed.mean(axis=0))
        mean = means[arm][0]
        assert mean.get_alpha() is None and mean.get_linewidth() > seeds[arm][0].get_linewidth()
    assert {"baseline (n=3)", f"{G1} (n=3)", f"{PLUGIN} (n=3)", "one seed", "loss spike"} <= set(
        _legend_labels(fig))
    assert len(_by_gid(fig, "spike")["baseline"]) == 1


def test_figure6s_m_act_is_the_geometric_mean_with_its_band_on_the_log_axis(data: Any,
                                                                            drawn: dict[int, Any]) -> None:
    seeds = _seeds(data, "baseline", "m_act")
    ax = drawn[6].axes[0]
    assert ax.get_yscale() == "log"
    line = next(ln for ln in ax.get_lines() if ln.get_gid() == "mean:baseline")
    assert line.get_ydata() == pytest.approx(np.exp(np.log(seeds).mean(axis=1)))


# ---------------------------------------------------------------- what coincides by construction
def test_figure4_draws_after_the_gate_only_where_the_gate_changes_the_sdpa_output(
        data: Any, drawn: dict[int, Any]) -> None:

    fig, colors = drawn[4], arm_colors(data)
    after = _by_gid(fig, "after")
    assert set(after) == set(ON_SDPA)  # G2 and G3: after = before, not drawn as a comparison
    for arm in after:
        assert after[arm][0].get_linestyle() == "--" and _colour(after[arm][0]) == colors[arm]
    labels = _legend_labels(fig)
    assert f"{G2} (n=3; after = before)" in labels and f"{G3} (n=3; after = before)" in labels
    assert f"{G1} (n=3)" in labels and {"before the gate", "after the gate"} <= set(labels)
    assert f"{G2}, {G3}: after = before at every layer in every run" in captions(data)[4]


def test_figure5_leaves_out_the_arms_whose_gate_is_not_on_the_sdpa_output(data: Any,
                                                                          drawn: dict[int, Any]) -> None:

    fig, colors = drawn[5], arm_colors(data)
    gated, control = _by_gid(fig, "mean"), _by_gid(fig, "control")
    assert set(gated) == set(control) == set(ON_SDPA)
    for arm in ON_SDPA:  # each control in its arm's colour, one per panel
        assert len(control[arm]) == 2 and {_colour(a) for a in gated[arm] + control[arm]} == {colors[arm]}
    (legend,) = fig.legends
    assert G2 in legend.get_title().get_text() and G3 in legend.get_title().get_text()
    assert f"Not drawn: {G2}, {G3}, whose values after the gate equal those before it" in captions(data)[5]


# ---------------------------------------------------------------- Figures 3 and 7: grids, one scale
def test_figure3_is_a_grid_of_panels_with_the_arms_colours_and_intervals(data: Any,
                                                                         drawn: dict[int, Any]) -> None:

    fig, colors = drawn[3], arm_colors(data)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 4 and len({round(ax.get_position().y0, 3) for ax in panels}) == 2  # 2 x 2
    assert len({ax.get_ylim() for ax in panels}) == 1  # one y scale
    bars, intervals = _by_gid(fig, "bar"), _by_gid(fig, "bar-band")
    assert set(bars) == set(intervals) == set(GATED)
    assert all(_colour(b) == colors[arm] for arm, bs in bars.items() for b in bs)
    assert all("(n=3)" in ax.get_title() for ax in panels)
    # the bars: each bin's mean share over seeds
    shares = np.array([np.sum(gate_hist(G1, s), axis=0) / LAYERS for s in SEEDS])
    heights = [b.get_height() for b in bars[G1]]
    assert heights == pytest.approx(shares.mean(axis=0))


def test_figure7_shares_one_colour_scale_across_its_grid_of_panels(data: Any, drawn: dict[int, Any]) -> None:
    fig = drawn[7]
    heat = _by_gid(fig, "heat")
    assert set(heat) == set(GATED)
    limits = {h.get_clim() for hs in heat.values() for h in hs}
    top = max(float(np.mean([gate_hist(v, s) for s in SEEDS], axis=0).max()) for v in GATED)
    assert len(limits) == 1 and limits.pop() == pytest.approx((0.0, top))
    assert len([ax for ax in fig.axes if ax.get_label() == "<colorbar>"]) == 1
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert len({round(ax.get_position().y0, 3) for ax in panels}) == 2 and fig.get_size_inches()[0] <= 6.8


# ---------------------------------------------------------------- the files
def test_write_figures_writes_png_at_200_dpi_and_a_pdf_with_the_caption(data: Any,
                                                                        written: dict[int, Path]) -> None:


    paths = written
    text = captions(data)
    assert DPI >= 200 and sorted(paths) == list(range(1, 8))
    for n, png in paths.items():
        assert png.name == FIGURES[n]
        with Image.open(png) as im:
            assert im.info["dpi"] == pytest.approx((DPI, DPI), abs=0.5)
            assert im.text["Description"] == text[n] and im.text["Title"].startswith(f"Figure {n}: ")
        pdf = png.with_suffix(".pdf").read_bytes()
        assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf
    assert "95% Student t interval" in text[2]


def test_the_page_shows_each_figures_own_caption(data: Any, written: dict[int, Path]) -> None:

    page = report_page(GRID, [], written, [])
    assert page.count("data:image/png;base64,") == 7
    for n, caption in captions(data).items():
        assert f"Figure {n}: " in page and html.escape(caption) in page, n
    assert f"{G2}, {G3}: after = before at every layer in every run" in page
