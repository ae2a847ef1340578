"""What every figure of ``reports/figures.py`` is drawn with: print sizes and style, one colour per arm (the
same in every figure and grid), the mean over seeds with its 95% t band, n in the legend, and the files
written (a 200 dpi PNG beside a PDF, the caption in their metadata).
"""

from __future__ import annotations

import functools
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ablate.reports.data import GridData
from ablate.reports.rows import context_key
from ablate.stats import t_interval

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

# Variants the paper's figures show, in its order (by catalogue ref); others follow by name.
PRIORITY = ("table1:1", "table1:5", "table1:6", "table1:12", "table4:7", "table1:10", "table4:6", "table1:14")
MAX_LINES = 7
MAX_PANELS = 4
EMA = 0.9
DPI = 200
COLUMN, TEXT = 3.4, 6.8  # inches: a column's width and the text's, in a two-column paper
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
         "legend.fontsize": 7, "legend.title_fontsize": 7, "figure.titlesize": 9, "lines.linewidth": 1.3,
         "lines.markersize": 3, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
         "pdf.fonttype": 42}  # TrueType in the PDF: the text stays text, as journals ask
BAND_ALPHA = 0.2
REFERENCE_COLOR = "#222222"  # the baseline
# The other arms' colours: tab10 less its grey, nine hues a reader tells apart.
PALETTE = ("#ff7f0e", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
BAND = ("band: the 95% Student t interval of the mean over seeds (n-1 df; none at n=1); n: the seeds, in the "
        "legend")


PerArm = dict[str, pd.DataFrame]  # a frame per arm (variant), in the figures' order


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (chosen when first drawn: nothing is drawn at import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    module: ModuleType = plt
    return module


def styled(draw: Callable[[GridData], Figure]) -> Callable[[GridData], Figure]:
    """Draw under ``STYLE``: matplotlib reads sizes when each artist is made."""
    @functools.wraps(draw)
    def styled(data: GridData) -> Figure:
        with pyplot().rc_context(STYLE):
            return draw(data)

    return styled


def ordered_variants(data: GridData, variants: Iterable[str]) -> list[str]:
    """The figures' order: the paper's figure arms in its order (``PRIORITY``), an arm the catalogue does not
    know (a plugin arm: the researcher's own) right after the baseline and G1, then the catalogue's other arms
    in its order."""
    names = list(data.catalogue)

    def rank(v: str) -> tuple[float, int, str]:
        if v not in data.catalogue:
            return (1.5, 0, v)
        hits = [PRIORITY.index(r) for r in data.catalogue[v].paper if r in PRIORITY]
        return (min(hits), 0, "") if hits else (len(PRIORITY), names.index(v), "")

    return sorted(set(variants), key=rank)


def own_arms(data: GridData, runs: pd.DataFrame) -> list[str]:
    """The arms of ``runs`` the catalogue does not know (plugin arms), by name."""
    return sorted({str(v) for v in runs["variant"]} - set(data.catalogue)) if len(runs) else []


def modal_runs(data: GridData) -> pd.DataFrame:
    runs = data.finished
    if not len(runs):
        return runs
    keys = [context_key(r) for _, r in runs.iterrows()]
    done = [k for k, st in zip(keys, runs["status"], strict=True) if st == "done"]
    modal = max(set(keys), key=lambda k: (keys.count(k), done.count(k), repr(k)))
    return runs[[k == modal for k in keys]]


def variant_of(data: GridData, ref: str) -> str | None:
    return next((v.name for v in data.catalogue.values() if ref in v.paper), None)


# ---------------------------------------------------------------- one colour per arm
def colour_order(data: GridData) -> list[str]:
    """The catalogue's arms but the baseline, in the figures' order (``ordered_variants``: the paper's figure
    arms, then the others in catalogue order, where a new arm is added last); an arm's place here is its
    colour's place in ``PALETTE``."""
    return ordered_variants(data, set(data.catalogue) - {variant_of(data, "table1:1")})


def arm_colors(data: GridData) -> dict[str, str]:
    """Each arm of the grid (every run, whatever its status) its colour, the same in every figure.

    The baseline is ``REFERENCE_COLOR``. Another arm takes the palette colour at its place in ``colour_order``
    (a plugin arm: at a hash of its name) or, where an arm before it has that colour, the next free one; the
    paper's figure arms choose first, then plugin arms, then the others. So the paper's figure arms have one
    colour in every grid, any other arm has its own unless an arm before it in the grid took it, and no two
    arms of a grid share a colour while the palette lasts (9 arms besides the baseline): a figure, which draws
    the first 7 at most, never repeats one."""
    arms = {str(v) for v in data.runs["variant"]} if len(data.runs) else set()
    order = colour_order(data)
    base = variant_of(data, "table1:1")
    out = {v: REFERENCE_COLOR for v in arms if v == base}
    paper = {v for v in order if any(ref in PRIORITY for ref in data.catalogue[v].paper)}
    for v in sorted(arms - {base}, key=lambda v: (v not in paper, v in data.catalogue, order.index(v)
                                                  if v in order else 0, v)):
        home = order.index(v) if v in order else zlib.crc32(v.encode())
        turns = [PALETTE[(home + k) % len(PALETTE)] for k in range(len(PALETTE))]
        out[v] = next((c for c in turns if c not in out.values()), turns[0])
    return out


# ---------------------------------------------------------------- means over seeds
def mean_band(matrix: np.ndarray, *, log: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``matrix`` (points x runs, NaN where a run has no value): the mean over the runs that have a
    value there, and the bounds of its 95% Student t interval (``ablate.stats.t_interval``; NaN under two
    runs). ``log``: the geometric mean and the interval of the mean log, back on the values' scale (for a log
    axis, as the reports read ratios); values <= 0 are left out.

    >>> mean, lo, hi = mean_band([[1.0, 2.0, 3.0], [2.0, float("nan"), float("nan")]])
    >>> mean.tolist(), round(float(lo[0]), 3), round(float(hi[0]), 3), bool(np.isnan(lo[1]))
    ([2.0, 2.0], -0.484, 4.484, True)
    """
    m = np.asarray(matrix, dtype=float).reshape(len(matrix), -1)
    if log:
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.log(np.where(m > 0, m, np.nan))
    m = np.where(np.isfinite(m), m, np.nan)
    n = np.isfinite(m).sum(axis=1)
    packed = np.sort(m, axis=1)  # each row's values first, its NaNs last
    mean, lo, hi = (np.full(len(m), np.nan) for _ in range(3))
    for k in sorted(set(n.tolist()) - {0}):
        rows = n == k
        mean[rows] = packed[rows, :k].mean(axis=1)
        if k > 1:
            lo[rows], hi[rows] = t_interval(packed[rows, :k])
    return (np.exp(mean), np.exp(lo), np.exp(hi)) if log else (mean, lo, hi)


def per_layer_runs(data: GridData, name: str, *, gated_only: bool = False,
                   limit: int = MAX_LINES) -> PerArm:
    """``{variant: DataFrame(layer x run)}`` of probe ``name`` at the grid's modal configuration: a column per
    run (seed), NaN where it has no value; the variants in the figures' order, at most ``limit``."""
    runs = modal_runs(data)
    runs = runs[runs["status"] == "done"]
    if gated_only and "gate_score" in runs:
        runs = runs[runs["gate_score"].notna()]
    p = data.probes
    if not len(runs) or not len(p):
        return {}
    p = p[(p["name"] == name) & p["run_id"].isin(set(runs["run_id"]))].dropna(subset=["value"])
    variant_of = p["run_id"].map(dict(zip(runs["run_id"], runs["variant"], strict=True)))
    out = {v: p[variant_of == v].pivot_table(index="layer", columns="run_id", values="value", aggfunc="mean")
           for v in ordered_variants(data, variant_of.unique())}
    return dict(list(out.items())[:limit])


def per_layer(data: GridData, name: str, *, gated_only: bool = False, limit: int = MAX_LINES
              ) -> dict[str, pd.Series]:
    """``{variant: Series(layer -> mean over seeds)}`` of probe ``name`` at the grid's modal configuration."""
    return {v: f.mean(axis=1) for v, f in per_layer_runs(data, name, gated_only=gated_only,
                                                            limit=limit).items()}


def unchanged(before: Mapping[str, pd.DataFrame], after: Mapping[str, pd.DataFrame]) -> list[str]:
    """The arms of ``after`` whose values equal ``before``'s at every layer in every run: a probe that reads
    the SDPA output past a gate that does not act on it (G2-G5 gate the values, keys, queries or dense
    output), so "after the gate" is "before it" by construction."""
    same = []
    for v, a in after.items():
        b = before.get(v)
        if (b is not None and a.index.equals(b.index) and a.columns.equals(b.columns)
                and np.allclose(a.to_numpy(), b.to_numpy(), rtol=1e-9, atol=0, equal_nan=True)):
            same.append(v)
    return same


def n_label(arm: str, frame: pd.DataFrame, note: str = "") -> str:
    """An arm's legend label: its name and n, the runs (seeds) its mean is over: ``G1 (n=3)``."""
    return f"{arm} (n={frame.shape[1]}{note})"


# ---------------------------------------------------------------- drawing
def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = COLUMN, height: float = 2.9, **kw: Any
               ) -> tuple[Figure, list[Axes]]:
    """A figure of ``nrows`` x ``ncols`` panels at a print size, its axes in reading order."""
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(width, height), layout="constrained", squeeze=False,
                                **kw)
    return fig, list(axes.ravel())


