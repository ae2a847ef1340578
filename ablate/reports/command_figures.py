"""The figures of a command grid (a grid whose trainer is the researcher's own command): one per metric the
command reported, the objective first (``GridData.outcomes``), written as ``curve_<metric>.png`` and a PDF.

Each arm's curve is drawn by step as the mean over its seeds with the 95% Student t interval of that mean as a
band (``figure_kit.mean_band``, as ablate's Figure 1), its n in the legend and each seed faint behind it. At a
step that not every seed reported, the mean and band are over the seeds that did. Where the grid varies more
than the arm and the seed (a learning rate axis, say), each cell (``rows.context_key``, as ``report compare``
pairs runs) has its own panel. The arms keep the colours they have in every other figure (``arm_colors``),
and the files are written by ``write_figure`` (200 dpi PNG and a PDF, each with the caption).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ablate.reports.data import GridData
from ablate.reports.figure_kit import (
    BAND,
    STYLE,
    arm_colors,
    draw_arm,
    legend_below,
    legend_key,
    n_label,
    new_figure,
    ordered_variants,
    panels,
    pyplot,
    say_empty,
    write_figure,
)
from ablate.reports.rows import Context, context_key

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

MAX_CELLS = 8  # panels in one figure (four rows of two at the text's width); other cells are named, not drawn


def file_name(name: str) -> str:
    """The PNG file of metric ``name``'s figure: ``curve_<name>.png``, each run of characters a file name
    should not hold made one ``_``.

    >>> file_name("val_loss"), file_name("eval/acc@1")
    ('curve_val_loss.png', 'curve_eval_acc_1.png')
    """
    return f"curve_{re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('._') or 'metric'}.png"


def _in_order(key: Context) -> list[tuple[str, int, float, str]]:
    """A cell's place: by each field's value, numbers by size before the others by their text."""
    return [(f, 0, float(v), "") if isinstance(v, int | float) else (f, 1, 0.0, str(v)) for f, v in key]


def cells(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``runs`` by cell (everything of a run's configuration but its arm and seed), in order of the cells'
    values, each with its label: the fields that set it apart from the other cells (``"cell.lr=0.001"``;
    ``""`` when the grid has one cell)."""
    if not len(runs):
        return []
    keys = [context_key(r) for _, r in runs.iterrows()]
    distinct = sorted(set(keys), key=_in_order)
    flat = [dict(k) for k in distinct]
    varying = sorted({f for d in flat for f in d if any(e.get(f) != d.get(f) for e in flat)})
    return [(", ".join(f"{f}={d.get(f)}" for f in varying), runs[[k == key for k in keys]])
            for key, d in zip(distinct, flat, strict=True)]


