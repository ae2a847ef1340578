"""The ``ablate`` command line: one module per command group, each command a few lines calling the library.

Heavy modules (torch, Lightning, MLflow, pandas, matplotlib) are imported inside the commands, so ``ablate
--help`` answers at once. ``common`` holds the app, the shared options and the one place where errors become a
line and an exit status.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ablate import __version__

# isort: off
from ablate.cli import model, run, store, inspect, report, evaluate, tune, cancel, studies  # noqa: F401 - registers the commands, in --help's order
# isort: on
from ablate.cli.common import app, fail, handles_errors, home_dir


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


def main() -> None:
    """Console-script entry point."""
    from ablate.cli.common import survive_closed_output

    survive_closed_output()
    app()


__all__ = ["app", "fail", "handles_errors", "home_dir", "main"]
