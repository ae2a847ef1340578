"""``ablate run``'s executors: the shared run lifecycle, the opening every executor does, and one subpackage
per executor (``local``, ``slurm``, ``ray``) behind one protocol (``executor.Executor``, ``EXECUTORS``).

``run_grid(path, sets, RunOptions(...)) -> GridReport`` runs a grid on an executor that trains in rounds;
``print_summary`` draws its table. Importing this package never imports torch (the workers do) nor Ray.
"""

from ablate.execute.executor import EXECUTORS, RunOptions, executor
from ablate.execute.grid_run import GridReport, print_summary, run_grid

__all__ = ["EXECUTORS", "GridReport", "RunOptions", "executor", "print_summary", "run_grid"]
