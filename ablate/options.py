"""Options that a pluggable part of ablate declares for itself, so that the command line never names them.

An executor (``ablate.execute.<name>.options``) declares the ``ablate run`` options only it reads
(``--partition``, ``--ray-address``); a trainer will declare its own the same way. Each is an ``Option``: the
name its owner reads it by, the flag users type, its type, a line of help, the value it has when not given and
what is said when it is given where nothing reads it. The command line builds its flags from the declarations
(``ablate.cli.declared``) and hands the values given back by name (``RunOptions.own`` for an executor), so a
new executor or trainer needs no edit of ``ablate/cli``.

This module imports nothing of ablate: every command reads the declarations at start-up, ``ablate --help``
included.

>>> opt = Option("partition", "--partition", str, "the partition", refusal="a Slurm option")
>>> opt.given({"partition": "gpu", "nodes": None})
'gpu'
>>> Option("slurm_opts", "--slurm-opt", str, "K=V", repeat=True).given({"slurm_opts": []}) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Value = str | int | float | bool
Given = Value | list[Value] | None  # what the command line hands over for one option


@dataclass(frozen=True)
class Option:
    """One command-line option its owner reads by ``name`` (a Python identifier, ``gpus_per_job``).

    ``flag`` is what users type (``--gpus-per-job``); ``type`` the value's (str, int, float or bool); ``help``
    one line, without the owner's name (the command line prefixes it: ``slurm: GPUs per run``); ``default``
    the value when the flag is not given (None: the owner's own default, said in ``help``); ``repeat``: the
    flag may be given more than once, and its values come as a list; ``refusal``: what it is, said when it is
    given to an owner that does not read it (``--partition: a Slurm option; add --executor slurm``)."""

    name: str
    flag: str
    type: type[Value]
    help: str
    default: Value | None = None
    repeat: bool = False
    refusal: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.flag.startswith("--"):
            raise ValueError(f"an option needs an identifier name and a --flag, got {self.name!r}, "
                             f"{self.flag!r}")

    def given(self, values: Mapping[str, Given]) -> Given:
        """This option's value among ``values`` (by name) when it was given: None for one left out, or a
        repeated one given no times."""
        value = values.get(self.name)
        return None if value is None or value == [] else value


def given(options: Iterable[Option], values: Mapping[str, Given]) -> dict[str, object]:
    """The ``options`` given among ``values``, by name (those left out are absent, not None)."""
    out: dict[str, object] = {}
    for opt in options:
        value = opt.given(values)
        if value is not None:
            out[opt.name] = value
    return out
