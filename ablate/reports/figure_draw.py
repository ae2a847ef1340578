"""The drawings of the paper's Figures 1-7 (``figures.py`` names them, captions them and writes them): the
training loss (1), the per-layer probes (2, 4, 5, 6) and the gate score histograms (3, 7), each a matplotlib
Figure drawn with ``figure_kit``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from ablate.reports.data import GridData
from ablate.reports.figure_kit import (
    EMA,
    MAX_PANELS,
    TEXT,
    PerArm,
    arm_colors,
    draw_arm,
    ema,
    integer_ticks,
    legend_below,
    legend_key,
    mean_band,
    modal_runs,
    n_label,
    new_figure,
    ordered_variants,
    own_arms,
    panels,
    per_layer_panel,
    per_layer_runs,
    say_empty,
    styled,
    unchanged,
    variant_of,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# ---------------------------------------------------------------- Figure 1: training loss
def loss_runs(data: GridData) -> tuple[pd.DataFrame, float | None]:
    """Figure 1's runs (the baseline, G1 and any plugin arm) at the largest lr that most of these arms ran,
    and that lr."""
    runs = data.finished
    shown = [variant_of(data, "table1:1"), variant_of(data, "table1:5"), *own_arms(data, runs)]
    pick = runs[runs["variant"].isin(shown)] if len(runs) else runs
    if len(pick) and "train.lr" in pick:
        arms = pick.groupby("train.lr")["variant"].nunique()
        pick = pick[pick["train.lr"] == max(arms.index, key=lambda lr: (arms[lr], lr))]
    lr = pick["train.lr"].iloc[0] if "train.lr" in pick and len(pick) else None
    return pick, (float(lr) if lr is not None else None)


def _smoothed(curves: pd.DataFrame, run_ids: Iterable[str]) -> pd.DataFrame:
    """The EMA of each run's loss curve: DataFrame(step x run)."""
    cols = {}
    for rid in run_ids:
        cur = curves[curves["run_id"] == rid].sort_values("step")
        if len(cur):
            cols[rid] = pd.Series(ema(cur["value"].tolist()), index=cur["step"].to_numpy())
    return pd.DataFrame(cols)


@styled
def draw_fig1(data: GridData) -> Figure:
    """Training loss of the baseline, G1 and any plugin arm (EMA 0.9 per run, then the mean over seeds with
    its band; each seed faint), loss spikes marked on their seed's line. A matplotlib Figure."""
    fig, (ax,) = new_figure(height=3.3)
    pick, lr = loss_runs(data)
    c = data.curves
    curves = c[c["run_id"].isin(set(pick["run_id"])) & (c["metric"] == "loss")] if len(c) else c
    ax.set_title(f"Training loss (EMA {EMA})" + (f", lr {lr:g}" if lr is not None and len(curves) else ""))
    if not len(curves):
        say_empty(ax, "training loss curves of the baseline and the SDPA-gated model")
        return fig
    ev = data.events
    spikes = ev[ev["kind"] == "loss_spike"] if len(ev) else ev
    colors = arm_colors(data)
    keys = [legend_key("one seed", lw=0.6, alpha=0.4)]
    for v in ordered_variants(data, pick["variant"]):
        runs = pick[pick["variant"] == v].sort_values("seed")
        smooth = _smoothed(curves, runs["run_id"])
        if smooth.empty:
            continue
        for rid in smooth:
            ax.plot(smooth.index, smooth[rid], color=colors[v], lw=0.6, alpha=0.35, gid=f"seed:{v}")
            at = spikes[spikes["run_id"] == rid]["step"] if len(spikes) else []
            xs = [s for s in at if s in smooth.index]
            if xs:
                ax.scatter(xs, smooth.loc[xs, rid], marker="x", color=colors[v], s=16, lw=0.9, zorder=3,
                           gid=f"spike:{v}")
        ended = runs[runs["run_id"].isin(smooth.columns)]["status"].value_counts()
        note = "".join(f", {k} {s}" for s, k in ended.items() if s != "done")
        draw_arm(ax, smooth, colors[v], v, n_label(v, smooth, note), marker="")
    if len(spikes) and spikes["run_id"].isin(set(pick["run_id"])).any():
        keys.append(legend_key("loss spike", ls="none", marker="x", ms=4))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (smoothed)")
    legend_below(fig, [ax], ncol=2, extra=keys)
    return fig


