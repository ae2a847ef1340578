"""The paper's Figures 1-7 from a grid's curves, probes and histograms: PNG (200 dpi) and PDF files,
matplotlib (Agg).

Each figure is written even when the grid lacks its data (then it says so on the canvas), so a report always
has the same seven figures. An arm is drawn as the mean over its seeds with a band, the 95% Student t interval
of that mean (``ablate.stats.t_interval``, as the tables read intervals; none at one seed), and its n in the
legend; Figure 1 draws each seed faint behind the mean. Every arm has one colour in every figure
(``arm_colors``). Per-layer values are at the grid's most common configuration; Figure 1 uses the largest
learning rate its arms ran at. An arm the catalogue does not know (a plugin arm: the researcher's own) is
drawn beside the paper's first two, never cut for want of room, and has its loss curve in Figure 1 beside the
baseline's and G1's.

Sizes are print sizes: a one-panel figure is a column wide (3.4 in), the others the text's width (6.8 in),
with 7-8 pt text at that size, so a figure placed at its own width is read as drawn. Each file carries its
caption (what is drawn, the band, what coincides by construction and is drawn once): PNG ``Description``, PDF
``Subject``; the report page prints it under the figure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.reports.data import GridData
from ablate.reports.figure_draw import (
    draw_fig1,
    draw_fig2,
    draw_fig3,
    draw_fig4,
    draw_fig5,
    draw_fig6,
    draw_fig7,
    fig4_arms,
    fig5_arms,
    loss_runs,
)
from ablate.reports.figure_kit import BAND, EMA, ordered_variants, write_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

FIGURES: dict[int, str] = {
    1: "fig1_training_loss.png", 2: "fig2_first_token_attention.png", 3: "fig3_gate_score_distributions.png",
    4: "fig4_mean_abs_before_after_gate.png", 5: "fig5_sdpa_sparsity.png",
    6: "fig6_massive_activation_and_sink.png", 7: "fig7_gate_scores_per_layer.png",
}
TITLES: dict[int, str] = {
    1: "training loss, baseline vs SDPA-gated (EMA 0.9), loss spikes marked",
    2: "share of attention on the first token (F-Attn) per layer",
    3: "gate score distributions",
    4: "mean |Y| before and after the gate, per layer",
    5: "share of SDPA output below 1e-2 / 1e-3 after the gate, with the mean-score control",
    6: "massive activations (M-Act) and attention sink (F-Attn) per layer across configurations",
    7: "gate score distributions per layer",
}

# ---------------------------------------------------------------- captions and files
def captions(data: GridData) -> dict[int, str]:
    """Each figure's caption: what it draws, its band and n, and what coincides by construction."""
    pick, lr = loss_runs(data)
    at = f" at lr {lr:g}" if lr is not None else ""
    _, _, same4 = fig4_arms(data)
    same5 = list(dict.fromkeys(v for t in ("1e-2", "1e-3") for v in fig5_arms(data, t)[2]))
    out = {
        1: f"Training loss{at} of {', '.join(ordered_variants(data, pick['variant'])) or 'no run'}: each "
           f"run's loss smoothed (EMA {EMA}), then the mean over seeds; faint: each seed; x: a loss spike; "
           f"{BAND}.",
        2: "F-Attn, the share of attention each query gives the first token, per layer: the mean over seeds; "
           f"{BAND}.",
        3: "Gate score distribution over all layers, a panel per gated arm on shared axes: each bin's share "
           "of the scores, the mean over seeds with its 95% Student t interval (n in the panel's title); "
           "dashed: the mean gate score.",
        4: "Mean |Y| of the SDPA output before the gate (solid) and after it (dashed), per layer: the mean "
           f"over seeds; {BAND}.",
        5: "Share of the SDPA output's values below 1e-2 and 1e-3 after the gate (solid) and the control "
           "(dotted: the pre-gate values times the layer's mean gate score, the sparsity the gate's mean "
           f"alone would give), per layer: the mean over seeds; {BAND}.",
        6: "M-Act (the largest |activation| of each layer's output; the geometric mean over seeds, its band "
           "the 95% t interval of the mean log) and F-Attn (the mean over seeds, its band the 95% Student t "
           "interval), per layer; n: the seeds, in the legend.",
        7: "Gate score distribution per layer (rows) for each gated arm: the mean over seeds of each run's "
           "shares, on one colour scale for every panel (n in the panel's title).",
    }
    why = "the probe reads the SDPA output, which a gate on the values, keys, queries or dense output does " \
          "not touch"
    if same4:
        out[4] += f" {', '.join(same4)}: after = before at every layer in every run ({why}), drawn once."
    if same5:
        out[5] += f" Not drawn: {', '.join(same5)}, whose values after the gate equal those before it " \
                  f"({why})."
    return out


DRAW: dict[int, Callable[[GridData], Figure]] = {1: draw_fig1, 2: draw_fig2, 3: draw_fig3, 4: draw_fig4,
                                                 5: draw_fig5, 6: draw_fig6, 7: draw_fig7}


def write_figures(data: GridData, out_dir: str | Path) -> dict[int, Path]:
    """Write Figures 1-7 into ``out_dir``, each as a PNG (``DPI``) and a PDF of the same name, both carrying
    the figure's caption; returns ``{number: PNG path}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = captions(data)
    paths = {}
    for n, draw in DRAW.items():
        paths[n] = write_figure(draw(data), out / FIGURES[n], f"Figure {n}: {TITLES[n]}", text[n])
        log.info("figure %d -> %s (and .pdf)", n, paths[n])
    return paths
