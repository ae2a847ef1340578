"""Learning-rate search with Optuna: ``ablate tune``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.cli.common import (
    GRID_HELP,
    DeviceMemoryOpt,
    DevicesOpt,
    ExecutorOpt,
    HomeOpt,
    JobsOpt,
    MlflowExperimentOpt,
    SetOpt,
    StoreOpt,
    StorePatienceOpt,
    ThreadsOpt,
    app,
    grid_file,
    handles_errors,
    home_dir,
    mlflow_target,
    open_store,
    patience,
)
from ablate.cli.declared import declared
from ablate.execute.registry import declared_options
from ablate.options import Given

EXECUTOR_OPTIONS = [opt for _, opt in declared_options(rounds=True)]  # the executors that deal rounds


@app.command("tune")
@handles_errors
@declared(declared_options(rounds=True), after="executor")
def tune_cmd(
    grid: Annotated[Path | None, typer.Argument(help=f"{GRID_HELP}; not needed with --dashboard",
                                                show_default=False, callback=grid_file)] = None,
    param: Annotated[str,
                     typer.Option("--param", help="the config field to tune, by dotted path")] = "train.lr",
    low: Annotated[float | None, typer.Option("--low", help="lower end of the search range")] = None,
    high: Annotated[float | None, typer.Option("--high", help="upper end of the search range")] = None,
    log: Annotated[bool, typer.Option("--log", help="search on a log scale (learning rates)")] = False,
    trials: Annotated[int,
                      typer.Option("--trials",
                                   help="trials per study in all (a rerun adds the missing ones)")]
    = 10,
    metric: Annotated[str | None,
                      typer.Option("--metric", help="what is searched: val_ppl (the default), train_loss, "
                                                    "ppl/<set>; on a command grid its objective by default")]
    = None,
    pruner: Annotated[str, typer.Option("--pruner", help="median (median:N waits for N trials), hyperband, "
                                        "threshold:X or none")] = "median",
    tolerance: Annotated[float, typer.Option("--tolerance", help="stable = not diverged and metric within "
                                             "this fraction of the best")] = 0.05,
    then_run: Annotated[bool, typer.Option("--then-run", help="then run the grid's seeds at each cell's best "
                                           "value (grid '<grid>/tuned')")] = False,
    find_max_stable: Annotated[bool, typer.Option("--find-max-stable", help="bisect for each cell's largest "
                                                  "stable value between the trials' stable and unstable "
                                                  "ones")] = False,
    stable_steps: Annotated[int,
                            typer.Option("--stable-steps", help="probes of --find-max-stable per cell")] = 4,
    dashboard: Annotated[bool, typer.Option("--dashboard", help="serve optuna-dashboard over the store on "
                                            "127.0.0.1 instead of tuning (needs optuna-dashboard)")] = False,
    port: Annotated[int, typer.Option("--port", help="the dashboard's port on 127.0.0.1")] = 8080,
    sets: SetOpt = None,
    executor: ExecutorOpt = "local",
    jobs: JobsOpt = None,
    devices: DevicesOpt = None,
    threads: ThreadsOpt = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not mirror the trials and --then-run "
                                            "runs into MLflow")]
    = False,
    mlflow_experiment: MlflowExperimentOpt = None,
    home: HomeOpt = None,
    store: StoreOpt = None,
    store_patience: StorePatienceOpt = None,
    device_memory: DeviceMemoryOpt = None,
    **own: Given,
) -> None:
    """Search a parameter (the learning rate) per grid cell with Optuna; report each variant's best and
    largest stable value; --then-run compares the variants at their best. Studies live in the results
    store."""
    from ablate.errors import ConfigError

    if dashboard:
        from ablate.tune.dashboard import dashboard_module, serve

        dashboard_module()  # a clear error before anything else when it is not installed
        with open_store(home, store) as opened:
            typer.echo(f"optuna-dashboard on http://127.0.0.1:{port} (Ctrl-C stops it)", err=True)
            try:
                serve(opened, port=port)
            except KeyboardInterrupt:
                pass
        return
    if grid is None:
        raise ConfigError("give the grid file to tune (or --dashboard)", where="GRID")
    from ablate.ablations.memory import parse_memory
    from ablate.execute.executor import executor as chosen_executor
    from ablate.options import given
    from ablate.tune.search import TuneOptions, tune

    chosen_executor(executor)  # a misspelled name: one line, before anything else
    from ablate.tune.summary import print_summary

    options = TuneOptions(param=param, low=low, high=high, log=log, trials=trials, metric=metric,
                          pruner=pruner, tolerance=tolerance, then_run=then_run,
                          find_max_stable=find_max_stable, stable_steps=stable_steps, home=home_dir(home),
                          store=store, executor=executor, jobs=jobs, devices=devices, threads=threads,
                          own=given(EXECUTOR_OPTIONS, own),
                          **mlflow_target(no_mlflow, mlflow_experiment),
                          **patience(store_patience),
                          device_memory=None if device_memory is None else parse_memory(device_memory))
    report = tune(grid, sets or [], options)
    print_summary(report, param)
    if report.tuned is not None:
        from ablate.execute.grid_run import print_summary as print_grid_summary

        print_grid_summary(report.tuned)
    raise typer.Exit(report.exit_code)
