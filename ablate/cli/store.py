"""The results store: ``ablate runs``, ``ablate status``, ``ablate ingest`` and ``ablate db upgrade``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import click
import typer

from ablate.cli.common import (
    GridNameOpt,
    HomeOpt,
    StoreOpt,
    app,
    db_app,
    handles_errors,
    home_dir,
    one_line,
    open_store,
    print_wide,
    warn,
)

if TYPE_CHECKING:
    import pandas as pd

    from ablate.store.api import Store
from ablate.cli.views import RICH_ROWS

WHERE_HELP = (
    "keep the runs for which this is true: comparisons (== != < <= > >= in, not in, is None) joined by "
    "and/or/not over run columns, e.g. \"variant == 'sdpa-elementwise' and train.lr >= 0.004\"; config "
    "fields by dotted path; names with '/' bare (ppl/code < 20) or as col('bench/arc-e'); a missing value "
    "compares false"
)
WhereOpt = Annotated[str | None, typer.Option("--where", help=WHERE_HELP)]


@app.command("runs")
@handles_errors
def runs_cmd(
    grid: GridNameOpt = None,
    where: WhereOpt = None,
    fmt: Annotated[Literal["table", "csv", "json", "markdown"], typer.Option(
        "--format", help="table, csv, json or markdown (csv/json: every column)")] = "table",
    columns: Annotated[str | None, typer.Option(
        "--columns", help="a comma list of the columns to show, in that order, any format; globs too "
                          "(run_id,variant,val_ppl,ppl/*,train.lr)", show_default=False)] = None,
    every: Annotated[bool, typer.Option("--all", help="table/markdown: every column (csv/json always have "
                                        "them), config fields and lifecycle included")] = False,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """One row per run: status, summary numbers, PPL per held-out set, benchmark scores, every config field.

    table and markdown show the summary columns (who the run is and what it measured; empty ones dropped);
    csv and json every column. --columns picks the columns of any format, --all shows every one.
    """
    from ablate.store import render

    names = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    if fmt == "csv" and not (where and where.strip()):  # the table whole, from its rows: no pandas frame
        with open_store(home, store) as opened:
            typer.echo(render.write_csv(opened, grid=grid, columns=names), nl=False)
        return
    with open_store(home, store) as opened:
        frame = opened.runs_frame(grid=grid, where=where)
        axes = _axes(opened, grid, frame) if fmt in ("table", "markdown") else []
    if names is not None:
        cols = render.pick_columns(frame, names)
    elif every or fmt in ("csv", "json"):
        cols = list(frame.columns)
    else:
        cols = render.summary_columns(frame, axes)
    if fmt in ("table", "markdown"):  # for a reader: in the grid's order, not by run id (a hash)
        frame = render.in_grid_order(frame, axes)
    frame = frame[cols]
    title = f"runs{f' of {grid}' if grid else ''}: {len(frame)}"
    if fmt == "json":
        typer.echo(render.to_json(frame))
    elif fmt == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "markdown":
        typer.echo(render.to_markdown(frame))
    else:
        _print_table(frame, title, cols, fit=names is None and not every)


def _axes(opened: Store, grid: str | None, frame: pd.DataFrame) -> list[str]:
    """The config paths the runs' grids vary (``grid``'s, else every grid's the runs belong to)."""
    grids = [grid] if grid else sorted({g.strip() for v in frame["grid"].dropna() for g in str(v).split(",")})
    return list(dict.fromkeys(a for g in grids for a in opened.grid_axes(g)))


def _print_table(frame: pd.DataFrame, title: str, cols: list[str], *, fit: bool) -> None:
    """The runs as a table: at a terminal (``fit``: unless --columns or --all chose the columns) the columns
    that fit its width, and a line naming the ones left out; off one every column, whole (a long table as
    plain columns)."""
    from rich.console import Console

    from ablate.cli.views import fit_columns, left_out_line, runs_cells, runs_table, text_table

    console = Console()
    fit = fit and console.is_terminal
    left: list[str] = []
    if fit:
        if "grid" in cols and frame["grid"].nunique(dropna=False) <= 1:  # the title names it
            cols = [c for c in cols if c != "grid"]
        cols, left = fit_columns(frame, cols, console.width, keep=cols.index("status") + 1)
    if len(frame) > RICH_ROWS:  # as a long plan: plain columns, the same cells
        typer.echo(text_table(title, *runs_cells(frame, cols)))
    else:
        table, width = runs_table(frame, title, cols, fit=fit)
        # off a terminal never squeeze columns into '…': the table is as wide as its cells (`less -S`)
        (console if fit else Console(width=max(console.width, width))).print(table)
    if left:
        import textwrap

        typer.echo(textwrap.fill(left_out_line(left, console.width), console.width))


