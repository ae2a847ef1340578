"""The studies ablate ships: grid files for the quick start, the paper's tables (at CPU scale and at the
paper's), the attention-sink studies and the scaling ladders, installed with the package and named by their
file's stem: ``quickstart``, ``lite``, ``sinks``, ``table1`` .. ``table6``, ``table1-paper-scale`` ..,
``ladder-lite``, ``ladder-paper``.

``ablate run quickstart`` (and every command that takes a grid file) runs one by name when no file of that
name is here (``resolve``); ``ablate grids`` lists them, one line each (``summary``: a file's first line);
``ablate grids show NAME`` prints one to copy and edit.

A new shipped study is one more YAML file in this folder (``paper/`` for the paper's tables), its name unique,
its first line ``# `` and a one-line summary, then ``#``: the tests hold every file to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ablate.errors import UserInputError, did_you_mean

FOLDER = Path(__file__).parent


def shipped() -> dict[str, Path]:
    """Every shipped study by name: the quick start first, then this folder's, then ``paper/``'s, each sorted.

    >>> list(shipped())[0], shipped()["table1"].relative_to(FOLDER).as_posix()
    ('quickstart', 'paper/table1.yaml')
    """
    def order(path: Path) -> tuple[bool, str, bool]:  # the quick start first; a table at CPU scale first
        table = path.stem.removesuffix("-paper-scale")
        return path.stem != "quickstart", table, table != path.stem

    files = [*sorted(FOLDER.glob("*.yaml"), key=order), *sorted(FOLDER.glob("*/*.yaml"), key=order)]
    return {p.stem: p for p in files}


def summary(path: Path) -> str:
    """A study's one-line summary: its file's first line, less its ``# ``."""
    with path.open(encoding="utf-8") as f:
        return f.readline().removeprefix("#").strip()


def resolve(grid: str | os.PathLike[str]) -> Path:
    """The grid file a command's argument names: the file itself when there is one (or the argument names a
    folder or a ``.yaml`` file), else the shipped study of that name; else the argument (the command says no
    such file)."""
    path = Path(grid)
    if path.exists() or path.parent != Path(".") or path.suffix in (".yaml", ".yml"):
        return path
    return shipped().get(path.name, path)


def find(name: str) -> Path:
    """The shipped study ``name`` (a UserInputError naming the near match and every study otherwise)."""
    studies = shipped()
    if name.removesuffix(".yaml") in studies:
        return studies[name.removesuffix(".yaml")]
    raise UserInputError(f"no shipped study {name!r}{did_you_mean(name, studies)}; the studies: "
                         f"{', '.join(studies)} (`ablate grids` says what each is)")


def not_found_hint(grid: str | os.PathLike[str]) -> str:
    """What to say of a grid file that is not there, named without a folder: the shipped study it may mean
    (nothing for a path: it was not a study's name)."""
    if Path(grid).parent != Path("."):
        return ""
    near = did_you_mean(Path(grid).stem, shipped())
    return f"; nor a shipped study{near} (`ablate grids` lists them)"
