"""The ``ablate`` command line: thin Typer commands, each a few lines calling into the library.

Heavy modules (torch, Lightning, MLflow, pandas, matplotlib) are imported inside the commands, so ``ablate --help``
answers at once. Library errors (``AblateError``) become one red line on stderr and their exit status here, and
only here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer

from ablate import __version__
from ablate.errors import AblateError

app = typer.Typer(
    name="ablate",
    help="Architecture ablation studies of attention gating: grids -> runs -> a SQL store -> the paper's tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The results store's schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int) -> typer.Exit:
    """Print ``error: message`` as one red line on stderr and return the Exit to raise."""
    click.secho(f"error: {' '.join(str(message).split())}", fg="red", err=True)
    return typer.Exit(code)


def handles_errors(fn: F) -> F:
    """Turn the library's ``AblateError`` into one line and its exit status (2 for the user's input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AblateError as exc:
            raise fail(str(exc), exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------- shared options (defined once)
HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", envvar="ABLATE_HOME", help="run directories and default stores [default: ./ablate-runs]"),
]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="ABLATE_STORE", help="results store URL [default: sqlite:///$ABLATE_HOME/ablate.db]"),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a field of the grid's base: K=V, dotted path, YAML scalar value"),
]
GridArg = Annotated[Path, typer.Argument(help="grid file (YAML)", show_default=False)]


def home_dir(home: Path | None) -> Path:
    """The ABLATE_HOME in force: the option, else the environment, else ./ablate-runs."""
    return Path(home or os.environ.get("ABLATE_HOME") or "ablate-runs")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ablate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """ablate: architecture ablation studies of attention gating."""


# ---------------------------------------------------------------- model zoo: variants
@app.command()
@handles_errors
def variants(
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
    preset: Annotated[
        str | None, typer.Option("--preset", help="also show the parameters each variant adds at this preset")
    ] = None,
) -> None:
    """The variant catalogue: names, what each changes, and the paper rows it reproduces."""
    from ablate.ablations.variants import VARIANTS
    from ablate.errors import ConfigError, one_of

    if fmt not in ("table", "json"):
        raise ConfigError(one_of(fmt, ["table", "json"], what="format"), where="--format")
    rows = [v.as_dict() for v in VARIANTS.values()]
    if preset is not None:
        from ablate.ablations.config import ModelConfig
        from ablate.ablations.params import added_params
        from ablate.ablations.presets import PRESETS

        if preset not in PRESETS:
            raise ConfigError(one_of(preset, PRESETS, what="preset"), where="--preset")
        base = ModelConfig(preset=preset)
        for row in rows:
            row["added_params"] = None if row["requires_moe"] and not base.is_moe else added_params(base, row["name"])
    if fmt == "json":
        import json

        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ablate variants")
    table.add_column("variant", no_wrap=True, style="bold")
    for col in ("paper rows", "act", "score shape", "description"):
        table.add_column(col)
    if preset is not None:
        table.add_column(f"added @ {preset}", justify="right")
    for row in rows:
        cells = [row["name"], " ".join(row["paper"]) or "-", row["act_func"], row["score_shape"], row["description"]]
        if preset is not None:
            cells.append("-" if row["added_params"] is None else f"{row['added_params'] / 1e6:,.2f}M")
        table.add_row(*cells)
    Console().print(table)



