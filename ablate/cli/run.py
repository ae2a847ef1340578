"""Planning and running grids: ``ablate plan``, ``ablate schema`` (what a grid can set), ``ablate run`` (on
the executor ``--executor`` names: the local pool, Slurm, Ray) and ``ablate ui``."""

from __future__ import annotations

from pathlib import Path
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
    RayAddressOpt,
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

UntilResolvedOpt = Annotated[bool, typer.Option(
    "--until-resolved", help="train more seeds (--round at a time, up to --max-seeds) in each cell whose "
                             "comparison with its --reference cell is unresolved on --metric, looking again "
                             "with alpha spending; the plan shows the most it can add")]
MaxSeedsOpt = Annotated[int, typer.Option("--max-seeds", help="--until-resolved: the most seeds per cell")]
RoundOpt = Annotated[int,
                     typer.Option("--round", help="--until-resolved: seeds added per open cell per look")]
MetricOpt = Annotated[str, typer.Option("--metric", help="--until-resolved: the metric compared (val_ppl, "
                                                         "f_attn, m_act, massive_ratio, ppl/<set>: any "
                                                         "summary metric)")]
ReferenceOpt = Annotated[str, typer.Option("--reference", help="--until-resolved: the reference variant")]
CompareOpt = Annotated[list[str] | None, typer.Option("--compare", help="--until-resolved: a variant to "
                                                      "resolve (repeat; default: every other variant)")]


def until_resolved_spec(metric: str, reference: str, compare: list[str] | None, max_seeds: int, round_: int):
    from ablate.until_resolved import UntilResolved

    return UntilResolved(metric=metric, reference=reference, compare=tuple(compare or ()),
                         max_seeds=max_seeds, round=round_)


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
    max_seeds: MaxSeedsOpt = 10,
    round_: RoundOpt = 2,
    metric: MetricOpt = "val_ppl",
    reference: ReferenceOpt = "baseline",
    compare: CompareOpt = None,
) -> None:
    """Expand a grid without running it: run ids, parameter counts, estimated peak memory per device, each
    run's status in the store, and the workers `ablate run` would start here (with the same --jobs, --devices,
    --threads); with --until-resolved, the looks and the most runs it can add."""
    from ablate.errors import ConfigError, InputMissingError
    from ablate.grid import expand, load_grid
    from ablate.grid.view import plan_imports, plan_json, plan_rows
    from ablate.runner.fingerprints import Fingerprints
    from ablate.runner.preflight import check_data, check_tokenizers, heldout_warnings
    from ablate.store.plan_status import statuses

    spec = load_grid(grid, sets or ())
    runs = expand(spec, fingerprints=Fingerprints.for_home(home_dir(home)))
    try:  # as `ablate run`: exit 2, but for a tokenizer that is not on this machine (a cluster's grid)
        check_tokenizers(runs, source=spec.source)
    except InputMissingError as exc:
        warn(f"{exc} (`ablate run` stops here)")
    try:  # planning a cluster's grid where its data is not: say so, as `ablate run` would refuse it
        check_data(runs, source=spec.source)
    except ConfigError as exc:
        warn(f"{exc} (`ablate run` stops here)")
    for line in heldout_warnings(runs, source=spec.source):
        warn(line)
    status = statuses(runs, store=store, home=home_dir(home))
    if device_memory is not None:
        from ablate.ablations.memory import parse_memory
        from ablate.execute.fit import FLAG, check_memory

        check_memory(runs, status, parse_memory(device_memory), FLAG)
    slots = _planned_workers(runs, status, jobs=jobs, devices=devices, threads=threads)
    most = None  # --until-resolved's looks and the most runs it can add: checked before anything is printed
    if until_resolved:
        from ablate.until_resolved import most_line, plan_until_resolved

        spec_u = until_resolved_spec(metric, reference, compare, max_seeds, round_)
        most = most_line(plan_until_resolved(grid, sets or (), spec_u, home=home_dir(home))[0])
    if fmt == "json":
        echo_json({**plan_json(spec.name, runs, status),
                   # a run a line
                   "workers": [{"device": s.device, "threads": s.threads} for s in slots]}, flat_from=2)
        return
    table = plan_rows(spec.name, runs, status, matched=spec.match_params, ladder=spec.ladder is not None)
    imported = plan_imports(runs)
    if imported:
        typer.echo(f"imports (plugin arms): {', '.join(imported)}")
    from ablate.cli.views import RICH_ROWS

    if len(runs) > RICH_ROWS:  # a large plan is printed as plain columns
        from ablate.cli.views import text_table

        typer.echo(text_table(*table))
    else:
        from ablate.cli.views import rich_table

        print_wide(rich_table(*table))
    if most is not None:
        typer.echo(most)
    from ablate.execute.devices import crowding, describe, usable_cpus

    cpus = usable_cpus()
    workers = describe(slots) if slots else f"no workers: nothing to train (every run {' or '.join(TRAINED)})"
    typer.echo(f"ablate run here: {workers} ({cpus} CPU{'s' * (cpus != 1)} usable; --jobs, --threads)")
    if slots and (crowded := crowding(slots, cpu_count=cpus)):
        warn(crowded)


