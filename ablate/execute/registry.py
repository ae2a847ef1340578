"""The executors ``--executor`` chooses from, as known before any of them is imported: where each one's object
lives, a few words on where it trains, and the options only it reads (its subpackage's ``options`` module).

The command line reads this at start-up to build ``ablate run``'s and ``ablate tune``'s flags, so it imports
nothing heavier than the declarations. A new executor is one subpackage of ``ablate.execute`` (an
``options`` module and the object of ``ablate.execute.executor.Executor``) and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.execute.local import options as local
from ablate.execute.ray import options as ray
from ablate.execute.slurm import options as slurm
from ablate.options import Option


@dataclass(frozen=True)
class Registered:
    """One executor: ``target`` is the ``module:attribute`` of its object, imported when chosen (Ray's imports
    ray only then); ``about`` a few words for ``--executor``'s help; ``options`` those only it reads;
    ``rounds``: it deals rounds of jobs, as ``ablate tune`` needs (Slurm submits whole grids only)."""

    target: str
    about: str
    options: tuple[Option, ...] = ()
    rounds: bool = True


EXECUTORS: dict[str, Registered] = {
    "local": Registered("ablate.execute.local.executor:LOCAL", local.ABOUT, local.OPTIONS),
    "slurm": Registered("ablate.execute.slurm.executor:SLURM", slurm.ABOUT, slurm.OPTIONS, rounds=False),
    "ray": Registered("ablate.execute.ray.executor:RAY", ray.ABOUT, ray.OPTIONS),
}


def declared_options(*, rounds: bool = False) -> list[tuple[str, Option]]:
    """Every executor's own options, with its name, in the registry's order (``rounds``: only those of the
    executors that deal rounds of jobs, ``ablate tune``'s). An option two executors declare comes once,
    with the first's name."""
    out: dict[str, tuple[str, Option]] = {}
    for name, entry in EXECUTORS.items():
        if entry.rounds or not rounds:
            for opt in entry.options:
                out.setdefault(opt.name, (name, opt))
    return list(out.values())


def owner(option: str) -> str | None:
    """The first executor that reads option ``option`` (by name); None when none does."""
    return next((name for name, entry in EXECUTORS.items() if any(o.name == option for o in entry.options)),
                None)
