"""Slurm: ``ablate run --executor slurm`` (one job array per grid) and ``ablate cancel``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ablate.cli.common import (
    HomeOpt,
    SetOpt,
    StoreOpt,
    app,
    fail,
    handles_errors,
    home_dir,
    open_store,
    patience,
    warn,
)


def run_slurm(grid: Path, sets: list[str] | None, *, home: Path | None, store: str | None,
              partition: str | None, gpus_per_job: int | None, time_limit: str, wait: bool,
              array_parallelism: int | None, slurm_opts: list[str] | None, retry_failed: bool,
              nodes: int = 1, gpus_per_node: int | None = None,
              mlflow: bool = True, store_patience: float | None = None, append: bool = False,
              extra: Sequence[dict[str, Any]] = (), device_memory: float | None = None) -> int:
    """``ablate run --executor slurm``: submit the grid as one job array; the exit status."""
    from ablate.execute.slurm.submit import SlurmOptions, submit_grid

    options = SlurmOptions(home=home_dir(home), store=store, partition=partition, gpus_per_job=gpus_per_job,
                           time=time_limit, array_parallelism=array_parallelism, slurm_opts=slurm_opts or [],
                           retry_failed=retry_failed, wait=wait, nodes=nodes, gpus_per_node=gpus_per_node,
                           mlflow=mlflow, append=append, extra=tuple(extra), device_memory=device_memory,
                           **patience(store_patience))
    report = submit_grid(grid, sets or [], options)
    for warning in report.warnings:
        warn(warning)
    if report.array_id is not None:
        typer.echo(report.array_id)
    if wait and report.statuses:
        counts: dict[str, int] = {}
        for status in report.statuses.values():
            counts[status] = counts.get(status, 0) + 1
        typer.echo(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), err=True)
    if report.store_error is not None:
        raise fail(report.store_error, report.exit_code)
    return report.exit_code


@app.command("cancel")
@handles_errors
def cancel_cmd(
    grid: Annotated[str,
                    typer.Argument(help="the grid: its file (YAML) or its name in the store",
                                   show_default=False)],
    sets: SetOpt = None,
    wait: Annotated[float, typer.Option("--wait", help="seconds to wait for Slurm to end the jobs")] = 120.0,
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Cancel a grid's Slurm job array (scancel) and put its unfinished runs back in the queue."""
    from ablate.execute.slurm.queue import cancel_grid

    name = grid
    if grid.endswith((".yaml", ".yml")) or Path(grid).is_file():
        from ablate.grid import load_grid

        name = load_grid(Path(grid), sets or ()).name
    with open_store(home, store) as opened:
        report = cancel_grid(opened, name, wait_s=wait)
    if report.cancelled:
        typer.echo(f"cancelled Slurm job(s) {', '.join(report.cancelled)} of grid {name}")
    typer.echo(f"{len(report.requeued)} run(s) of {name} back in the queue")
    if report.still_alive:
        warn(f"Slurm still lists {', '.join(report.still_alive)}; those runs record their own end")