# ---------------------------------------------------------------- Figures 2, 4, 5, 6: per layer
@styled
def draw_fig2(data: GridData) -> Figure:
    """F-Attn per layer: the share of attention on the first token."""
    fig, (ax,) = new_figure(height=3.0)
    per_layer_panel(ax, per_layer_runs(data, "f_attn"), arm_colors(data),
                     ylabel="attention on the first token", what="F-Attn probe values")
    ax.set_title("Attention sink: F-Attn per layer")
    legend_below(fig, [ax], ncol=2)
    return fig


def fig4_arms(data: GridData) -> tuple[PerArm, PerArm, list[str]]:
    """Figure 4's before-gate values (the baseline and the first gated arms), after-gate values, and the arms
    whose after equals their before."""
    post = per_layer_runs(data, "mean_abs_post", gated_only=True, limit=MAX_PANELS)
    pre_all = per_layer_runs(data, "mean_abs_pre", limit=10_000)
    pre = {v: pre_all[v] for v in [variant_of(data, "table1:1"), *post] if v in pre_all}
    return pre, post, unchanged(pre, post)


@styled
def draw_fig4(data: GridData) -> Figure:
    """Mean |Y| of the SDPA output before the gate (solid) and after it (dashed, the arm's colour); an arm
    whose gate does not act on the SDPA output has one line, labelled ``after = before``."""
    fig, (ax,) = new_figure(height=3.3)
    pre, post, same = fig4_arms(data)
    colors = arm_colors(data)
    if not pre:
        say_empty(ax, "mean |Y| probe values")
    for v, f in pre.items():
        draw_arm(ax, f, colors[v], v, n_label(v, f, "; after = before" if v in same else ""))
        if v in post and v not in same:
            draw_arm(ax, post[v], colors[v], v, None, kind="after", style="--", marker="s")
    if pre:
        ax.set_xlabel("layer")
        integer_ticks(ax.xaxis)
        ax.set_ylabel("mean |Y| of the SDPA output")
    ax.set_title("Mean |Y| before and after the gate")
    keys = ([legend_key("before the gate", marker="o"), legend_key("after the gate", ls="--", marker="s")]
            if post else [])
    legend_below(fig, [ax], ncol=2, extra=keys)
    return fig


def fig5_arms(data: GridData, t: str) -> tuple[PerArm, PerArm, list[str], bool]:
    """Figure 5's gated values at threshold ``t`` (arms whose gate acts on the SDPA output), their controls,
    the gated arms left out (after = before), and whether the grid has the probe at all."""
    post = per_layer_runs(data, f"frac_below_{t}_post", gated_only=True, limit=10_000)
    pre = per_layer_runs(data, f"frac_below_{t}_pre", gated_only=True, limit=10_000)
    same = unchanged(pre, post)
    shown = dict(list({v: f for v, f in post.items() if v not in same}.items())[:MAX_PANELS])
    scaled = per_layer_runs(data, f"frac_below_{t}_scaled", gated_only=True, limit=10_000)
    return shown, {v: scaled[v] for v in shown if v in scaled}, same, bool(post)


