"""A command grid file -> its runs, pure: the file is read and checked once (``load_command_grid``), every
run's parameters are resolved there, and ``expand_command_grid`` only crosses them with the seeds and hashes
their ids (``identity``).

```yaml
name: my-gate
trainer: {command: python train.py {args}, ...}   # spec.CommandSpec
base: {max_iters: 2000, optim: {lr: 1.0e-3}}      # the script's parameters
grid:
  arm: {baseline: {}, gated: {gate: true}}        # named arms: overrides of base; default {baseline: {}}
  optim.lr: [3.0e-4, 1.0e-3]                      # a parameter axis (a dotted name, a list of values)
  seed: [0, 1, 2]                                 # default [0]
exclude:                                          # optional: drop the runs that match every key given
  - {arm: gated, optim.lr: 3.0e-4}
```

- **Order**: the product of ``grid``'s keys in file order, the first varying slowest.
- **Precedence**: an arm's overrides and the axis values merge into ``base`` key by key (``params.merge``),
  and an arm and an axis never set the same parameter (nor one inside the other, ``optim`` and ``optim.lr``):
  the file is refused. Arm-wins would repeat the arm's runs in every cell of that axis, and axis-wins would
  drop the arm's value without a word; neither is what someone who wrote both meant.
- **One run per set of parameters**: two arms that give the same parameters, or an axis value given twice
  (``1e-2`` and ``0.01``), are refused, so every run of the product has an id of its own.
- Numbers are read as YAML 1.2 does (``1e-2`` is a float) and a key written twice is refused, as in ablate's
  own grid files. Every check is one ``ConfigError`` line naming the file, the field, the value and what is
  allowed. What needs the disk (``cwd``, the program on PATH, the placeholders: ``render.check``) is the
  caller's, at plan time.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config.yamlfile import read_yaml
from ablate.errors import ConfigError, did_you_mean
from ablate.trainers.command.code import CodeIdentity, code_identity
from ablate.trainers.command.identity import Identifier
from ablate.trainers.command.params import (
    Params,
    Value,
    canonical,
    flatten,
    merge,
    nest,
    render_args,
)
from ablate.trainers.command.spec import CommandSpec, load_spec

ARM, SEED = "arm", "seed"
DEFAULT_ARM = "baseline"  # the one arm of a grid that names none: the reports' default reference
KEYS = ("name", "defs", "trainer", "base", "grid", "exclude")  # defs: anchors (&x) for the other sections
_MODEL_ONLY = {  # keys of ablate's own grid files that a command grid does not take, and what to write
    "include": "a command grid has no include: give the runs an arm of their own, or an axis",
    "zip": "a command grid has no zip groups: give each combination an arm of its own",
}
_DOTTED = re.compile(r"[A-Za-z_][\w\-]*(\.[A-Za-z_][\w\-]*)*")


@dataclass(frozen=True)
class CommandCell:
    """One arm at one point of the parameter axes: its parameters (base merged with the arm and the axis
    values, the seed left out, as ``render.RunValues`` takes them) and their canonical JSON, shared by the
    runs of every seed."""

    arm: str
    values: dict[str, Value]  # axis name -> value, file order
    params: Params
    params_json: str


@dataclass(frozen=True)
class CommandGrid:
    """A checked command grid: its trainer, parameters and axes, with every cell resolved.

    ``order`` is ``grid``'s keys in file order (``arm`` and ``seed`` among them); ``cells`` maps the value
    indices of ``arm`` and then of each parameter axis (in ``axes``' order) to the cell; ``exclude`` holds
    each entry as axis key -> value index."""

    name: str
    spec: CommandSpec
    base: Params
    arms: dict[str, Params]  # name -> overrides, nested
    axes: dict[str, tuple[Value, ...]]  # parameter axes: dotted name -> values
    seeds: tuple[int, ...]
    order: tuple[str, ...]
    cells: dict[tuple[int, ...], CommandCell]
    exclude: tuple[dict[str, int], ...] = ()
    source: str = "<grid>"
    folder: Path = Path()
    text: str = ""

    @property
    def code_dir(self) -> Path:
        """Where the code identity is taken: ``cwd`` (relative to the grid's folder), or the grid's folder
        when cwd is not given or differs per run (has placeholders)."""
        cwd = self.spec.cwd
        return self.folder if cwd is None or "{" in cwd else self.folder / cwd


@dataclass(frozen=True, slots=True)
class CommandRun:
    """One run of a command grid: its ids, arm, cell (the parameter axes' values), seed and parameters (the
    seed left out: ``render.render`` puts it under ``trainer.seed_arg``). ``cell`` and ``params`` are shared
    with the other runs of the cell: read them, never change them."""

    run_id: str
    stem_id: str
    arm: str
    cell: dict[str, Value]
    seed: int
    params: Params


def load_command_grid(path: str | Path) -> CommandGrid:
    """Read and check the command grid file at ``path``; one ``ConfigError`` line for what is wrong."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such grid file", where=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the grid file: {exc}", where=source) from None
    return parse_command_grid(text, source=source, folder=Path(path).parent)


def parse_command_grid(text: str, *, source: str = "<grid>", folder: Path = Path()) -> CommandGrid:
    """A command grid from its YAML ``text``; ``folder`` is what ``trainer.cwd`` is relative to."""
    raw = read_yaml(text, source)
    if not isinstance(raw, dict):
        raise ConfigError(f"a grid file is a mapping with name, trainer, base and grid, got "
                          f"{type(raw).__name__}", where=source)
    for key in raw:
        if key in _MODEL_ONLY:
            raise ConfigError(f"{key}: {_MODEL_ONLY[key]}", where=source)
        if key not in KEYS:
            raise ConfigError(f"unknown key {key!r}{did_you_mean(key, KEYS)}; allowed: {', '.join(KEYS)}",
                              where=source)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name: the grid's name, a non-empty string, got {name!r}", where=source)
    spec = load_spec(raw.get("trainer"), source=source)
    raw_base = _mapping(raw.get("base"), "base", source)
    base = nest(raw_base, where=f"{source}: base")
    axes_raw = _mapping(raw.get("grid"), "grid", source)
    raw_arms = _arms(axes_raw.get(ARM, {DEFAULT_ARM: {}}), source)
    arms = {arm: nest(overrides, where=f"{source}: grid.arm.{arm}") for arm, overrides in raw_arms.items()}
    seeds = _seeds(axes_raw.get(SEED, [0]), source)
    axes = {key: _axis(key, values, source) for key, values in axes_raw.items() if key not in (ARM, SEED)}
    _disjoint(arms, axes, source)
    order = tuple(axes_raw) + tuple(k for k in (ARM, SEED) if k not in axes_raw)
    cells = _cells(spec, raw_base, raw_arms, arms, axes, seeds[0], source)
    exclude = _exclude(raw.get("exclude"), arms, axes, seeds, source)
    return CommandGrid(name=name, spec=spec, base=base, arms=arms, axes=axes, seeds=seeds, order=order,
                       cells=cells, exclude=exclude, source=source, folder=folder, text=text)


def expand_command_grid(grid: CommandGrid, *, code: CodeIdentity | None = None) -> list[CommandRun]:
    """The grid's runs in file order (the first key of ``grid`` slowest), ``exclude`` dropped. ``code`` is the
    code's identity (default: ``code.code_identity`` of ``grid.code_dir``, taken once); a caller that shows
    it too passes the one it took."""
    if code is None:
        code = code_identity(grid.code_dir, grid.spec.code)
    ids = Identifier(grid.spec, code.value).ids
    arm_names = list(grid.arms)
    sizes = {ARM: len(arm_names), SEED: len(grid.seeds), **{k: len(v) for k, v in grid.axes.items()}}
    at = {key: i for i, key in enumerate(grid.order)}
    cell_keys = [at[ARM], *(at[k] for k in grid.axes)]  # where the cell's indices sit in a point
    excluded = [[(at[k], i) for k, i in entry.items()] for entry in grid.exclude]
    runs: list[CommandRun] = []
    for point in itertools.product(*(range(sizes[k]) for k in grid.order)):
        if excluded and any(all(point[p] == i for p, i in entry) for entry in excluded):
            continue
        cell = grid.cells[tuple(point[p] for p in cell_keys)]
        seed = grid.seeds[point[at[SEED]]]
        run_id, stem_id = ids(cell.params_json, seed)
        runs.append(CommandRun(run_id, stem_id, cell.arm, cell.values, seed, cell.params))
    if not runs:
        raise ConfigError("exclude removes every run of the grid; nothing would run: narrow its entries",
                          where=f"{grid.source}: exclude")
    return runs


def _mapping(raw: object, field: str, source: str) -> dict[Any, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{field}: a mapping, got {type(raw).__name__} {raw!r}", where=source)
    return raw


def _arms(raw: object, source: str) -> dict[str, dict[Any, Any]]:
    """The arms as written (a null arm is ``{}``)."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"grid.arm: a mapping of named arms, each a mapping of overrides of base ({{}} for "
                          f"none), got {raw!r}", where=source)
    arms: dict[str, dict[Any, Any]] = {}
    for arm, overrides in raw.items():
        if not isinstance(arm, str) or not arm.strip():
            raise ConfigError(f"grid.arm: an arm's name is a non-empty string, got {arm!r}", where=source)
        where = f"{source}: grid.arm.{arm}"
        if overrides is not None and not isinstance(overrides, dict):
            raise ConfigError(f"an arm is a mapping of overrides of base ({{}} for none), got "
                              f"{type(overrides).__name__} {overrides!r}", where=where)
        arms[arm] = overrides or {}
    return arms


def _seeds(raw: object, source: str) -> tuple[int, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"grid.seed: a non-empty list of seeds ([0, 1, 2]), got {raw!r}", where=source)
    for i, seed in enumerate(raw):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"a seed is an integer >= 0, got {seed!r}", where=f"{source}: grid.seed[{i}]")
        if seed in raw[:i]:
            raise ConfigError(f"the seed {seed} is given twice; give each seed once",
                              where=f"{source}: grid.seed[{i}]")
    return tuple(raw)


def _axis(key: object, raw: object, source: str) -> tuple[Value, ...]:
    if not isinstance(key, str) or not _DOTTED.fullmatch(key):
        raise ConfigError(f"grid: an axis is arm, seed or a parameter's dotted name (optim.lr), got {key!r}",
                          where=source)
    where = f"{source}: grid.{key}"
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"an axis is a non-empty list of the parameter's values ([3.0e-4, 1.0e-3]), got "
                          f"{raw!r}", where=where)
    seen: dict[str, int] = {}
    for i, value in enumerate(raw):
        written = canonical(nest({key: value}, where=f"{where}[{i}]"))
        if written in seen:
            raise ConfigError(f"{value!r} is given twice (items {seen[written]} and {i} are one value); give "
                              f"each value once", where=where)
        seen[written] = i
    return tuple(raw)


def _disjoint(arms: dict[str, Params], axes: dict[str, tuple[Value, ...]], source: str) -> None:
    """An arm and an axis, or two axes, never set the same parameter, nor one inside the other."""
    names = list(axes)
    for i, axis in enumerate(names):
        for other in names[:i]:
            if _overlap(axis, other):
                raise ConfigError(f"the axes {other!r} and {axis!r} set the same parameter; give one",
                                  where=f"{source}: grid")
        for arm, overrides in arms.items():
            hit = next((name for name in flatten(overrides) if _overlap(name, axis)), None)
            if hit is not None:
                raise ConfigError(f"the arm sets {hit!r}, which the grid's axis {axis!r} sets too; an arm "
                                  f"and an axis never set one parameter: remove it from the arm or the axes",
                                  where=f"{source}: grid.arm.{arm}")


def _cells(spec: CommandSpec, raw_base: dict[Any, Any], raw_arms: dict[str, dict[Any, Any]],
           arms: dict[str, Params], axes: dict[str, tuple[Value, ...]], seed: int, source: str
           ) -> dict[tuple[int, ...], CommandCell]:
    """Every arm at every point of the parameter axes, resolved and checked once: the seed's name is free,
    every parameter renders to something, and no two cells have the same parameters."""
    cells: dict[tuple[int, ...], CommandCell] = {}
    first: dict[str, tuple[int, ...]] = {}
    names = list(arms)
    for arm_i, arm in enumerate(names):
        for point in itertools.product(*(range(len(v)) for v in axes.values())):
            values = {key: axes[key][i] for key, i in zip(axes, point, strict=True)}
            params = merge(raw_base, {**raw_arms[arm], **values}, where=f"{source}: grid.arm.{arm}")
            _renders(spec, params, seed, (arm, arms[arm]), values, source)
            cell = CommandCell(arm, values, params, canonical(params))
            if (twin := first.get(cell.params_json)) is not None:
                raise ConfigError(f"{_about(cells[twin])} and {_about(cell)} give the same parameters, so "
                                  f"the same runs; make the arms differ", where=f"{source}: grid.arm")
            first[cell.params_json] = cells_key = (arm_i, *point)
            cells[cells_key] = cell
    return cells


def _renders(spec: CommandSpec, params: Params, seed: int, arm: tuple[str, Params],
             values: Mapping[str, Value], source: str) -> None:
    """The seed's name is free and every parameter renders to something in ``{args}``; else one line that
    names the section that set the parameter (an axis, the arm, or base)."""
    def owner(name: str) -> str:
        axis = next((k for k in values if _overlap(k, name)), None)
        if axis is not None:
            return f"grid.{axis}"
        return f"grid.arm.{arm[0]}" if any(_overlap(k, name) for k in flatten(arm[1])) else "base"

    flat = flatten(params)
    if spec.seed_arg is not None and any(_overlap(spec.seed_arg, k) for k in flat):
        raise ConfigError(f"{spec.seed_arg!r} is the seed's name (trainer.seed_arg), which the grid's seed "
                          f"axis sets: remove it here, or rename the seed (trainer.seed_arg, null for none)",
                          where=f"{source}: {owner(spec.seed_arg)}")
    if spec.seed_arg is not None:
        flat[spec.seed_arg] = seed  # as with_seed puts it, its name free (checked above)
    try:
        render_args(flat, spec.args_style, spec.bools)
    except ConfigError as exc:  # which parameter: asked again one by one, on this path only
        for key, value in flat.items():
            try:
                render_args({key: value}, spec.args_style, spec.bools)
            except ConfigError:
                raise ConfigError(str(exc), where=f"{source}: {owner(key)}") from None
        raise


def _overlap(a: str, b: str) -> bool:
    """Do the dotted names ``a`` and ``b`` name one parameter, or one inside the other?"""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _about(cell: CommandCell) -> str:
    point = ", ".join(f"{k}={v!r}" for k, v in cell.values.items())
    return f"arm {cell.arm!r}" + (f" at {point}" if point else "")


def _exclude(raw: object, arms: dict[str, Params], axes: dict[str, tuple[Value, ...]], seeds: tuple[int, ...],
             source: str) -> tuple[dict[str, int], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"exclude: a list of mappings ({{arm: gated, lr: 3.0e-4}}), got {raw!r}",
                          where=source)
    choices: dict[str, list[Value]] = {ARM: list(arms), SEED: list(seeds)}
    choices.update({k: list(v) for k, v in axes.items()})
    out: list[dict[str, int]] = []
    for i, entry in enumerate(raw):
        where = f"{source}: exclude[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(f"an entry is a non-empty mapping of axes to values, got {entry!r}",
                              where=where)
        picked: dict[str, int] = {}
        for key, value in entry.items():
            if key not in choices:
                raise ConfigError(f"unknown axis {key!r}{did_you_mean(key, choices)}; allowed: "
                                  f"{', '.join(choices)}", where=where)
            written = [canonical({"v": v}) for v in choices[key]]
            try:
                picked[key] = written.index(canonical({"v": value}))
            except (ValueError, TypeError):
                shown = ", ".join(repr(v) for v in choices[key][:8])
                raise ConfigError(f"{key}: {value!r} is none of the axis's values: {shown}",
                                  where=where) from None
        out.append(picked)
    return tuple(out)
