"""``--then-run``: the grid's runs again, each at its cell's best value, as an ordinary grid file.

The file is the grid's ``base`` plus one ``zip`` axis whose rows are the runs: every path any of the grid's
runs varied (read from the run's config), its seed, and the best value. A zip axis (not ``include`` entries)
because a grid with no axes also has its bare ``base`` as a run. It is written under ``$ABLATE_HOME/tune/``
and run by ``ablate run``'s executor, so ``ablate run`` on the same file later does nothing new.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ablate.grid.paths import get_path

if TYPE_CHECKING:
    from ablate.grid import Grid, PlannedRun


def tuned_grid(grid: Grid, picks: Sequence[tuple[PlannedRun, float | int]], param: str) -> dict[str, object]:
    """The grid document ``<grid>/tuned``: each ``(PlannedRun, value)`` of ``picks`` as one row of a zip
    axis."""
    paths = list(dict.fromkeys(k for run, _ in picks for k in run.axes if k not in ("seed", param)))
    rows = []
    for run, value in picks:
        dump = run.config.model_dump(mode="json")
        rows.append([*(get_path(dump, p)[1] for p in paths), run.config.seed, value])
    columns = [*paths, "seed", param]
    doc: dict[str, object] = {"name": f"{grid.name}/tuned", "base": grid.base,
                           "zip": [{p: [row[i] for row in rows] for i, p in enumerate(columns)}]}
    if grid.match_params is not None:
        doc["match_params"] = grid.match_params
    return doc


def write_tuned_grid(doc: Mapping[str, object], home: Path, *, note: str) -> Path:
    """Write ``doc`` to ``home/tune/<grid name>.yaml`` (``/`` and other odd characters as ``_``), ``note`` on
    top."""
    path = Path(home) / "tune" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', str(doc['name']))}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {note}\n" + yaml.safe_dump(doc, sort_keys=False))
    return path