@styled
def draw_fig5(data: GridData) -> Figure:
    """Figure 5 as a matplotlib Figure: the gated SDPA output (solid) and its mean-score control (dotted) in
    the arm's colour; arms whose gate does not act on the SDPA output are named, not drawn; one legend
    below."""
    fig, axes = new_figure(2, width=TEXT, height=3.1, sharex=True)
    colors = arm_colors(data)
    left_out: list[str] = []
    for ax, t in zip(axes, ("1e-2", "1e-3"), strict=True):
        shown, control, same, measured = fig5_arms(data, t)
        left_out += [v for v in same if v not in left_out]
        if not shown:
            say_empty(ax, f"frac_below_{t} probe values" if not measured else "gate on the SDPA output")
        for v, f in shown.items():
            draw_arm(ax, f, colors[v], v, n_label(v, f))
            if v in control:
                draw_arm(ax, control[v], colors[v], v, None, kind="control", style=":", marker="")
        if shown:
            ax.set_xlabel("layer")
            integer_ticks(ax.xaxis)
            ax.set_ylabel(f"share of |Y'| < {t}")
        ax.set_title(f"SDPA output below {t}")
    control_label = "control: pre-gate values x the layer's mean gate score"
    keys = ([legend_key("gated output", marker="o"), legend_key(control_label, ls=":")]
            if any(ax.get_lines() for ax in axes) else [])
    title = f"not drawn (after the gate = before it): {', '.join(left_out)}" if left_out else None
    legend_below(fig, axes, ncol=3, extra=keys, title=title)
    fig.suptitle("Sparsity of the gated SDPA output")
    return fig


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round values to label a log axis between ``lo`` and ``hi`` (> 0): 1, 2 and 5 times the powers of ten
    in the range, or, where fewer than three fall in it, four points spaced evenly on the log scale, rounded
    to two significant digits. Matplotlib's own labels only powers of ten, which a range inside one decade
    never reaches.

    >>> log_ticks(40, 160), log_ticks(3, 700)
    ([50.0, 100.0], [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0])
    """
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
             for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    if len(ticks) >= 2 or hi <= lo:
        return ticks
    step = (math.log10(hi) - math.log10(lo)) / 3
    return [float(f"{10 ** (math.log10(lo) + i * step):.2g}") for i in range(4)]


def _label_log_axis(ax: Axes) -> None:
    """A log y axis whose labelled ticks sit where the lines and their bands are (``log_ticks``)."""
    values = [float(v) for line in ax.get_lines() for v in np.asarray(line.get_ydata(), dtype=float)
              if np.isfinite(v) and v > 0]
    if not values:
        return
    low, high = ax.dataLim.intervaly  # the bands too (all > 0: geometric)
    lo, hi = (min(min(values), low), max(max(values), high)) if low > 0 else (min(values), max(values))
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(log_ticks(lo, hi)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


@styled
def draw_fig6(data: GridData) -> Figure:
    """Figure 6 as a matplotlib Figure: M-Act (geometric mean over seeds, log axis) and F-Attn per layer."""
    fig, axes = new_figure(2, width=TEXT, height=3.1)
    colors = arm_colors(data)
    per_layer_panel(axes[0], per_layer_runs(data, "m_act"), colors, ylabel="max |hidden state| (log scale)",
                     what="M-Act probe values", log=True)
    _label_log_axis(axes[0])
    axes[0].set_title("Massive activations: M-Act per layer")
    per_layer_panel(axes[1], per_layer_runs(data, "f_attn"), colors, ylabel="attention on the first token",
                     what="F-Attn probe values")
    axes[1].set_title("Attention sink: F-Attn per layer")
    legend_below(fig, axes, ncol=3)
    return fig


# ---------------------------------------------------------------- Figures 3 and 7: gate score histograms
def _hist(data: GridData) -> pd.DataFrame:
    h = data.histograms
    if not len(h):
        return h
    name = "gate_score" if (h["name"] == "gate_score").any() else "gate_hist"
    runs = modal_runs(data)
    return h[(h["name"] == name) & h["run_id"].isin(set(runs["run_id"]))].assign(
        variant=lambda f: f["run_id"].map(dict(zip(runs["run_id"], runs["variant"], strict=True))))


def _hist_arms(data: GridData) -> tuple[pd.DataFrame, list[str]]:
    h = _hist(data)
    return h, (ordered_variants(data, h["variant"].unique())[:MAX_PANELS] if len(h) else [])


@styled
def draw_fig3(data: GridData) -> Figure:
    """Gate score distributions over all layers, a panel per gated arm (rows of two, shared axes): each bin's
    share of scores, the mean over seeds with its 95% t interval, and the mean gate score (dashed)."""
    h, variants = _hist_arms(data)
    colors = arm_colors(data)
    scores = per_layer_runs(data, "gate_score", gated_only=True, limit=10_000)
    fig, axes = panels(max(1, len(variants)), sharex=True, sharey=True)
    if not variants:
        say_empty(axes[0], "gate score histograms")
        axes[0].set_title("Gate score distribution")
    for i, (ax, v) in enumerate(zip(axes, variants, strict=False)):
        rows = h[h["variant"] == v]
        shares = rows.pivot_table(index="bin", columns="run_id", values="count", aggfunc="sum")
        shares = shares / shares.sum(axis=0)  # each run's share of its scores per bin, over all layers
        edges = rows.groupby("bin").agg(lo=("lo", "first"), hi=("hi", "first")).loc[shares.index]
        mean, lo, hi = mean_band(shares.to_numpy())
        centers = ((edges["lo"] + edges["hi"]) / 2).to_numpy()
        ax.bar(centers, mean, width=(edges["hi"] - edges["lo"]).to_numpy() * 0.9, color=colors[v], alpha=0.85,
               gid=f"bar:{v}")
        if np.isfinite(lo).any():
            ax.errorbar(centers, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor="black",
                        elinewidth=0.7, capsize=1.5, gid=f"bar-band:{v}", label="95% t interval over seeds")
        score = float(scores[v].mean(axis=0).mean()) if v in scores else float((centers * mean).sum())
        ax.axvline(score, color="black", ls="--", lw=0.9)
        ax.set_title(f"{n_label(v, shares)}, mean score {score:.3f}")
        ax.set_xlabel("gate score" if i + 2 >= len(variants) else "")
        ax.set_ylabel("share of scores" if i % 2 == 0 else "")
    keys = [legend_key("mean gate score", ls="--")] if variants else []
    legend_below(fig, axes, ncol=2, extra=keys)
    fig.suptitle("Gate score distributions (all layers)")
    return fig


@styled
def draw_fig7(data: GridData) -> Figure:
    """Per-layer gate score distributions: a layer x score heat map per gated arm (rows of two), the mean over
    seeds of each run's shares, on one colour scale for every panel."""
    h, variants = _hist_arms(data)
    fig, axes = panels(max(1, len(variants)), sharex=True, sharey=True)
    if not variants:
        say_empty(axes[0], "gate score histograms")
        axes[0].set_title("Gate scores per layer")
        return fig
    grids, n = {}, {}
    for v in variants:
        rows = h[h["variant"] == v]
        share = rows["count"] / rows.groupby(["run_id", "layer"])["count"].transform("sum")
        grids[v] = rows.assign(share=share).pivot_table(index="layer", columns="bin", values="share",
                                                        aggfunc="mean").fillna(0.0)
        n[v] = rows["run_id"].nunique()
    top = max(float(g.to_numpy().max()) for g in grids.values())
    lo, hi = float(h["lo"].min()), float(h["hi"].max())
    image = None
    for i, (ax, v) in enumerate(zip(axes, variants, strict=True)):
        g = grids[v]
        image = ax.imshow(g.to_numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0.0, vmax=top,
                          extent=(lo, hi, g.index.min() - 0.5, g.index.max() + 0.5), gid=f"heat:{v}")
        ax.set_title(f"{v} (n={n[v]})")
        ax.set_xlabel("gate score" if i + 2 >= len(variants) else "")
        ax.set_ylabel("layer" if i % 2 == 0 else "")
        ax.grid(False)
        integer_ticks(ax.yaxis)
    assert image is not None  # a panel per variant, and there is one at least
    fig.colorbar(image, ax=axes, label="share of the layer's scores", shrink=0.9)
    fig.suptitle("Gate score distribution per layer (one colour scale)")
    return fig