def panels(k: int, **kw: Any) -> tuple[Figure, list[Axes]]:
    """``k`` panels in rows of two (a grid, not a strip: it stays readable at the text's width); the unused
    last cell hidden, and x labels on each column's lowest panel."""
    cols = min(k, 2)
    rows = -(-k // cols)
    fig, axes = new_figure(cols, rows, width=TEXT if cols > 1 else COLUMN, height=0.7 + 2.1 * rows, **kw)
    for i, ax in enumerate(axes):
        ax.set_visible(i < k)
        if i < k and i + cols >= k:
            ax.tick_params(labelbottom=True)
    return fig, axes[:k]


def say_empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this grid", ha="center", va="center", transform=ax.transAxes,
            color="#777", wrap=True, in_layout=False)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def draw_arm(ax: Axes, frame: pd.DataFrame, color: str, arm: str, label: str | None, *, kind: str = "mean",
         style: str = "-", marker: str = "o", log: bool = False) -> None:
    """One arm's mean over its seeds (``frame``: points x runs) as a line, its 95% t interval as a band; the
    artists' gid ``{kind}:{arm}`` and ``{kind}-band:{arm}``."""
    mean, lo, hi = mean_band(frame.to_numpy(), log=log)
    x = frame.index.to_numpy()
    if np.isfinite(lo).any():
        ax.fill_between(x, lo, hi, color=color, alpha=BAND_ALPHA, lw=0, gid=f"{kind}-band:{arm}")
    ax.plot(x, mean, style, marker=marker, color=color, label=label, gid=f"{kind}:{arm}")


