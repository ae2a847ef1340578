"""``ablate run``'s executors: the shared run lifecycle, the opening every executor does, and one subpackage
per executor (``local``, ``slurm``, ``ray``) behind one protocol (``executor.Executor``), chosen by name from
``registry.EXECUTORS``.

``grid_run.run_grid(path, sets, RunOptions(...)) -> GridReport`` runs a grid on an executor that trains in
rounds; ``grid_run.print_summary`` draws its table. Importing this package imports nothing: the command line
reads the executors' declared options (``registry``) at start-up, and ``ablate --help`` stays light.
"""
