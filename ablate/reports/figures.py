"""The paper's Figures 1-7 from a grid's curves, probes and histograms: PNG files, matplotlib (Agg).

Each figure is written even when the grid lacks its data (then it says so on the canvas), so a report always
has the same seven files. Per-layer values are means over the seeds of a variant, at the grid's most common
configuration; Figure 1 uses the largest learning rate its arms ran at. An arm the catalogue does not know (a
plugin arm: the researcher's own) is drawn beside the paper's first two, never cut for want of room, and has
its loss curve in Figure 1 beside the baseline's and G1's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.reports.data import GridData
from ablate.reports.rows import context_key

log = logging.getLogger(__name__)

# Variants the paper's figures show, in its order (by catalogue ref); others follow by name.
PRIORITY = ("table1:1", "table1:5", "table1:6", "table1:12", "table4:7", "table1:10", "table4:6", "table1:14")
MAX_LINES = 7
MAX_PANELS = 4
EMA = 0.9
FIGURES: dict[int, str] = {
    1: "fig1_training_loss.png", 2: "fig2_first_token_attention.png", 3: "fig3_gate_score_distributions.png",
    4: "fig4_mean_abs_before_after_gate.png", 5: "fig5_sdpa_sparsity.png",
    6: "fig6_massive_activation_and_sink.png", 7: "fig7_gate_scores_per_layer.png",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ordered_variants(data: GridData, variants: list[str]) -> list[str]:
    def rank(v: str) -> tuple[float, str]:
        if v not in data.catalogue:  # the researcher's own arm: right after the baseline and G1
            return (1.5, v)
        hits = [PRIORITY.index(r) for r in data.catalogue[v].paper if r in PRIORITY]
        return (min(hits) if hits else len(PRIORITY), v)

    return sorted(set(variants), key=rank)


def own_arms(data: GridData, runs: Any) -> list[str]:
    """The arms of ``runs`` the catalogue does not know (plugin arms), by name."""
    return sorted({str(v) for v in runs["variant"]} - set(data.catalogue)) if len(runs) else []


def _modal_runs(data: GridData) -> Any:
    runs = data.finished
    if not len(runs):
        return runs
    keys = [context_key(r) for _, r in runs.iterrows()]
    done = [k for k, st in zip(keys, runs["status"], strict=True) if st == "done"]
    modal = max(set(keys), key=lambda k: (keys.count(k), done.count(k), repr(k)))
    return runs[[k == modal for k in keys]]


def _variant_of(data: GridData, ref: str) -> str | None:
    return next((v.name for v in data.catalogue.values() if ref in v.paper), None)


def per_layer(data: GridData, name: str, *, gated_only: bool = False, limit: int = MAX_LINES) -> dict[str,
                                                                                                      Any]:
    """``{variant: Series(layer -> mean over seeds)}`` of probe ``name`` at the grid's modal configuration."""
    runs = _modal_runs(data)
    runs = runs[runs["status"] == "done"]
    if gated_only and "gate_score" in runs:
        runs = runs[runs["gate_score"].notna()]
    p = data.probes
    if not len(runs) or not len(p):
        return {}
    p = p[(p["name"] == name) & p["run_id"].isin(set(runs["run_id"]))].dropna(subset=["value"])
    out = {}
    variant_of = dict(zip(runs["run_id"], runs["variant"], strict=True))
    for v in _ordered_variants(data, [variant_of[r] for r in p["run_id"].unique()]):
        rows = p[p["run_id"].map(variant_of) == v]
        out[v] = rows.groupby("layer")["value"].mean()
    return dict(list(out.items())[:limit])


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this grid", ha="center", va="center", transform=ax.transAxes,
            color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def _lines(ax: Any, series: dict[str, Any], *, ylabel: str, what: str, style: str = "-o",
           suffix: str = "") -> None:
    if not series:
        _empty(ax, what)
        return
    for v, s in series.items():
        ax.plot(s.index, s.values, style, ms=3, label=f"{v}{suffix}")
    ax.set_xlabel("layer")
    _integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path, *, layout: bool = True) -> Path:
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def ema(values: list[float], coeff: float = EMA) -> list[float]:
    """Exponential moving average as the paper smooths its loss curves: s_t = c s_{t-1} + (1 - c) x_t.

    >>> ema([1.0, 0.0], 0.9)
    [1.0, 0.9]
    """
    out: list[float] = []
    for x in values:
        out.append(x if not out else coeff * out[-1] + (1 - coeff) * x)
    return out