TRAINED = ("done", "diverged")  # what `ablate run` does not train again


def _planned_workers(runs, status: dict[str, str], **how):
    """The local workers `ablate run` would start for the runs still to train (never more than them)."""
    from ablate.execute.devices import local_slots

    todo = sum(status.get(r.run_id) not in TRAINED for r in runs)
    per_run = max((r.config.train.devices for r in runs), default=1)
    return local_slots(**how, per_run=per_run)[:todo] if todo else []


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
    ray_address: RayAddressOpt = None,
    partition: Annotated[str | None, typer.Option("--partition", help="slurm: the partition")] = None,
    gpus_per_job: Annotated[int | None, typer.Option("--gpus-per-job", help="slurm: GPUs per run (= "
                                                     "train.devices; 0 = CPU) [default: train.devices if "
                                                     "GPUs here, else 0]")] = None,
    time_limit: Annotated[str | None, typer.Option("--time", help="slurm: time limit per task (MM, HH:MM:SS, "
                                                   "D-HH:MM:SS); a task out of time checkpoints and is "
                                                   "requeued [default: 1-00:00:00]")] = None,
    array_parallelism: Annotated[int | None,
                                 typer.Option("--array-parallelism", help="slurm: tasks at a time")]
    = None,
    slurm_opts: Annotated[list[str] | None, typer.Option("--slurm-opt", help="slurm: K=V, a submitit "
                                                         "parameter (cpus_per_task=8, mem=32G) or any sbatch "
                                                         "flag")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="wait for runs another process is training, then run "
                                       "what they leave (slurm: wait until every run has ended)")] = False,
    store_patience: StorePatienceOpt = None,
    progress_every: Annotated[float, typer.Option("--progress-every", help="without a terminal: a progress "
                                                  "line this often (seconds)")] = 30.0,
    nodes: Annotated[int | None, typer.Option("--nodes", help="slurm: nodes per run (its train.devices "
                                              "processes spread evenly over them)")] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", help="slurm: GPUs per node (= "
                                                      "processes per node; nodes x this = "
                                                      "train.devices)")] = None,
    device_memory: DeviceMemoryOpt = None,
    until_resolved: UntilResolvedOpt = False,
    max_seeds: MaxSeedsOpt = 10,
    round_: RoundOpt = 2,
    metric: MetricOpt = "val_ppl",
    reference: ReferenceOpt = "baseline",
    compare: CompareOpt = None,
    yes: YesOpt = False,
) -> None:
    """Run a grid: train what is new or was cut off, skip what is done. Ctrl-C stops cleanly (twice: at once).
    With --until-resolved: then more seeds where a comparison is still unresolved (docs/CLI.md)."""
    from dataclasses import replace

    from ablate.ablations.memory import parse_memory
    from ablate.execute.executor import RunOptions, check_flags
    from ablate.execute.executor import executor as chosen_executor

    chosen = chosen_executor(executor)  # a misspelled name: one line, before anything else
    own = {k: v for k, v in {"partition": partition, "gpus_per_job": gpus_per_job, "time": time_limit,
                             "array_parallelism": array_parallelism, "slurm_opts": slurm_opts, "nodes": nodes,
                             "gpus_per_node": gpus_per_node, "ray_address": ray_address}.items()
           if v is not None and v != []}
    check_flags(chosen, own)
    spec = until_resolved_spec(metric, reference, compare, max_seeds, round_) if until_resolved else None
    memory = parse_memory(device_memory) if device_memory is not None else None
    options = RunOptions(home=home_dir(home), store=store, executor=executor, jobs=jobs, devices=devices,
                         threads=threads, jobs_per_device=jobs_per_device, retry_failed=retry_failed,
                         **mlflow_target(no_mlflow, mlflow_experiment), wait=wait or spec is not None,
                         append=append,
                         progress_every_s=progress_every, device_memory=memory, own=own,
                         idle_table=spec is None, yes=yes, ask=terminal_ask(), **patience(store_patience))

    def run_round(extra: list[dict] | None = None) -> int:
        return chosen.run(grid, sets or [], replace(options, extra=tuple(extra or ())))

    if spec is None:
        raise typer.Exit(run_round())
    raise typer.Exit(_run_until_resolved(grid, sets or [], spec, run_round, home=home, store=store))


def _run_until_resolved(grid: Path, sets: list[str], spec, run_round, *, home, store) -> int:
    """``ablate run --until-resolved``: rounds of ``run_round`` until the comparisons resolve; the
    verdicts."""
    from ablate.cli.common import open_store
    from ablate.until_resolved import decisions, metric_values, until_resolved, verdict_lines

    def read(run_ids):
        with open_store(home, store) as opened:
            return metric_values(opened, run_ids, spec.metric)

    outcome = until_resolved(grid, sets, spec, home=home_dir(home), read=read, run_round=run_round,
                             say=lambda line: typer.echo(line, err=True))
    decided = decisions(outcome, spec)
    if decided:  # every report reads these comparisons at the look that decided them
        with open_store(home, store) as opened:
            opened.record_decisions(grid=outcome.grid, decisions=decided)
    for line in verdict_lines(outcome, spec):
        typer.echo(line)
    return outcome.exit_code


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
