"""Flags built from what the library declares (``ablate.options.Option``), not written here: each executor's
own options (``ablate.execute.registry``), so that a new executor needs no edit of ``ablate/cli``.

``declared(options)`` adds one keyword parameter per option to a command's signature, which Typer reads, and
the command receives them in ``**own`` by name: ``ablate run --partition gpu`` gives ``own["partition"] ==
"gpu"``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from types import GenericAlias
from typing import Any, TypeVar

import typer

from ablate.execute.registry import EXECUTORS
from ablate.options import Option

F = TypeVar("F", bound=Callable[..., Any])


def executor_help() -> str:
    """``--executor``'s help, from the registry: ``where the runs train: local (a pool of workers here), slurm
    (one job array) or ray (one Ray task per run)``."""
    named = [f"{name} ({entry.about})" for name, entry in EXECUTORS.items()]
    listed = ", ".join(named[:-1]) + f" or {named[-1]}" if len(named) > 1 else "".join(named)
    return f"where the runs train: {listed}"


def _parameter(owner: str, opt: Option) -> inspect.Parameter:
    value = GenericAlias(list, (opt.type,)) if opt.repeat else opt.type
    flag = typer.Option(opt.default, opt.flag, help=f"{owner}: {opt.help}",
                        show_default=opt.default is not None)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=flag, annotation=value | None)


def declared(options: Sequence[tuple[str, Option]], *, after: str) -> Callable[[F], F]:
    """A command decorator: its signature gains ``options`` (owner, declaration) as keyword parameters right
    after its parameter ``after``, in place of its ``**own``. A declared name that is already one of the
    command's parameters is a programming error, said at once."""

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
                  if p.kind is not inspect.Parameter.VAR_KEYWORD]
        clash = {o.name for _, o in options} & {p.name for p in params}
        if clash:
            raise TypeError(f"{fn.__name__}: declared options named as its parameters: {sorted(clash)}")
        at = next(i for i, p in enumerate(params) if p.name == after) + 1
        added = [_parameter(owner, opt) for owner, opt in options]
        # what inspect.signature, and so Typer, reads of the command
        vars(fn)["__signature__"] = sig.replace(parameters=[*params[:at], *added, *params[at:]])
        return fn

    return decorate