def draw_fig1(data: GridData) -> Any:
    """Training loss, baseline vs SDPA-gated and any plugin arm (EMA 0.9), loss spikes marked; at the largest
    LR that most of these arms ran. A matplotlib Figure."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    runs = data.finished
    base, gated = _variant_of(data, "table1:1"), _variant_of(data, "table1:5")
    shown = [base, gated, *own_arms(data, runs)]
    pick = runs[runs["variant"].isin(shown)] if len(runs) else runs
    if len(pick) and "train.lr" in pick:
        arms = pick.groupby("train.lr")["variant"].nunique()
        pick = pick[pick["train.lr"] == max(arms.index, key=lambda lr: (arms[lr], lr))]
    c = data.curves
    curves = c[c["run_id"].isin(set(pick["run_id"])) & (c["metric"] == "loss")] if len(c) else c
    if not len(curves):
        _empty(ax, "training loss curves of the baseline and the SDPA-gated model")
    else:
        ev = data.events
        spikes = ev[ev["kind"] == "loss_spike"] if len(ev) else ev
        colors = {base: "tab:blue", gated: "tab:orange"} | {
            v: f"C{i + 2}" for i, v in enumerate(own_arms(data, pick))}
        seen: set[str] = set()
        for _, r in pick.sort_values(["variant", "seed"]).iterrows():
            cur = curves[curves["run_id"] == r["run_id"]].sort_values("step")
            if not len(cur):
                continue
            smooth = ema(cur["value"].tolist())
            label = None if r["variant"] in seen else f"{r['variant']} ({r['status']})"
            seen.add(r["variant"])
            ax.plot(cur["step"], smooth, color=colors.get(r["variant"]), alpha=0.85, lw=1.2, label=label)
            s = spikes[spikes["run_id"] == r["run_id"]] if len(spikes) else spikes
            if len(s):
                at = dict(zip(cur["step"], smooth, strict=True))
                xs = [st for st in s["step"] if st in at]
                ax.scatter(xs, [at[x] for x in xs], marker="x", color="red", zorder=3, s=30,
                           label="loss spike" if "spike" not in seen else None)
                seen.add("spike")
        lr = pick["train.lr"].iloc[0] if "train.lr" in pick and len(pick) else None
        ax.set_title(f"Training loss (EMA {EMA})" + (f", lr {lr:g}" if lr is not None else ""))
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (smoothed)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    if not len(curves):
        ax.set_title(f"Training loss (EMA {EMA})")
    return fig


def fig1(data: GridData, path: Path) -> Path:
    """Figure 1 (``draw_fig1``) as a PNG file."""
    return _save(draw_fig1(data), path)


def fig2(data: GridData, path: Path) -> Path:
    """F-Attn per layer: the share of attention on the first token."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    _lines(ax, per_layer(data, "f_attn"), ylabel="attention on the first token", what="F-Attn probe values")
    ax.set_title("Attention sink: F-Attn per layer")
    return _save(fig, path)


def _hist(data: GridData) -> Any:
    h = data.histograms
    if not len(h):
        return h
    name = "gate_score" if (h["name"] == "gate_score").any() else "gate_hist"
    runs = _modal_runs(data)
    return h[(h["name"] == name) & h["run_id"].isin(set(runs["run_id"]))].assign(
        variant=lambda f: f["run_id"].map(dict(zip(runs["run_id"], runs["variant"], strict=True))))


def fig3(data: GridData, path: Path) -> Path:
    """Gate score distributions over all layers, one panel per gated variant, mean marked."""
    plt = _plt()
    h = _hist(data)
    variants = _ordered_variants(data, list(h["variant"].unique()))[:MAX_PANELS] if len(h) else []
    means = per_layer(data, "gate_score", gated_only=True, limit=10_000)
    fig, axes = plt.subplots(1, max(1, len(variants)), figsize=(4 * max(1, len(variants)), 3.6),
                             squeeze=False)
    if not variants:
        _empty(axes[0][0], "gate score histograms")
        axes[0][0].set_title("Gate score distribution")
    for ax, v in zip(axes[0], variants, strict=False):
        rows = h[h["variant"] == v]
        bins = rows.groupby("bin").agg(lo=("lo", "first"), hi=("hi", "first"), count=("count", "sum"))
        share = bins["count"] / bins["count"].sum()
        centers = (bins["lo"] + bins["hi"]) / 2
        ax.bar(centers, share, width=(bins["hi"] - bins["lo"]) * 0.95, color="tab:orange",
               label="share of scores")
        mean = float(means[v].mean()) if v in means else float((centers * share).sum())
        ax.axvline(mean, color="black", ls="--", label=f"mean {mean:.3f}")
        ax.set_title(v)
        ax.set_xlabel("gate score")
        ax.set_ylabel("share")
        ax.legend(fontsize=7)
    fig.suptitle("Gate score distributions (all layers)")
    return _save(fig, path)