# ---------------------------------------------------------------- grid: plan
@app.command()
@handles_errors
def plan(
    grid: GridArg,
    sets: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Expand a grid without running it: run ids, parameter counts, and each run's status in the store."""
    from ablate.errors import ConfigError, one_of
    from ablate.grid import expand, load_grid
    from ablate.grid.view import plan_json, plan_table, statuses

    if fmt not in ("table", "json"):
        raise ConfigError(one_of(fmt, ["table", "json"], what="format"), where="--format")
    spec = load_grid(grid, sets or ())
    runs = expand(spec)
    status = statuses([r.run_id for r in runs], store=store, home=home_dir(home))
    if fmt == "json":
        import json

        typer.echo(json.dumps(plan_json(spec.name, runs, status), indent=2))
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped: print whole rows rather than the 80 columns rich assumes
        console = Console(width=1000)
    console.print(plan_table(spec.name, runs, status, matched=spec.match_params))


# ---------------------------------------------------------------- store: runs, status, ingest, db upgrade
GridNameOpt = Annotated[str | None, typer.Option("--grid", help="only the runs of this grid (by its name)")]
WHERE_HELP = (
    "keep the runs for which this is true: comparisons (== != < <= > >= in, not in, is None) joined by "
    "and/or/not over run columns, e.g. \"variant == 'sdpa-elementwise' and train.lr >= 0.004\"; config fields by "
    "dotted path; names with '/' bare (ppl/code < 20) or as col('bench/arc-e'); a missing value compares false"
)


def _open_store(home: Path | None, store: str | None) -> Any:
    """Open the store, printing its warnings (e.g. SQLite on a network file system) on stderr."""
    from ablate.store import Store

    opened = Store.open(store, home=home_dir(home))
    for warning in opened.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    return opened


def _check_format(fmt: str, allowed: list[str]) -> None:
    from ablate.errors import ConfigError, one_of

    if fmt not in allowed:
        raise ConfigError(one_of(fmt, allowed, what="format"), where="--format")


@app.command("runs")
@handles_errors
def runs_cmd(
    grid: GridNameOpt = None,
    where: Annotated[str | None, typer.Option("--where", help=WHERE_HELP)] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or markdown (csv/json: every column)")]
    = "table",
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """One row per run: status, summary numbers, PPL per held-out set, benchmark scores, every config field.

    table and markdown show the measured columns (empty ones dropped); csv and json add the config fields.
    """
    from ablate.store import render

    _check_format(fmt, ["table", "csv", "json", "markdown"])
    with _open_store(home, store) as opened:
        frame = opened.runs_frame(grid=grid, where=where)
    if fmt == "json":
        typer.echo(render.to_json(frame))
    elif fmt == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "markdown":
        typer.echo(render.to_markdown(frame[render.summary_columns(frame)]))
    else:
        from pandas.api.types import is_numeric_dtype
        from rich.console import Console
        from rich.table import Table

        cols = render.summary_columns(frame)
        cells = [[render.text(v) for v in row] for row in frame[cols].itertuples(index=False)]
        table = Table(title=f"runs{f' of {grid}' if grid else ''}: {len(frame)}")
        for c in cols:
            table.add_column(c, no_wrap=True, justify="right" if is_numeric_dtype(frame[c]) else "left")
        for row in cells:
            table.add_row(*row)
        # never squeeze columns into '…': a wide table is wider than the terminal (pipe it to `less -S`)
        width = sum(max([len(c), *(len(r[i]) for r in cells)]) + 3 for i, c in enumerate(cols)) + 1
        console = Console()
        Console(width=max(console.width, width)).print(table)


@app.command("status")
@handles_errors
def status_cmd(
    grid: GridNameOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
    stale_after: Annotated[
        float, typer.Option("--stale-after", help="seconds without a heartbeat after which a running run is stale")
    ] = 300.0,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Runs by status per grid, what is running now, and running runs whose heartbeat went stale."""
    _check_format(fmt, ["table", "json"])
    with _open_store(home, store) as opened:
        summary = opened.status_summary(grid, stale_after_s=stale_after)
        from ablate.runner.executor.slurm_queue import slurm_rows  # runs in Slurm jobs, with squeue's state

        summary["slurm"] = slurm_rows(opened, grid)
    if fmt == "json":
        import json

        typer.echo(json.dumps(summary, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    from ablate.store.schema import STATUSES

    console = Console()
    table = Table(title="runs by status")
    for col in ("grid", *STATUSES, "total"):
        table.add_column(col, justify="left" if col == "grid" else "right")
    for row in summary["grids"]:
        table.add_row(row["grid"] or "(no grid)", *(str(row[s]) for s in (*STATUSES, "total")))
    console.print(table)
    if summary["running"]:
        table = Table(title="running")
        for col in ("run_id", "variant", "seed", "host", "device", "step", "heartbeat age"):
            table.add_column(col)
        for r in summary["running"]:
            age = "-" if r["age_s"] is None else f"{r['age_s']:.0f}s" + (" STALE" if r["stale"] else "")
            table.add_row(r["run_id"], r["variant"], str(r["seed"]), r["host"] or "-", r["device"] or "-",
                          "-" if r["step"] is None else str(r["step"]), age)
        console.print(table)
    if summary["slurm"]:
        table = Table(title="in Slurm")
        for col in ("run_id", "grid", "variant", "seed", "status", "slurm job", "slurm state"):
            table.add_column(col)
        for r in summary["slurm"]:
            table.add_row(r["run_id"], r["grid"] or "-", r["variant"], str(r["seed"]), r["status"],
                          r["slurm_job_id"], r["slurm_state"] or "-")
        console.print(table)
    if summary["stale"]:
        click.secho(f"{len(summary['stale'])} running run(s) have no heartbeat for over {stale_after:.0f}s "
                    f"(worker gone?): {', '.join(summary['stale'])}", fg="yellow", err=True)


@app.command("ingest")
@handles_errors
def ingest_cmd(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="run directories (holding result.json), or directories of them",
                                   show_default=False)
    ],
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Read finished runs' result.json into the store (idempotent: ingesting twice changes nothing)."""
    from ablate.errors import StoreError
    from ablate.result import RESULT_FILE

    failed = 0
    with _open_store(home, store) as opened:
        for given in run_dirs:
            found = [given] if given.is_file() or (given / RESULT_FILE).is_file() else sorted(
                p.parent for p in given.glob(f"*/{RESULT_FILE}"))
            if not found:
                found = [given]  # let ingest say what is missing
            for path in found:
                try:
                    run_id = opened.ingest(path)
                except StoreError as exc:
                    failed += 1
                    click.secho(f"error: {' '.join(str(exc).split())}", fg="red", err=True)
                    continue
                typer.echo(f"ingested {run_id} from {path}")
    if failed:
        raise typer.Exit(1)


@db_app.command("upgrade")
@handles_errors
def db_upgrade_cmd(home: HomeOpt = None, store: StoreOpt = None) -> None:
    """Apply the store's schema migrations (opening the store does this too)."""
    from ablate.store.api import upgrade_store
    from ablate.store.engine import display_url

    url, before, after, warnings = upgrade_store(store, home=home_dir(home))
    for warning in warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    change = f"upgraded from {before or 'empty'} to {after}" if before != after else f"already at {after}"
    typer.echo(f"{display_url(url)}: schema {change}")


# ---------------------------------------------------------------- executor: run, ui
@app.command()
@handles_errors
def run(
    grid: GridArg,
    sets: SetOpt = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="workers (CPU: they split the cores) [default: 1 "
                                             "on CPU, one per GPU]")] = None,
    devices: Annotated[str | None, typer.Option("--devices", help="cpu, cuda, or a comma list of GPU indices "
                                                "[default: every GPU, else cpu]")] = None,
    jobs_per_device: Annotated[int, typer.Option("--jobs-per-device", help="small jobs packed onto each GPU")] = 1,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="run failed runs again (from their "
                                               "last checkpoint)")] = False,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not mirror runs into MLflow")] = False,
    home: HomeOpt = None,
    store: StoreOpt = None,
    executor: Annotated[str, typer.Option("--executor", help="local (worker pool here) or slurm (one job array)")]
    = "local",
    partition: Annotated[str | None, typer.Option("--partition", help="slurm: the partition")] = None,
    gpus_per_job: Annotated[int | None, typer.Option("--gpus-per-job", help="slurm: GPUs per run (= train.devices; "
                                                     "0 = CPU) [default: train.devices if GPUs here, else 0]")] = None,
    time_limit: Annotated[str, typer.Option("--time", help="slurm: time limit per task (MM, HH:MM:SS, D-HH:MM:SS); "
                                            "a task out of time checkpoints and is requeued")] = "1-00:00:00",
    array_parallelism: Annotated[int | None, typer.Option("--array-parallelism", help="slurm: tasks at a time")]
    = None,
    slurm_opts: Annotated[list[str] | None, typer.Option("--slurm-opt", help="slurm: K=V, a submitit parameter "
                                                         "(cpus_per_task=8, mem=32G) or any sbatch flag")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="slurm: wait until every run has ended")] = False,
) -> None:
    """Run a grid: train what is new or was cut off, skip what is done. Ctrl-C stops cleanly (twice: at once)."""
    if executor != "local":
        raise typer.Exit(_run_slurm(grid, sets, executor, home=home, store=store, partition=partition,
                                    gpus_per_job=gpus_per_job, time_limit=time_limit, wait=wait,
                                    array_parallelism=array_parallelism, slurm_opts=slurm_opts,
                                    retry_failed=retry_failed))
    from ablate.runner.executor import RunOptions, print_summary, run_grid

    options = RunOptions(home=home_dir(home), store=store, jobs=jobs, devices=devices,
                         jobs_per_device=jobs_per_device, retry_failed=retry_failed, mlflow=not no_mlflow)
    report = run_grid(grid, sets or [], options)
    print_summary(report)
    raise typer.Exit(report.exit_code)