@app.command("status")
@handles_errors
def status_cmd(
    grid: GridNameOpt = None,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    stale_after: Annotated[
        float,
        typer.Option("--stale-after", help="seconds without a heartbeat after which a running run is stale")
    ] = 300.0,
    older: Annotated[bool, typer.Option("--older", help="count the runs of a grid's older configurations too "
                                        "(an edited grid file, changed data)")] = False,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Runs by status per grid (of its current configuration: what its last `ablate run` planned), what is
    running now (step, loss, tokens/s, ETA), and running runs whose process is gone: at once on this machine
    (its run directory's lock is free), after --stale-after without a heartbeat elsewhere; and ended runs not
    yet recorded (their result.json is complete)."""
    from ablate.execute.status import grid_status, status_warnings

    with open_store(home, store) as opened:
        summary = grid_status(opened, home_dir(home), grid, stale_after_s=stale_after, older=older)
    if fmt == "json":
        import json

        typer.echo(json.dumps(summary, indent=1))
        return
    from ablate.cli.views import status_tables
    from ablate.store.schema import STATUSES

    for table in status_tables(summary, STATUSES):
        print_wide(table)  # off a terminal whole ids, variants and steps (a script or a log reads them)
    for line in status_warnings(summary, older=older, stale_after_s=stale_after):
        warn(line)


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
    from ablate.errors import StoreError, StoreUnavailable
    from ablate.result import result_paths

    failed = 0
    with open_store(home, store, create=True) as opened:
        for path in result_paths(run_dirs):
            try:
                run_id = opened.ingest(path)
            except StoreUnavailable:
                raise  # the store went away: one line for the command, not one per file
            except StoreError as exc:
                failed += 1
                click.secho(f"error: {one_line(exc)}", fg="red", err=True)
                continue
            typer.echo(f"ingested {run_id} from {path}")
    if failed:
        raise typer.Exit(1)


@db_app.command("upgrade")
@handles_errors
def db_upgrade_cmd(home: HomeOpt = None, store: StoreOpt = None) -> None:
    """Apply the store's schema migrations (opening the store does this too)."""
    from ablate.store.engine import display_url
    from ablate.store.opening import upgrade_store

    url, before, after, warnings = upgrade_store(store, home=home_dir(home))
    for warning in warnings:
        warn(warning)
    change = f"upgraded from {before or 'empty'} to {after}" if before != after else f"already at {after}"
    typer.echo(f"{display_url(url)}: schema {change}")


@db_app.command("rehash")
@handles_errors
def db_rehash_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would move")] = False,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Carry runs stored under ids from an older ablate over to today's ids, without retraining: their run
    directories, store rows, tune trials and MLflow tags follow (run it again to finish an interrupted one). A
    run stored before ids covered its data gets its data's fingerprints as the data is now: run it from the
    folder its grid ran in (a relative data path is read from there)."""
    from ablate.store.carry import rehash
    from ablate.store.mlflow_mirror import tracking_uri

    root = home_dir(home)
    with open_store(home, store) as opened:
        todo, report = rehash(opened, root, mlflow_uri=tracking_uri(root), dry_run=dry_run)
    if dry_run:
        for move in todo.moves:
            typer.echo(f"{move.old} -> {move.new}")
        typer.echo(f"{len(todo.moves)} run(s) would move; {len(todo.current)} already current")
        for rid, why in todo.unreadable:
            warn(f"cannot carry {rid}: {why}")
        return
    first, *rest = report.lines()
    typer.echo(first)
    for line in rest:
        warn(line)
