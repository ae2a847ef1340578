"""``ablate cancel``: stop the executors' jobs of a grid (a Slurm array, Ray tasks) and put its unfinished
runs back in the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.cli.common import (
    GRID_HELP,
    HomeOpt,
    SetOpt,
    StoreOpt,
    app,
    grid_file,
    handles_errors,
    open_store,
    warn,
)


@app.command("cancel")
@handles_errors
def cancel_cmd(
    grid: Annotated[Path, typer.Argument(help=f"{GRID_HELP}; or its name in the store", show_default=False,
                                         callback=grid_file)],
    sets: SetOpt = None,
    wait: Annotated[float, typer.Option("--wait", help="seconds to wait for the jobs to end")] = 120.0,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Cancel a grid's jobs (a Slurm array: scancel; Ray tasks) and put its unfinished runs back in the
    queue."""
    from ablate.execute.cancel import cancel_grid

    name = str(grid)  # a name in the store (quickstart/tune), unless it names a grid file
    if grid.suffix in (".yaml", ".yml") or grid.is_file():
        from ablate.grid.planning import grid_name

        name = grid_name(grid, sets or ())
    with open_store(home, store) as opened:
        report = cancel_grid(opened, name, wait_s=wait)
    for line in report.lines():
        typer.echo(line)
    if report.still_alive:
        warn(f"still alive: {', '.join(report.still_alive)}; those runs record their own end")