@app.command()
@handles_errors
def ui(
    port: Annotated[int, typer.Option("--port", help="port on 127.0.0.1")] = 5000,
    home: HomeOpt = None,
) -> None:
    """MLflow's UI over this home's tracking store, on 127.0.0.1 (Ctrl-C stops it)."""
    import subprocess

    from ablate.store.mlflow_mirror import ui_command

    cmd = ui_command(home_dir(home), port=port)
    typer.echo(f"MLflow UI on http://127.0.0.1:{port} (Ctrl-C stops it)", err=True)
    try:
        code = subprocess.call(cmd)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code if code >= 0 else 0)




# ---------------------------------------------------------------- reports: report
REPORT_TARGETS = ("table1", "table2", "table3", "table4", "table5", "table6", "lr", "figures", "all")


@app.command("report")
@handles_errors
def report_cmd(
    target: Annotated[str, typer.Argument(help="table1..table6, lr (ablate tune's table), figures (PNG files) or all (HTML page + files)",
                                          show_default=False)],
    grid: Annotated[str | None, typer.Option("--grid", help="the grid to report (if not given: the store's only grid)")] = None,
    paper: Annotated[bool, typer.Option("--paper", help="add the paper's own number beside each measured one")] = False,
    fmt: Annotated[str, typer.Option("--format", help="markdown, latex, csv or html (tables)")] = "markdown",
    out: Annotated[Path | None, typer.Option("--out", help="file for a table (if not given: stdout); "
                                                           "directory for figures/all (if not given: ./report)")] = None,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Rebuild the paper's tables and figures from a grid's runs (mean ± std over seeds, deltas with bootstrap CIs)."""
    from ablate.errors import ConfigError, one_of

    if target not in REPORT_TARGETS:
        raise ConfigError(one_of(target, REPORT_TARGETS, what="report"), where="TABLE")
    _check_format(fmt, ["markdown", "latex", "csv", "html"])
    from ablate import reports

    with _open_store(home, store) as opened:
        if target in ("figures", "all"):
            out_dir = out or Path("report")
            if target == "figures":
                written = [str(p) for p in reports.report_figures(opened, out_dir, grid=grid).values()]
            else:
                written = [str(p) for p in reports.report_all(opened, out_dir, grid=grid, paper=paper).values()]
            typer.echo(f"wrote {len(written)} files to {out_dir}" + (f": {out_dir / 'report.html'}"
                                                                    if target == "all" else ""))
            return
        text = reports.report_table(opened, target, grid=grid, paper=paper, fmt=fmt)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)


# ---------------------------------------------------------------- benchmarks and interop: export


def _save_hf_tokenizer(tokenizer: Any, out: Path) -> bool:
    """Write ``tokenizer`` into ``out`` when it is a Hugging Face one (a trained BPE or ``hf:<name>``)."""
    inner = getattr(tokenizer, "_tok", None)
    if inner is None:
        return False
    import tokenizers

    if isinstance(inner, tokenizers.Tokenizer):
        from transformers import PreTrainedTokenizerFast

        eos = inner.id_to_token(tokenizer.eos_id)
        inner = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=eos, pad_token=eos)
    inner.save_pretrained(str(out))
    return True


@app.command()
@handles_errors
def export(
    run_id: Annotated[str, typer.Argument(help="the run to export (its id, as in `ablate runs`)", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="folder to write", show_default=False)],
    fmt: Annotated[str, typer.Option("--format", help="output format: hf (the only one)")] = "hf",
    home: HomeOpt = None,
) -> None:
    """A trained checkpoint as a Hugging Face Qwen3 folder (config, safetensors weights, the tokenizer when it is a
    Hugging Face one). Gated and other non-Qwen3 variants are refused with the reason (exit 2)."""
    from ablate.errors import UserInputError, one_of

    if fmt != "hf":
        raise UserInputError(one_of(fmt, ["hf"], what="export format"))
    run_dir = home_dir(home) / "runs" / run_id
    if not run_dir.is_dir():
        from ablate.errors import did_you_mean

        known = [p.name for p in run_dir.parent.glob("*") if p.is_dir()] if run_dir.parent.is_dir() else []
        raise UserInputError(f"no run {run_id!r} in {run_dir.parent}{did_you_mean(run_id, known)}")
    from ablate.ablations import apply_variant
    from ablate.ablations.export import export_hf
    from ablate.runner.checkpoints import load_run_model

    model, tokenizer, config = load_run_model(run_dir)
    export_hf(model, apply_variant(config.model, config.variant), out)
    note = "with its tokenizer" if _save_hf_tokenizer(tokenizer, out) else (
        f"no tokenizer written: '{config.data.tokenizer}' is not a Hugging Face tokenizer")
    typer.echo(f"exported {run_id} ({fmt}) to {out}; {note}")


# ---------------------------------------------------------------- tune: learning-rate search
@app.command("tune")
@handles_errors
def tune_cmd(
    grid: Annotated[Path | None, typer.Argument(help="grid file (YAML); not needed with --dashboard",
                                                show_default=False)] = None,
    param: Annotated[str, typer.Option("--param", help="the config field to tune, by dotted path")] = "train.lr",
    low: Annotated[float | None, typer.Option("--low", help="lower end of the search range")] = None,
    high: Annotated[float | None, typer.Option("--high", help="upper end of the search range")] = None,
    log: Annotated[bool, typer.Option("--log", help="search on a log scale (learning rates)")] = False,
    trials: Annotated[int, typer.Option("--trials", help="trials per study in all (a rerun adds the missing ones)")]
    = 10,
    metric: Annotated[str, typer.Option("--metric", help="minimized: val_ppl, train_loss or ppl/<held-out set>")]
    = "val_ppl",
    pruner: Annotated[str, typer.Option("--pruner", help="median (median:N waits for N trials), hyperband, "
                                        "threshold:X or none")] = "median",
    tolerance: Annotated[float, typer.Option("--tolerance", help="stable = not diverged and metric within this "
                                             "fraction of the best")] = 0.05,
    then_run: Annotated[bool, typer.Option("--then-run", help="then run the grid's seeds at each cell's best value "
                                           "(grid '<grid>/tuned')")] = False,
    find_max_stable: Annotated[bool, typer.Option("--find-max-stable", help="bisect for each cell's largest stable "
                                                  "value between the trials' stable and unstable ones")] = False,
    stable_steps: Annotated[int, typer.Option("--stable-steps", help="probes of --find-max-stable per cell")] = 4,
    dashboard: Annotated[bool, typer.Option("--dashboard", help="serve optuna-dashboard over the store on "
                                            "127.0.0.1 instead of tuning (needs optuna-dashboard)")] = False,
    port: Annotated[int, typer.Option("--port", help="the dashboard's port on 127.0.0.1")] = 8080,
    sets: SetOpt = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="workers, as for ablate run")] = None,
    devices: Annotated[str | None, typer.Option("--devices", help="cpu, cuda, or a comma list of GPU indices")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not mirror the --then-run runs into MLflow")]
    = False,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Search a parameter (the learning rate) per grid cell with Optuna; report each variant's best and largest
    stable value; --then-run compares the variants at their best. Studies live in the results store."""
    from ablate.errors import ConfigError

    if dashboard:
        from ablate.tune.dashboard import dashboard_module, serve

        dashboard_module()  # a clear error before anything else when it is not installed
        with _open_store(home, store) as opened:
            typer.echo(f"optuna-dashboard on http://127.0.0.1:{port} (Ctrl-C stops it)", err=True)
            try:
                serve(opened, port=port)
            except KeyboardInterrupt:
                pass
        return
    if grid is None:
        raise ConfigError("give the grid file to tune (or --dashboard)", where="GRID")
    from ablate.tune.search import TuneOptions, tune
    from ablate.tune.summary import print_summary

    options = TuneOptions(param=param, low=low, high=high, log=log, trials=trials, metric=metric, pruner=pruner,
                          tolerance=tolerance, then_run=then_run, find_max_stable=find_max_stable,
                          stable_steps=stable_steps, home=home_dir(home), store=store, jobs=jobs, devices=devices,
                          mlflow=not no_mlflow)
    report = tune(grid, sets or [], options)
    print_summary(report, param, metric)
    if report.tuned is not None:
        from ablate.runner.executor import print_summary as print_grid_summary

        print_grid_summary(report.tuned)
    raise typer.Exit(report.exit_code)



# ---------------------------------------------------------------- slurm: cancel
def _run_slurm(grid: Path, sets: list[str] | None, executor: str, *, home: Path | None, store: str | None,
               partition: str | None, gpus_per_job: int | None, time_limit: str, wait: bool,
               array_parallelism: int | None, slurm_opts: list[str] | None, retry_failed: bool) -> int:
    """``ablate run --executor slurm``: submit the grid as one job array; the exit status."""
    from ablate.errors import ConfigError, one_of
    from ablate.runner.executor.slurm import SlurmOptions, submit_grid

    if executor != "slurm":
        raise ConfigError(one_of(executor, ["local", "slurm"], what="executor"), where="--executor")
    options = SlurmOptions(home=home_dir(home), store=store, partition=partition, gpus_per_job=gpus_per_job,
                           time=time_limit, array_parallelism=array_parallelism, slurm_opts=slurm_opts or [],
                           retry_failed=retry_failed, wait=wait)
    report = submit_grid(grid, sets or [], options)
    for warning in report.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if report.array_id is not None:
        typer.echo(report.array_id)
    if wait and report.statuses:
        counts: dict[str, int] = {}
        for status in report.statuses.values():
            counts[status] = counts.get(status, 0) + 1
        typer.echo(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), err=True)
    return report.exit_code


@app.command("cancel")
@handles_errors
def cancel_cmd(
    grid: Annotated[str, typer.Argument(help="the grid: its file (YAML) or its name in the store", show_default=False)],
    sets: SetOpt = None,
    wait: Annotated[float, typer.Option("--wait", help="seconds to wait for Slurm to end the jobs")] = 120.0,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Cancel a grid's Slurm job array (scancel) and put its unfinished runs back in the queue."""
    from ablate.runner.executor.slurm_queue import cancel_grid

    name = grid
    if grid.endswith((".yaml", ".yml")) or Path(grid).is_file():
        from ablate.grid import load_grid

        name = load_grid(Path(grid), sets or ()).name
    with _open_store(home, store) as opened:
        report = cancel_grid(opened, name, wait_s=wait)
    if report.cancelled:
        typer.echo(f"cancelled Slurm job(s) {', '.join(report.cancelled)} of grid {name}")
    typer.echo(f"{len(report.requeued)} run(s) of {name} back in the queue")
    if report.still_alive:
        click.secho(f"warning: Slurm still lists {', '.join(report.still_alive)}; those runs record their own end",
                    fg="yellow", err=True)


def main() -> None:
    """Console-script entry point."""
    app()
