"""Grid files: a declarative study (YAML) expanded into content-addressed runs.

``load_grid(path, sets)`` reads and checks a grid, ``expand(grid)`` lists its runs (``PlannedRun``: id,
resolved config, axes, parameter counts), ``run_id(config)`` is a run's identity. Importing this package never
imports torch; ``expand`` imports it to count parameters on the meta device.
"""

from __future__ import annotations

from ablate.grid.expand import PlannedRun, expand
from ablate.grid.ids import canonical_json, run_id
from ablate.grid.schema import Axis, Grid, GridFile, load_grid, parse_grid

__all__ = ["Axis", "Grid", "GridFile", "PlannedRun", "canonical_json", "expand", "load_grid", "parse_grid",
           "run_id"]