def fig4(data: GridData, path: Path) -> Path:
    """Mean |Y| of the SDPA output before and after the gate, per layer."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    post = per_layer(data, "mean_abs_post", gated_only=True, limit=MAX_PANELS)
    pre_all = per_layer(data, "mean_abs_pre", limit=10_000)
    pre = {v: pre_all[v] for v in [_variant_of(data, "table1:1"), *post] if v in pre_all}
    _lines(ax, pre, ylabel="mean |Y|", what="mean |Y| probe values", suffix=" before gate")
    if post:
        for v, s in post.items():
            ax.plot(s.index, s.values, "--s", ms=3, label=f"{v} after gate")
        ax.legend(fontsize=7)
    ax.set_title("Mean |Y| before and after the gate")
    return _save(fig, path)


def draw_fig5(data: GridData) -> Any:
    """Figure 5 as a matplotlib Figure: its one legend below both panels, off the data."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, t in zip(axes, ("1e-2", "1e-3"), strict=True):
        post = per_layer(data, f"frac_below_{t}_post", gated_only=True, limit=MAX_PANELS)
        scaled = per_layer(data, f"frac_below_{t}_scaled", gated_only=True, limit=MAX_PANELS)
        _lines(ax, post, ylabel=f"share of |Y'| < {t}", what=f"frac_below_{t} probe values", suffix=" gated")
        for v, s in scaled.items():
            ax.plot(s.index, s.values, ":", label=f"{v} mean-score control")
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.set_title(f"SDPA output below {t}")
    found: dict[str, Any] = {}  # label -> handle, over both panels
    for a in axes:
        for h, label in zip(*a.get_legend_handles_labels(), strict=True):
            found.setdefault(label, h)
    labels, handles = list(found), list(found.values())
    bottom = 0.0
    if handles:
        rows = -(-len(handles) // 2)
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
        bottom = 0.05 + 0.045 * rows
    fig.suptitle("Sparsity of the gated SDPA output (control: pre-gate values x mean gate score)")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def fig5(data: GridData, path: Path) -> Path:
    """Share of SDPA output values below 1e-2 and 1e-3 after the gate, with the mean-score control."""
    return _save(draw_fig5(data), path, layout=False)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round values to label a log axis between ``lo`` and ``hi`` (> 0): 1, 2 and 5 times the powers of ten
    in the range, or, where fewer than three fall in it, four points spaced evenly on the log scale, rounded
    to two significant digits. Matplotlib's own labels only powers of ten, which a range inside one decade
    never reaches.

    >>> log_ticks(40, 160), log_ticks(3, 700)
    ([50.0, 100.0], [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0])
    """
    import math

    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
             for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    if len(ticks) >= 2 or hi <= lo:
        return ticks
    step = (math.log10(hi) - math.log10(lo)) / 3
    return [float(f"{10 ** (math.log10(lo) + i * step):.2g}") for i in range(4)]


def _label_log_axis(ax: Any, series: dict[str, Any]) -> None:
    """A log y axis whose labelled ticks sit where the lines are (``log_ticks``)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    values = [float(v) for s in series.values() for v in s.values if v > 0]
    if not values:
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(log_ticks(min(values), max(values))))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def draw_fig6(data: GridData) -> Any:
    """Figure 6 as a matplotlib Figure."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    m = per_layer(data, "m_act")
    _lines(axes[0], m, ylabel="max |hidden state| (log scale)", what="M-Act probe values")
    _label_log_axis(axes[0], m)
    axes[0].set_title("Massive activations: M-Act per layer")
    _lines(axes[1], per_layer(data, "f_attn"), ylabel="attention on the first token",
           what="F-Attn probe values")
    axes[1].set_title("Attention sink: F-Attn per layer")
    return fig


def fig6(data: GridData, path: Path) -> Path:
    """M-Act (max |hidden state|) and F-Attn per layer across configurations."""
    return _save(draw_fig6(data), path)


def fig7(data: GridData, path: Path) -> Path:
    """Per-layer gate score distributions: a layer x score heat map per gated variant."""
    plt = _plt()
    h = _hist(data)
    variants = _ordered_variants(data, list(h["variant"].unique()))[:MAX_PANELS] if len(h) else []
    fig, axes = plt.subplots(1, max(1, len(variants)), figsize=(4.2 * max(1, len(variants)), 3.8),
                             squeeze=False)
    if not variants:
        _empty(axes[0][0], "gate score histograms")
        axes[0][0].set_title("Gate scores per layer")
    for ax, v in zip(axes[0], variants, strict=False):
        grid = h[h["variant"] == v].pivot_table(index="layer", columns="bin", values="count", aggfunc="sum")
        grid = grid.div(grid.sum(axis=1), axis=0).fillna(0.0)
        lo, hi = float(h["lo"].min()), float(h["hi"].max())
        im = ax.imshow(grid.values, aspect="auto", origin="lower", cmap="viridis",
                       extent=(lo, hi, grid.index.min() - 0.5, grid.index.max() + 0.5))
        fig.colorbar(im, ax=ax, label="share of the layer's scores")
        ax.set_title(v)
        ax.set_xlabel("gate score")
        ax.set_ylabel("layer")
        _integer_ticks(ax.yaxis)
    fig.suptitle("Gate score distribution per layer")
    return _save(fig, path)


DRAW: dict[int, Callable[[GridData, Path], Path]] = {1: fig1, 2: fig2, 3: fig3, 4: fig4, 5: fig5, 6: fig6,
                                                     7: fig7}


def write_figures(data: GridData, out_dir: str | Path) -> dict[int, Path]:
    """Write Figures 1-7 as PNG files into ``out_dir``; returns ``{number: path}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for n, draw in DRAW.items():
        paths[n] = draw(data, out / FIGURES[n])
        log.info("figure %d -> %s", n, paths[n])
    return paths
