"""The reports ``ablate report`` offers, by name, with a line on each: what the command line reads at start-up
(its choices and its help), so it imports no builder. ``ablate.reports.registry`` makes each one."""

from __future__ import annotations

from ablate.reports.spec import TABLES

REPORT_HELP: dict[str, str] = {
    "compare": "every arm of the grid (plugin arms too) against a reference, per cell and metric: paired Δ, "
               "corrected p, n, seeds needed, the pairing's correlation",
    **{f"table{n}": f"the paper's Table {n}" for n in TABLES},
    "lr": "ablate tune's table: best and largest stable learning rate per arm",
    "scorecard": "the paper's claims: verdicts with CIs, corrected together",
    "ladder": "a scaling ladder's fits and predictions",
    "figures": "Figures 1-7 as PNG files",
    "all": "the HTML page and every table, figure and the scorecard as files",
}
TARGETS = tuple(REPORT_HELP)  # every report's name
