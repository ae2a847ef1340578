"""``ablate run``'s executor: store lookups, a local pool of long-lived worker processes, MLflow mirroring.

``run_grid(path, sets, RunOptions(...)) -> GridReport`` is the entry point; ``print_summary`` draws its table.
Importing this package never imports torch (the workers do).
"""

from ablate.execute.grid_run import GridReport, RunOptions, print_summary, run_grid

__all__ = ["GridReport", "RunOptions", "print_summary", "run_grid"]