def seed_curves(curves: pd.DataFrame, runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """Metric ``name``'s curve of each of ``runs`` (by seed) as DataFrame(step x run_id): NaN where a run did
    not report that step; a step reported twice (a resumed run) is read at its last value."""
    if not len(curves):
        return pd.DataFrame()
    mine = curves[(curves["metric"] == name) & curves["run_id"].isin(set(runs["run_id"]))]
    if not len(mine):
        return pd.DataFrame()
    frame = mine.pivot_table(index="step", columns="run_id", values="value", aggfunc="last").sort_index()
    order = [r for r in runs.sort_values("seed")["run_id"] if r in frame.columns]
    return frame[order].astype(float)


def arm_curves(data: GridData, runs: pd.DataFrame, name: str) -> dict[str, pd.DataFrame]:
    """``{arm: DataFrame(step x run)}`` of metric ``name`` for the arms of ``runs`` (one cell), in the
    figures' order; an arm without a value of it is left out."""
    out = {}
    for arm in ordered_variants(data, runs["variant"].astype(str)):
        frame = seed_curves(data.curves, runs[runs["variant"] == arm], name)
        if not frame.empty:
            out[arm] = frame
    return out


def metric_title(data: GridData, name: str) -> str:
    """A metric's figure title: its name, whether it is the objective, and which way is better."""
    better = data.outcomes.get(name)
    objective = name == next(iter(data.outcomes), None)
    says = [w for w in ("the objective" if objective else "", f"{better} is better" if better else "") if w]
    return f"{name} by step" + (f" ({', '.join(says)})" if says else "")


def _panel(ax: Axes, data: GridData, runs: pd.DataFrame, name: str, colors: dict[str, str]) -> list[str]:
    """One cell's arms on ``ax``: each seed faint, then each arm's mean with its band. Returns where an arm's
    mean is over only some of its seeds (``"gated at step 20"``)."""
    frames = arm_curves(data, runs, name)
    if not frames:
        say_empty(ax, f"{name} values by step")
        return []
    partial = []
    for arm, frame in frames.items():
        for rid in frame:
            seed = frame[rid].dropna()
            ax.plot(seed.index, seed.to_numpy(), color=colors[arm], lw=0.6, alpha=0.35, gid=f"seed:{arm}")
        ended = runs[runs["run_id"].isin(frame.columns)]["status"].value_counts()
        note = "".join(f", {k} {s}" for s, k in ended.items() if s != "done")
        draw_arm(ax, frame, colors[arm], arm, n_label(arm, frame, note), marker="")
        partial += [f"{arm} at step {step:g}" for step in frame.index[frame.isna().any(axis=1)]]
    ax.set_xlabel("step")
    ax.set_ylabel(name)
    return partial


def caption(partial: list[str], labels: list[str], left_out: list[str]) -> str:
    """A metric figure's caption: what is drawn, the band and n, the rule for a step that not every seed
    reported and where it applied (``partial``), the panels' cells (``labels``) and the cells not drawn."""
    text = (f"Each arm's mean over its seeds at each step; faint: each seed; {BAND}. At a step that not "
            "every seed of an arm reported, the mean and its band are over the seeds that did")
    shown = "; ".join(partial[:5]) + (f"; and {len(partial) - 5} more" if len(partial) > 5 else "")
    text += f" (here: {shown})." if partial else " (none here)."
    if len(labels) > 1:
        text += " A panel per cell (the runs that share everything but the arm and the seed)."
    if left_out:
        text += f" Not drawn, {len(left_out)} more cells: {'; '.join(left_out)}."
    return text


def _draw(data: GridData, name: str) -> tuple[Figure, str]:
    """Metric ``name``'s figure and its caption."""
    found = cells(data.finished) or [("", data.finished)]
    shown, left_out = found[:MAX_CELLS], [label for label, _ in found[MAX_CELLS:]]
    fig, axes = panels(len(shown)) if len(shown) > 1 else new_figure(height=3.3)
    colors = arm_colors(data)
    partial = []
    for ax, (label, runs) in zip(axes, shown, strict=True):
        here = _panel(ax, data, runs, name, colors)
        partial += [f"{label}: {p}" for p in here] if label else here
        ax.set_title(label)
    if len(shown) > 1:
        fig.suptitle(metric_title(data, name))
    else:
        axes[0].set_title(metric_title(data, name))
    seeds = [legend_key("one seed", lw=0.6, alpha=0.4)] if any(ax.get_lines() for ax in axes) else []
    legend_below(fig, axes, ncol=2, extra=seeds)
    return fig, caption(partial, [label for label, _ in shown], left_out)


def draw_curves(data: GridData, name: str) -> Figure:
    """Metric ``name``'s figure (see the module docstring) as a matplotlib Figure, not yet written: the mean
    line of arm A has gid ``mean:A``, its band ``mean-band:A``, each of its seeds ``seed:A``."""
    with pyplot().rc_context(STYLE):
        return _draw(data, name)[0]


def write_curve_figures(data: GridData, out_dir: str | Path) -> dict[str, Path]:
    """Write one figure per metric of ``data.outcomes`` (a command grid's own metrics, the objective first)
    into ``out_dir`` as ``curve_<metric>.png`` and a PDF beside it, both carrying the caption; returns
    ``{metric: PNG path}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    taken: set[str] = set()
    for name in data.outcomes:
        file = file_name(name)
        stem, k = file[:-4], 2
        while file in taken:  # two names that one file name would hold: the second gets a number
            file, k = f"{stem}_{k}.png", k + 1
        taken.add(file)
        with pyplot().rc_context(STYLE):
            fig, text = _draw(data, name)
        paths[name] = write_figure(fig, out / file, metric_title(data, name), text)
        log.info("figure of %s -> %s (and .pdf)", name, paths[name])
    return paths
