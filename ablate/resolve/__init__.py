"""``ablate run GRID --until-resolved``: more seeds where a comparison is still open, and only there; and
``ablate plan``'s view of what ``ablate run`` would do.

A *comparison* is one cell of the grid (a variant at one setting of the other axes) against its reference cell
(the same setting, the reference variant), paired by seed on one metric (``val_ppl`` by default). The grid
file's seeds are the first look. At each look:

1. every comparison's paired differences get their t test (``ablate.stats``), and the whole family is
   corrected (Holm by default) at the look's level (``ablate.stats.sequential``);
2. a comparison whose corrected p is below that level is resolved, and stays so;
3. the open ones get ``round`` more seeds, in both of their cells (they are pairs), and the next look follows,
   until every comparison is resolved or has ``max_seeds`` seeds.

The looks' levels spend alpha over the planned looks (``sequential.looks``, ``sequential.look_levels``:
Lan-DeMets' O'Brien-Fleming-shaped spending, early looks strict, the last close to alpha), and each look
corrects the whole family at its level, so the chance of any false resolution over every look is at most
alpha, however the looks depend on each other. Looking again at 0.05 each time would not keep that.

Added seeds are ordinary runs: ``include`` entries of the grid (the cell's axis values and the new seed),
content addressed, so a rerun reuses every one. They join the grid's current runs (as ``--set`` runs do) and
so appear in ``ablate report``; a plain ``ablate run`` of the file makes its own seeds the current ones again.
Each round is the executor's ``run``: the local pool, a Slurm array waited for, Ray tasks.

What the looks decided is stored (``decisions``, ``Store.record_decisions``): every report then reads each
comparison at the look that decided it, never again at a fixed-n level.

It sits above the executors and the store, which it drives, and the statistics, which it reads. Its modules,
in the order a look goes:

- ``cells``: the settings (``UntilResolved``), the grid's cells and their pairs (``PairedCells``);
- ``plan``: the seeds of each look and the most runs they may add (``Planner``, ``plan_until_resolved``);
- ``looks``: the loop (``until_resolved``, ``run_looks``) and what one look reads;
- ``verdicts``: the lines it ends with and the decisions the store keeps;
- ``rounds``: ``ablate run`` itself, once or in rounds on an executor (``run_until_resolved``);
- ``preview``: ``ablate plan`` (``preview``).
"""

from ablate.resolve.cells import PairedCells, UntilResolved, cells, comparisons, extra_runs, first_seeds
from ablate.resolve.looks import (
    Look,
    Resolution,
    look_line,
    metric_values,
    read_look,
    run_looks,
    until_resolved,
)
from ablate.resolve.plan import Planner, most_line, plan_until_resolved
from ablate.resolve.preview import Preview, preview
from ablate.resolve.rounds import run_until_resolved
from ablate.resolve.verdicts import decisions, verdict_lines

__all__ = [
    "Look", "PairedCells", "Planner", "Preview", "Resolution", "UntilResolved", "cells", "comparisons",
    "decisions", "extra_runs", "first_seeds", "look_line", "metric_values", "most_line",
    "plan_until_resolved", "preview", "read_look", "run_looks", "run_until_resolved", "until_resolved",
    "verdict_lines",
]
