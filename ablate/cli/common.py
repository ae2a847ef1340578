"""What every command group shares: the app, its one-line error rendering, and the options defined once.

Library errors (``AblateError``) become one red line on stderr and their exit status here, and only here; so
do Click's own usage errors (a bad ``--format``, a missing argument): ``error: --format: unknown format 'xml';
allowed: json, table`` and exit 2, never a box or a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, TypedDict, TypeVar

import click
import typer
from pydantic import ValidationError
from typer._click.exceptions import BadParameter, ClickException, MissingParameter, NoArgsIsHelpError
from typer.core import TyperGroup
from typer.exceptions import Abort

from ablate.cli.declared import executor_help
from ablate.errors import AblateError, one_of

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ablate.store.api import Store

F = TypeVar("F", bound=Callable[..., Any])


def one_line(message: object) -> str:
    """``message`` folded onto one line."""
    return " ".join(str(message).split())


def fail(message: str, code: int, *, head: str = "error") -> typer.Exit:
    """Print ``error: message`` (``head: message``; no head: the message alone) as one red line on stderr and
    return the Exit to raise."""
    click.secho(f"{head}: {one_line(message)}" if head else one_line(message), fg="red", err=True)
    return typer.Exit(code)


class OneLineErrors(TyperGroup):
    """The root group: usage errors as one ``error: ...`` line and exit 2 (Typer would draw a box).

    A ``Literal[...]`` option (``--format``) is a closed set; its error says, as every other error of ablate
    does, what was given and what is allowed (``--format: unknown format 'xml'; allowed: json, table``).
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(2)
        except ClickException as exc:
            click.secho(f"error: {_usage_message(exc)}", fg="red", err=True)
            sys.exit(exc.exit_code)
        except (Abort, click.Abort):
            click.secho("aborted", fg="red", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _usage_message(exc: ClickException) -> str:
    param = getattr(exc, "param", None)
    if not isinstance(exc, BadParameter) or param is None:
        return one_line(exc.format_message())
    option = param.param_type_name == "option"
    name = param.opts[0] if option else (param.metavar or (param.name or "").upper())
    if isinstance(exc, MissingParameter):
        return one_line(exc.format_message())
    desc = getattr(param, "type_descriptor", None)
    cause = exc.__cause__
    if desc is not None and desc.is_choice and desc.choices and isinstance(cause, ValidationError):
        what = param.opts[0].lstrip("-") if option else (str(exc.ctx.command.name) if exc.ctx else "value")
        given = cause.errors()[0].get("input")
        return one_line(f"{name}: {one_of(given, [str(c) for c in desc.choices], what=what)}")
    if isinstance(cause, ValidationError):  # a bound (min=...) or a type: worded as a config field's error
        from ablate.grid.paths import explain

        return one_line(f"{name}: {explain(cause)[1]}")
    return one_line(f"{name}: {exc.message}")


class _ReaderGone:
    """``sys.stdout`` or ``sys.stderr`` made safe against a reader that goes away (``ablate run | head -1``,
    a closed log pipe): the first write that finds the pipe closed points the file descriptor at /dev/null,
    and what follows is dropped. So a command goes on to its end (a grid trains on, every run is
    recorded) and exits with its own status, not killed by what it prints."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)  # what is still buffered is flushed there, at exit too
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def survive_closed_output() -> None:
    """Make stdout and stderr survive a reader that goes away (``_ReaderGone``); the console script calls
    it."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # Python's default, said again: a write fails, nothing dies
    sys.stdout, sys.stderr = _ReaderGone(sys.stdout), _ReaderGone(sys.stderr)


def handles_errors(fn: F) -> F:
    """Turn the library's ``AblateError`` into one line and its exit status (2 for the user's input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AblateError as exc:
            raise fail(str(exc), exc.exit_code, head=exc.head) from None

    return wrapper  # type: ignore[return-value]


app = typer.Typer(
    name="ablate",
    cls=OneLineErrors,
    help="Architecture ablation studies of attention gating: grids -> runs -> a SQL store -> the paper's "
         "tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: Typer's rich help imports rich.markdown (+0.2-0.4 s a --help)
    rich_markup_mode=None,
)
db_app = typer.Typer(help="The results store's schema.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(db_app, name="db")


# ---------------------------------------------------------------- shared options (defined once)
HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", envvar="ABLATE_HOME",
                 help="run directories and default stores [default: ./ablate-runs]"),
]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="ABLATE_STORE", help="results store URL [default: sqlite:///$ABLATE_HOME/ablate.db]"),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a field of the grid's base: K=V, dotted path, YAML scalar value"),
]
def grid_file(value: Path | None) -> Path | None:
    """What a GRID argument names, through the one resolver of every command (``ablate.studies.resolve``): a
    file here, else the shipped study of that name."""
    from ablate.studies import resolve

    return None if value is None else resolve(value)


GRID_HELP = ("grid file (YAML), or a study ablate ships by name (`ablate grids`: quickstart, lite, table1, "
             "...)")
GridArg = Annotated[Path, typer.Argument(help=GRID_HELP, show_default=False, callback=grid_file)]
GridNameOpt = Annotated[str | None, typer.Option("--grid", help="only the runs of this grid (by its name)")]
JobsOpt = Annotated[int | None, typer.Option("--jobs", "-j", help="workers (CPU: they split the cores) "
                                             "[default: 1 on CPU, one per GPU]")]
DevicesOpt = Annotated[str | None, typer.Option("--devices", help="cpu, cuda, or a comma list of GPU indices "
                                                "[default: every GPU, else cpu]")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="torch threads per worker [default: the "
                                               "CPUs this process may use (taskset, cgroup quota, Slurm) // "
                                               "workers]")]
DeviceMemoryOpt = Annotated[str | None, typer.Option(
    "--device-memory", help="memory per device (80GB, 40GiB; 1 GB = 2^30 bytes): exit 2 before anything "
                            "starts if a run's estimated peak does not fit, naming the cheapest fix [run, on "
                            "a GPU: its memory]")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help=executor_help())]
NoMlflowOpt = Annotated[bool, typer.Option("--no-mlflow", help="do not mirror runs into MLflow")]
MlflowExperimentOpt = Annotated[str | None, typer.Option(
    "--mlflow-experiment", show_default=False,
    help="mirror into this MLflow experiment (made only if missing; its other runs are left alone), each "
         "run tagged grid, variant, seed, run_id [default: $MLFLOW_EXPERIMENT_NAME, else one experiment per "
         "grid, named after it]")]


class Mlflow(TypedDict):
    mlflow: bool
    mlflow_experiment: str | None


def mlflow_target(no_mlflow: bool, experiment: str | None) -> Mlflow:
    """The options' MLflow fields from ``--no-mlflow`` and ``--mlflow-experiment`` (else
    ``MLFLOW_EXPERIMENT_NAME``); a blank name, or both options, is one line (exit 2)."""
    from ablate.errors import ConfigError
    from ablate.store.mlflow_mirror import experiment_name

    if experiment is not None and not experiment.strip():
        raise ConfigError("an empty name; name an experiment, or leave the option out (each grid gets its "
                          "own)", where="--mlflow-experiment")
    if experiment is not None and no_mlflow:
        raise ConfigError("names where to mirror, but --no-mlflow mirrors nothing; give one of the two",
                          where="--mlflow-experiment")
    return {"mlflow": not no_mlflow, "mlflow_experiment": None if no_mlflow else experiment_name(experiment)}


StorePatienceOpt = Annotated[float | None, typer.Option(
    "--store-patience", min=0, show_default=False,
    help="seconds the store may stay unreachable before the command stops cleanly (training goes on "
         "meanwhile; slurm --wait: before it stops waiting) [default: 300]")]


class Patience(TypedDict, total=False):
    store_patience_s: float


def patience(store_patience: float | None) -> Patience:
    """``store_patience_s`` for an executor's options when ``--store-patience`` was given (else its
    default)."""
    return {} if store_patience is None else {"store_patience_s": store_patience}


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="start a large grid (over 1,000 runs to train or "
                                      "100 GB of estimated disk) without asking; without a terminal it is "
                                      "refused otherwise (exit 2, nothing written)")]


def terminal_ask() -> Callable[[str], bool] | None:
    """A yes/no question asked on the terminal (on stderr, default no); None when stdin is not a terminal."""
    if not sys.stdin.isatty():
        return None
    return lambda question: bool(typer.confirm(question, default=False, err=True))


def home_dir(home: Path | None) -> Path:
    """The ABLATE_HOME in force: the option, else the environment, else ./ablate-runs."""
    return Path(home or os.environ.get("ABLATE_HOME") or "ablate-runs")


def open_store(home: Path | None, store: str | None, *, create: bool = False) -> Store:
    """Open the store, printing its warnings (e.g. SQLite on a network file system) on stderr. A command
    that only reads (the default) makes nothing: no store there is one line naming it, exit 1
    (``NoStoreError``); ``create`` for one that records runs (``ablate ingest``)."""
    from ablate.store import Store

    opened = Store.open(store, home=home_dir(home), create=create)
    for warning in opened.warnings:
        warn(warning)
    return opened


def warn(message: str) -> None:
    """One yellow ``warning: ...`` line on stderr."""
    click.secho(f"warning: {message}", fg="yellow", err=True)


def print_wide(renderable: RenderableType) -> None:
    """Print a rich table on stdout; when piped, at full width rather than the 80 columns rich assumes."""
    from ablate.execute.display import stdout_console

    stdout_console().print(renderable)


def print_wrapped(renderable: RenderableType, *, width: int = 100) -> None:
    """Print a rich table whose long cells wrap: at a terminal its width, off one ``width`` columns (a pipe, a
    file: readable as it is, nothing cut)."""
    from rich.console import Console

    console = Console()
    (console if console.is_terminal else Console(width=width)).print(renderable)


def echo_json(data: object, *, flat_from: int | None = None) -> None:
    """``data`` as indented JSON on stdout; with ``flat_from``, the values that deep (0: ``data`` itself) each
    on one line: ``plan``'s 10,000 runs, one a line, take a tenth of the time of json's indenting encoder."""
    import json

    if flat_from is None:
        typer.echo(json.dumps(data, indent=2, default=str))
        return

    def text(value: object, depth: int) -> str:
        if depth >= flat_from or not isinstance(value, (dict, list)) or not value:
            return json.dumps(value, default=str)
        pad = "  " * (depth + 1)
        if isinstance(value, dict):
            items = [f"{pad}{json.dumps(str(k))}: {text(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
        return "[\n" + ",\n".join(pad + text(v, depth + 1) for v in value) + "\n" + "  " * depth + "]"

    typer.echo(text(data, 0))