def per_layer_panel(ax: Axes, frames: PerArm, colors: dict[str, str], *, ylabel: str, what: str,
                     log: bool = False) -> None:
    if not frames:
        say_empty(ax, what)
        return
    for v, f in frames.items():
        draw_arm(ax, f, colors[v], v, n_label(v, f), log=log)
    ax.set_xlabel("layer")
    integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)


def legend_below(fig: Figure, axes: list[Axes], *, ncol: int, extra: Iterable[Artist] = (),
                 title: str | None = None) -> None:
    """One legend for the figure, below its panels (off the data), each label once."""
    found: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    for handle in extra:
        found.setdefault(str(handle.get_label()), handle)
    if not found and not title:
        return
    for cols in range(max(1, min(ncol, len(found))), 0, -1):  # as many columns as fit the figure's width
        legend = fig.legend(list(found.values()), list(found), loc="outside lower center", ncol=cols,
                            frameon=False, title=title)
        if cols == 1 or legend.get_window_extent().width <= fig.bbox.width:
            return
        legend.remove()


def legend_key(label: str, **kw: Any) -> Line2D:
    """A legend entry for a line style rather than an arm."""
    return Line2D([], [], color="#555", label=label, **kw)


def integer_ticks(axis: Axis) -> None:
    axis.set_major_locator(MaxNLocator(integer=True))


def save(fig: Figure, path: Path, *, layout: bool = True) -> Path:
    """``fig`` as a PNG file at ``DPI`` (the learning-rate figure of ``ablate tune``)."""
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def write_figure(fig: Figure, png: Path, title: str, caption: str) -> Path:
    """``fig`` as ``png`` at ``DPI`` and as a PDF beside it (fonts embedded as TrueType, no creation date: the
    same figure gives the same file), each carrying its title and caption."""
    with pyplot().rc_context(STYLE):
        fig.savefig(png, dpi=DPI, metadata={"Title": title, "Description": caption})
        fig.savefig(png.with_suffix(".pdf"),
                    metadata={"Title": title, "Subject": caption, "CreationDate": None})
    pyplot().close(fig)
    return png


def ema(values: list[float], coeff: float = EMA) -> list[float]:
    """Exponential moving average as the paper smooths its loss curves: s_t = c s_{t-1} + (1 - c) x_t.

    >>> ema([1.0, 0.0], 0.9)
    [1.0, 0.9]
    """
    out: list[float] = []
    for x in values:
        out.append(x if not out else coeff * out[-1] + (1 - coeff) * x)
    return out
