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


# ---------------------------------------------------------------- grid: plan


# ---------------------------------------------------------------- store: runs, status, ingest, db upgrade


# ---------------------------------------------------------------- executor: run, ui


# ---------------------------------------------------------------- reports: report


def main() -> None:
    """Console-script entry point."""
    app()
