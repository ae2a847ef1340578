"""Planning and running grids: ``ablate plan``, ``ablate schema`` (what a grid can set), ``ablate run`` (on
the executor ``--executor`` names: the local pool, Slurm, Ray) and ``ablate ui``."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ablate.cli.common import (
    DeviceMemoryOpt,
    DevicesOpt,
    ExecutorOpt,
    GridArg,
    HomeOpt,
    JobsOpt,
    MlflowExperimentOpt,
    NoMlflowOpt,
    SetOpt,
    StoreOpt,
    StorePatienceOpt,
    ThreadsOpt,
    YesOpt,
    app,
    echo_json,
    handles_errors,
    home_dir,
    mlflow_target,
    patience,
    print_wide,
    terminal_ask,
    warn,
)
from ablate.cli.declared import declared
from ablate.execute.registry import declared_options
from ablate.options import Given

EXECUTOR_OPTIONS = [opt for _, opt in declared_options()]

UntilResolvedOpt = Annotated[bool, typer.Option(
    "--until-resolved", help="train more seeds (--round at a time, up to --max-seeds) in each cell whose "
                             "comparison with its --reference cell is unresolved on --metric, looking again "
                             "with alpha spending; the plan shows the most it can add")]
MaxSeedsOpt = Annotated[int, typer.Option("--max-seeds", help="--until-resolved: the most seeds per cell")]
RoundOpt = Annotated[int,
                     typer.Option("--round", help="--until-resolved: seeds added per open cell per look")]
MetricOpt = Annotated[str | None, typer.Option(
    "--metric", help="--until-resolved: the metric compared (default: a command grid's objective, else "
                     "val_ppl; f_attn, m_act, massive_ratio, ppl/<set>: any summary metric, or one a command "
                     "reports)")]
ReferenceOpt = Annotated[str, typer.Option("--reference", help="--until-resolved: the reference variant")]
CompareOpt = Annotated[list[str] | None, typer.Option("--compare", help="--until-resolved: a variant to "
                                                      "resolve (repeat; default: every other variant)")]
# --until-resolved's defaults: its settings' own (ablate.resolve.UntilResolved; a test holds them equal)
MAX_SEEDS, ROUND, METRIC, REFERENCE = 10, 2, None, "baseline"


@app.command()
@handles_errors
def plan(
    grid: GridArg,
    sets: SetOpt = None,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    home: HomeOpt = None,
    store: StoreOpt = None,
    device_memory: DeviceMemoryOpt = None,
    jobs: JobsOpt = None,
    devices: DevicesOpt = None,
    threads: ThreadsOpt = None,
    until_resolved: UntilResolvedOpt = False,
    max_seeds: MaxSeedsOpt = MAX_SEEDS,
    round_: RoundOpt = ROUND,
    metric: MetricOpt = METRIC,
    reference: ReferenceOpt = REFERENCE,
    compare: CompareOpt = None,
) -> None:
    """Expand a grid without running it: run ids, parameter counts, estimated peak memory per device, each
    run's status in the store, and the workers `ablate run` would start here (with the same --jobs, --devices,
    --threads); with --until-resolved, the looks and the most runs it can add."""
    from ablate.ablations.memory import parse_memory
    from ablate.cli.views import RICH_ROWS, rich_table, text_table
    from ablate.resolve import UntilResolved, preview

    until = (UntilResolved(metric, reference, tuple(compare or ()), max_seeds, round_) if until_resolved
             else None)
    memory = None if device_memory is None else parse_memory(device_memory)
    planned = preview(grid, sets or (), home=home_dir(home), store=store, jobs=jobs, devices=devices,
                      threads=threads, device_memory=memory, until=until, warn=warn)
    if fmt == "json":
        echo_json(planned.json(), flat_from=2)  # a run a line
        return
    if imported := planned.imports():
        typer.echo(f"imports (plugin arms): {', '.join(imported)}")
    title, columns, rows = planned.table()
    if len(rows) > RICH_ROWS:  # a large plan is printed as plain columns
        typer.echo(text_table(title, columns, rows))
    else:
        print_wide(rich_table(title, columns, rows))
    if planned.most is not None:
        typer.echo(planned.most)
    line, crowded = planned.workers()
    typer.echo(line)
    if crowded:
        warn(crowded)


@app.command()
@handles_errors
def schema(
    field: Annotated[str | None, typer.Argument(
        help="a field or section by dotted path (data, data.train, train.lr); every field when left out",
        show_default=False)] = None,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
) -> None:
    """What a grid file can set: every field by dotted path, its type, default, allowed values and meaning,
    read from the config models themselves. Run config fields go in base, on an axis, in include or --set."""
    from ablate.grid.fields import find, schema_fields

    rows = schema_fields()
    if field is not None:
        rows = find(rows, field)
    if fmt == "json":
        echo_json([r.as_dict() for r in rows])
        return
    from rich.markup import escape

    from ablate.cli.views import rich_table

    columns = [(c, "left") for c in ("field", "type", "default", "allowed", "meaning")]
    # escaped: a meaning may read "[eos] + prompt", which is not markup
    cells = [[escape(c) for c in (r.path, r.type, r.default, r.allowed, r.description)] for r in rows]
    title = f"grid file fields{f' under {field}' if field else ''}: {len(rows)}"
    print_wide(rich_table(title, columns, cells))


@app.command()
@handles_errors
@declared(declared_options(), after="executor")
def run(
    grid: GridArg,
    sets: SetOpt = None,
    jobs: JobsOpt = None,
    devices: DevicesOpt = None,
    threads: ThreadsOpt = None,
    jobs_per_device: Annotated[int,
                               typer.Option("--jobs-per-device", help="small jobs packed onto each GPU")] = 1,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="run failed runs again (from their "
                                               "last checkpoint)")] = False,
    append: Annotated[bool, typer.Option("--append", help="the store holds a grid of this name with another "
                                         "base, and this is the same study grown: its runs so far stay in "
                                         "it, as runs of an older configuration (without it such a grid is "
                                         "refused)")] = False,
    no_mlflow: NoMlflowOpt = False,
    mlflow_experiment: MlflowExperimentOpt = None,
    home: HomeOpt = None,
    store: StoreOpt = None,
    executor: ExecutorOpt = "local",
    wait: Annotated[bool, typer.Option("--wait", help="wait for runs another process is training, then run "
                                       "what they leave (slurm: wait until every run has ended)")] = False,
    store_patience: StorePatienceOpt = None,
    progress_every: Annotated[float, typer.Option("--progress-every", help="without a terminal: a progress "
                                                  "line this often (seconds)")] = 30.0,
    device_memory: DeviceMemoryOpt = None,
    until_resolved: UntilResolvedOpt = False,
    max_seeds: MaxSeedsOpt = MAX_SEEDS,
    round_: RoundOpt = ROUND,
    metric: MetricOpt = METRIC,
    reference: ReferenceOpt = REFERENCE,
    compare: CompareOpt = None,
    yes: YesOpt = False,
    **own: Given,
) -> None:
    """Run a grid: train what is new or was cut off, skip what is done. Ctrl-C stops cleanly (twice: at once).
    With --until-resolved: then more seeds where a comparison is still unresolved (docs/CLI.md)."""
    from ablate.ablations.memory import parse_memory
    from ablate.execute.executor import RunOptions
    from ablate.execute.executor import executor as chosen
    from ablate.options import given
    from ablate.resolve import UntilResolved, run_until_resolved

    chosen(executor)  # a misspelled name: one line, before anything else
    until = (UntilResolved(metric, reference, tuple(compare or ()), max_seeds, round_) if until_resolved
             else None)
    options = RunOptions(home=home_dir(home), store=store, executor=executor, jobs=jobs, devices=devices,
                         threads=threads, jobs_per_device=jobs_per_device, retry_failed=retry_failed,
                         **mlflow_target(no_mlflow, mlflow_experiment), wait=wait, append=append,
                         progress_every_s=progress_every, own=given(EXECUTOR_OPTIONS, own),
                         device_memory=None if device_memory is None else parse_memory(device_memory),
                         yes=yes, ask=terminal_ask(), **patience(store_patience))
    raise typer.Exit(run_until_resolved(grid, sets or [], options, until,
                                        say=lambda line: typer.echo(line, err=True), warn=warn,
                                        echo=typer.echo))


@app.command()
@handles_errors
def ui(
    port: Annotated[int, typer.Option("--port", help="port on 127.0.0.1")] = 5000,
    grid: Annotated[str | None, typer.Option(
        "--grid", help="the grid whose runs the UI opens on [default: the one that changed last]")] = None,
    home: HomeOpt = None,
) -> None:
    """MLflow's UI over this home's tracking store, on 127.0.0.1, opened on a grid's runs (Ctrl-C or SIGTERM
    stops it and its workers)."""
    from ablate.cli.serve import serve, ui_command
    from ablate.store.mlflow_mirror import grid_page, tracking_uri

    cmd = ui_command(home_dir(home), port=port)
    page, name = grid_page(tracking_uri(home_dir(home)), grid)
    shows = f"grid {name}'s runs" if name else "no grid's runs yet"
    typer.echo(f"MLflow UI on http://127.0.0.1:{port}/{page} ({shows}; Ctrl-C stops it)", err=True)
    raise typer.Exit(serve(cmd))
