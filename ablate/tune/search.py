"""``ablate tune``: one Optuna study per cell of a grid, its trials trained as ordinary runs, then the
protocol. The grid is one of ablate's own model or a command grid (``trainer:``): ``ablate.tune.trials`` says
what a trial is for each (the tuned parameter, the metric and its direction, the job that reports to the
pruner).

1. Plan the grid (``ablate.grid.planning.plan_grid``); group its runs into cells (``space.cells_of``:
   everything but the seed and the tuned parameter); open each cell's study in the store's database
   (``studies.open_study``: created once, continued after). ``--trials N`` is the total per study: finished
   and pruned trials count, so a rerun adds only what is missing, and resumes a trial that was cut off (its
   run resumes from its checkpoint).
2. Rounds of as many trials as there are workers, round-robin over the studies: ask each study for a value,
   build the run (the cell's first seed, the value set), register it under ``<grid>/tune``, and train it on
   the executor ``--executor`` names (``execute.trial_runner``: the local pool, Ray tasks) with the trials'
   job, which reports to the pruner, unless the store already has that run finished (the same sampled config
   is the same run id: its stored result is told instead). Then tell each study how its trial ended.
3. ``--find-max-stable``: per cell, bisect between the largest stable and the smallest unstable value seen
   (``protocol.Bracket``), ``--stable-steps`` probes in all (a rerun does not repeat them).
4. ``--then-run``: the grid's seeds of every cell at its best value, as the grid ``<grid>/tuned`` (a grid file
   written under ``$ABLATE_HOME/tune/``, run by ``ablate run``'s executor).

Trials run at the cell's first seed. When a grid of ablate's model does not evaluate during training
(``eval.every: 0``) and a pruner is on, trials evaluate every ``steps // 10`` steps (so pruning has something
to read); their run ids then differ from the grid's own runs. A command trial reports every value of the
metric its command prints, and a pruned one has its command's process group stopped.

``--then-run`` is for grids of ablate's own model (its ``tuned`` grid file is one of them).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rich.console import Console

from ablate.errors import ConfigError, StoreError
from ablate.execute.executor import Expanded, RunOptions, Session, check_flags, executor
from ablate.execute.opening import planning
from ablate.execute.recorder import stops_when_away
from ablate.grid import Grid
from ablate.grid.planning import plan_grid
from ablate.runner.fingerprints import Fingerprints
from ablate.store import Store
from ablate.store.engine import display_url
from ablate.tune.execute import trial_runner
from ablate.tune.options import TuneOptions, TuneReport
from ablate.tune.space import SearchSpace, TuneCell, cells_of
from ablate.tune.storage import optuna_storage, parse_pruner
from ablate.tune.trials import Trials, trials_for
from ablate.tune.tuner import Tuner

__all__ = ["TuneOptions", "TuneReport", "tune"]

log = logging.getLogger(__name__)


def tune(path: str | Path, sets: list[str] | tuple[str, ...] = (),
         options: TuneOptions | None = None) -> TuneReport:
    """Tune ``options.param`` per cell of the grid at ``path``; see the module docstring."""
    opts = options or TuneOptions()
    chosen = executor(opts.executor)
    check_flags(chosen, opts.own)
    t0 = time.monotonic()
    if opts.low is None or opts.high is None:
        raise ConfigError("give the range to search: --low and --high (e.g. --low 1e-4 --high 3e-2 --log)",
                          where="ablate tune")
    if opts.trials < 1:
        raise ConfigError(f"{opts.trials} trials asked for; allowed: 1 or more", where="--trials")
    if opts.tolerance < 0:
        raise ConfigError(f"a tolerance of {opts.tolerance:g}; allowed: 0 or more", where="--tolerance")
    pruner = parse_pruner(opts.pruner)
    with planning():  # Ctrl-C while a large grid plans: one line, exit 130
        fingerprints = Fingerprints.for_home(Path(opts.home))
        plan = plan_grid(path, sets, fingerprints=fingerprints)
    grid, planned = plan.grid, plan.planned
    if not planned:
        raise ConfigError("the grid has no runs", where=str(path))
    trials = trials_for(plan, opts.metric, pruner)
    space = trials.space(opts.param, float(opts.low), float(opts.high), opts.log)
    if grid.match_params is not None and space.param.startswith("model."):
        raise ConfigError(f"cannot tune the model field {space.param!r} of a grid with match_params",
                          where="--param")
    if opts.then_run and plan.command is not None:
        raise ConfigError("--then-run is for grids of ablate's own model; on a command grid, set each arm's "
                          "best value (the table's) in the grid file and `ablate run` it", where="--then-run")
    cells = cells_of(planned, space.param)
    most = max(1, opts.trials * len(cells))  # never more workers than trials
    home = Path(opts.home)
    console = opts.console or Console(stderr=True)
    run_options = RunOptions(home=home, store=opts.store, executor=opts.executor, jobs=opts.jobs,
                             devices=opts.devices, jobs_per_device=opts.jobs_per_device, threads=opts.threads,
                             device_memory=opts.device_memory, own=dict(opts.own))
    # the executor's checks (the memory check among them) before any study or trial is made
    expanded = Expanded(Path(path), grid, planned, fingerprints, joins=True, trainer=plan.trainer)
    with chosen.session(expanded, run_options) as session:
        if (crowded := session.describe(most)[1]):
            console.print(f"[yellow]warning:[/] {crowded}", highlight=False, soft_wrap=True)
        return _tune_on(session, grid, cells, space, trials, pruner, opts, most, console, t0)


def _tune_on(session: Session, grid: Grid, cells: list[TuneCell], space: SearchSpace, trials: Trials,
             pruner: str, opts: TuneOptions, most: int, console: Console, t0: float) -> TuneReport:
    """``tune``'s studies and rounds on an executor's ``session``."""
    home = Path(opts.home)
    store = Store.open(opts.store, home=home)
    resume = ("when the store is back, run the same command again: the studies resume, and trials that "
              f"finished meanwhile are read from {home / 'runs'}, not trained again")
    # between trials (Optuna's ask and tell, registering runs) the store going away is one line, as for
    # `ablate run`
    try:
        with stops_when_away(display_url(store.url), doing="while tuning", then=resume):
            tuner = Tuner(grid, cells, space, trials, pruner, opts, store, optuna_storage(store.url), console)
            with trial_runner(session, home=home, store=store, title=f"{grid.name}/tune", console=console,
                              metric=trials.metric, mlflow=opts.mlflow,
                              mlflow_experiment=opts.mlflow_experiment,
                              store_patience_s=opts.store_patience_s, jobs=most,
                              job_fn=trials.job_fn) as pool:
                tuner.search(pool)
                if opts.find_max_stable and not pool.interrupted:
                    tuner.bracket(pool)
                tuner.report.interrupted = pool.interrupted
            # the store stayed away past --store-patience while trials trained
            if pool.store_error is not None:
                raise StoreError(f"{pool.store_error}; {resume}")
            tuner.summarize()
            if opts.then_run and not tuner.report.interrupted:
                tuner.then_run()
    finally:
        store.close()
    tuner.report.wall_s = time.monotonic() - t0
    return tuner.report
