"""The studies ablate ships: ``ablate grids`` (one line each) and ``ablate grids show NAME``."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ablate.cli.common import app, echo_json, handles_errors

grids_app = typer.Typer(help="The studies ablate ships, to run by name (`ablate run quickstart`) or copy and "
                             "edit (`ablate grids show quickstart > my.yaml`).", rich_markup_mode=None)
app.add_typer(grids_app, name="grids")


@grids_app.callback(invoke_without_command=True)
@handles_errors
def grids_cmd(
    ctx: typer.Context,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
) -> None:
    """The studies ablate ships, one line each: the name `ablate run NAME` takes, and what it is."""
    if ctx.invoked_subcommand is not None:
        return
    from ablate.studies import FOLDER, shipped, summary

    studies = shipped()
    if fmt == "json":
        echo_json([{"name": n, "summary": summary(p), "file": p.relative_to(FOLDER).as_posix()}
                   for n, p in studies.items()])
        return
    width = max(map(len, studies))
    for name, path in studies.items():
        typer.echo(f"{name:<{width}}  {summary(path)}")


@grids_app.command("show")
@handles_errors
def grids_show(name: Annotated[str, typer.Argument(help="a shipped study's name (`ablate grids`)",
                                                   show_default=False)]) -> None:
    """Print a shipped study's grid file, comments and all: `ablate grids show quickstart > my.yaml`, edit it,
    then `ablate run my.yaml`."""
    from ablate.studies import find

    typer.echo(find(name).read_text(encoding="utf-8"), nl=False)
