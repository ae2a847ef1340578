"""lm-evaluation-harness on finished runs: ``ablate eval``; their probes measured again: ``ablate probe``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Protocol, TypeVar

import typer

from ablate.cli.common import (
    HomeOpt,
    StoreOpt,
    app,
    echo_json,
    handles_errors,
    home_dir,
    open_store,
    print_wide,
)

if TYPE_CHECKING:
    from rich.table import Table

    from ablate.scoring.harness import RunScores
    from ablate.scoring.probes import RunProbes

TASKS_HELP = ("comma list of lm-eval tasks: ablate's offline ablate_mqar, ablate_niah_multikey, "
              "ablate_niah_single, ablate_vt (all four: ablate), any lm-eval task whose data is on this "
              "machine, or a task YAML under --include-path")


@app.command("eval")
@handles_errors
def eval_cmd(
    tasks: Annotated[str, typer.Option("--tasks", help=TASKS_HELP, show_default=False)],
    run_ids: Annotated[list[str] | None, typer.Argument(help="runs to score (ids as in `ablate runs`, or "
                                                             "their first characters)",
                                                        show_default=False)] = None,
    grid: Annotated[str | None, typer.Option("--grid", help="score every finished run of this grid")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="at most N examples per task")] = None,
    include_path: Annotated[list[Path] | None, typer.Option(
        "--include-path", help="a folder of lm-eval task YAMLs (repeatable)")] = None,
    device: Annotated[str,
                      typer.Option("--device", help="where the model runs: cpu, cuda, cuda:1, ...")] = "cpu",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="requests per forward pass")] = 8,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Score finished runs with lm-evaluation-harness and store the scores as bench/<task> columns (`ablate
    runs`, the reports). A rerun scores only what is missing; exit 1 if a run could not be scored."""
    from ablate.scoring.select import require_choice, select_runs

    require_choice(run_ids or [], grid)  # before the store and torch: a usage error wins over a missing store
    from ablate.scoring.harness import evaluate_runs

    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its per-task notes; failures still show
    names = [t.strip() for t in tasks.split(",") if t.strip()]

    def report(res: RunScores) -> None:
        what = f"failed: {res.error}" if res.error else (
            f"scored {', '.join(res.scored)}" if res.scored else "already scored")
        typer.echo(f"{res.run_id}: {what}", err=True)

    with open_store(home, store) as opened:
        chosen = select_runs(opened, run_ids or [], grid)
        results = evaluate_runs(opened, home_dir(home), chosen, names, limit=limit,
                                include_path=include_path or [], device=device, batch_size=batch_size,
                                on_run=report)
    if fmt == "json":
        echo_json([vars(r) for r in results])
    else:
        print_wide(_table(results))
    raise typer.Exit(1 if any(r.error for r in results) else 0)


def _table(results: Sequence[RunScores]) -> Table:
    return _results_table("ablate eval", results, lambda r: r.scores, "{:.1f}",
                          lambda r: r.error or ("scored now" if r.scored else "already scored"))


class _Row(Protocol):
    run_id: str


R = TypeVar("R", bound=_Row)


def _results_table(title: str, results: Sequence[R], values: Callable[[R], Mapping[str, float | None]],
                   fmt: str, note: Callable[[R], str]) -> Table:
    """One row a run: its ``values(r)`` (columns in first-seen order, ``fmt`` each) and ``note(r)``. A column
    is headed by its name without ``bench/`` (the title says it), whole: a name wider than its column folds
    onto the next line, never cut to ``…`` (two tasks once both read ``bench/ablate_n…``)."""
    from rich.table import Table

    columns = list(dict.fromkeys(k for r in results for k in values(r)))
    bench = bool(columns) and all(c.startswith("bench/") for c in columns)
    table = Table(title=f"{title}: {len(results)} run{'s' * (len(results) != 1)}"
                        + (" (bench/<task> scores)" if bench else ""))
    table.add_column("run", no_wrap=True, style="bold")
    for c in columns:
        table.add_column(c.removeprefix("bench/") if bench else c, justify="right", overflow="fold")
    table.add_column("note", overflow="fold")
    for r in results:
        shown = values(r)
        cells = ["-" if shown.get(c) is None else fmt.format(shown[c]) for c in columns]
        table.add_row(r.run_id, *cells, note(r))
    return table


@app.command("probe")
@handles_errors
def probe_cmd(
    run_ids: Annotated[list[str] | None, typer.Argument(help="runs to probe (ids as in `ablate runs`, or "
                                                             "their first "
                                                             "characters)", show_default=False)] = None,
    grid: Annotated[str | None, typer.Option("--grid", help="probe every done run of this grid")] = None,
    device: Annotated[str,
                      typer.Option("--device", help="where the model runs: cpu, cuda, cuda:1, ...")] = "cpu",
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    home: HomeOpt = None,
    store: StoreOpt = None,
) -> None:
    """Probe done runs again from their last checkpoint, on the windows they probed, and store the probes (a
    probe added since a run trained, such as massive_ratio, without training it again); exit 1 if a run
    failed."""
    from ablate.scoring.select import require_choice, select_runs

    require_choice(run_ids or [], grid)  # before the store and torch
    from ablate.scoring.probes import probe_runs

    def report(res: RunProbes) -> None:
        typer.echo(f"{res.run_id}: {'failed: ' + res.error if res.error else 'probed'}", err=True)
        if res.warning:
            typer.echo(f"warning: {res.warning}", err=True)

    with open_store(home, store) as opened:
        chosen = select_runs(opened, run_ids or [], grid, finished=("done",), command="ablate probe",
                             verb="probes")
        results = probe_runs(opened, home_dir(home), chosen, device=device, on_run=report)
    if fmt == "json":
        echo_json([vars(r) for r in results])
    else:
        print_wide(_probe_table(results))
    raise typer.Exit(1 if any(r.error for r in results) else 0)


def _probe_table(results: Sequence[RunProbes]) -> Table:
    return _results_table("ablate probe", results, lambda r: r.summary, "{:.3g}",
                          lambda r: r.error or "probed")
