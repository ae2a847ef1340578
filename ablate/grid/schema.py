"""The grid file: its YAML schema (pydantic), ``--set`` overrides, and every check that needs no model.

A grid names what to compare (CLI.md "Grid files")::

    name: quickstart
    base: {model: {preset: tiny}, train: {steps: 300}}     # a partial RunConfig shared by every run
    grid: {variant: [baseline, sdpa-elementwise], seed: [0, 1]}
    zip: [{train.batch_size: [16, 32], train.lr: [3.0e-3, 4.5e-3]}]
    include: [{variant: sandwich-norm, train.lr: 8.0e-3}]
    exclude: [{variant: baseline, seed: 1}]
    match_params: baseline
    defs: {fast: &fast {train.steps: 50}}                  # YAML anchors to reuse: <<: *fast, or *fast

``load_grid`` reads and checks the file and returns a ``Grid``; ``ablate.grid.expand`` turns it into runs.
Every problem is a ``ConfigError`` whose text starts with the file and the section.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, cast, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from typing_extensions import TypeForm

from ablate.ablations.plugins import beside
from ablate.config.yamlfile import read_yaml
from ablate.errors import ConfigError
from ablate.grid.ids import canonical
from ablate.grid.ladder import LadderSpec, ladder_axis
from ablate.grid.paths import (
    assign,
    check_path,
    describe,
    explain,
    field_type,
    is_model,
    nest_dotted,
    unwrap_optional,
)
from ablate.studies import not_found_hint

NonEmptyList = Annotated[list[Any], Field(min_length=1)]


class GridFile(BaseModel):
    """The YAML document of a grid, as written (before ``--set`` and before expansion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="names the grid in the store")
    defs: Any = Field(None, description="anything, ignored: a place for YAML anchors (&name) that the other "
                                        "sections use (*name, or <<: *name to merge a mapping)")
    base: dict[str, Any] = Field(default_factory=dict, description="a partial run config shared by every run")
    grid: dict[str, NonEmptyList] = Field(default_factory=dict, description="axes: their cartesian product")
    zip: list[Annotated[dict[str, NonEmptyList], Field(min_length=1)]] = Field(
        default_factory=list, description="groups of equal-length lists, each group one axis"
    )
    include: list[dict[str, Any]] = Field(default_factory=list, description="extra runs, dotted keys")
    exclude: list[Annotated[dict[str, Any], Field(min_length=1)]] = Field(
        default_factory=list, description="drop every run matching all given keys"
    )
    match_params: str | None = Field(None,
                                     description="shrink each run's FFN to this variant's parameter count")
    ladder: LadderSpec | None = Field(
        None, description="model sizes and a token budget: one more axis (grid/ladder.py)"
    )
    plugins: list[str] = Field(default_factory=list, description="modules of the user's code whose arms the "
                               "grid names (variant: {arm: module:Class, args: {...}}); only these, and "
                               "installed ablate.arms entry points, are imported")

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        # `include:` with nothing after it is YAML null: read it as "none".
        if isinstance(data, dict):
            sections = ("base", "grid", "zip", "include", "exclude")
            return {k: v for k, v in data.items() if not (v is None and k in sections)}
        return data

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the grid's name must not be blank")
        return v


@dataclass(frozen=True)
class Axis:
    """One axis of the product: a ``grid`` key (one path) or a ``zip`` group (several paths varied
    together)."""

    paths: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    origin: str  # the section it was written in: "grid", "zip[0]"


@dataclass(frozen=True, eq=False)
class Grid:
    """A checked grid: ``base`` with ``--set`` applied, the axes in file order (``grid`` keys in order,
    ``zip`` groups in order, the two sections in the order the file writes them), extra and excluded runs, and
    where it came from (``source``, the file's ``text``)."""

    name: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    include: tuple[dict[str, Any], ...] = ()
    exclude: tuple[dict[str, Any], ...] = ()  # values normalized: canonical JSON of the field's type
    match_params: str | None = None
    source: str = "<grid>"
    text: str = ""
    base_origins: dict[str, str] = field(default_factory=dict)  # dotted path set by --set -> "--set"
    # its rungs are the first axis; expand sets each run's train.steps from it
    ladder: LadderSpec | None = None
    # the modules its plugin arms may come from (ablate.ablations.plugins.check)
    plugins: tuple[str, ...] = ()


def parse_set(item: str) -> tuple[str, Any]:
    """``"train.steps=50"`` -> ``("train.steps", 50)``: a dotted path and a YAML value."""
    key, eq, raw = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ConfigError(f"expected K=V with a dotted field path, got {item!r}", where="--set")
    try:
        check_path(key)
    except ValueError as exc:
        raise ConfigError(str(exc), where="--set") from None
    return key, read_yaml(raw, where=f"--set {key}")


def _check_tree(tree: Any, prefix: str = "") -> None:
    """Every key of a nested partial config names a field (``ValueError`` with a near match otherwise)."""
    if not isinstance(tree, dict):
        return
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if not isinstance(key, str):
            raise ValueError(f"a key must be a field name, got {key!r}")
        tp = unwrap_optional(field_type(path))
        if is_model(tp) or get_origin(tp) is dict:
            _check_tree(value, path)


def _check_entry(entry: dict[str, Any], where: str) -> None:
    try:
        for key in entry:
            check_path(key)
        _check_tree(nest_dotted(entry))
    except ValueError as exc:
        raise ConfigError(str(exc), where=where) from None


def _normalized(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """An ``exclude`` entry with each value read through its field's type and put in canonical JSON form, so
    it compares with a dumped config by value (``3e-3`` matches ``0.003``, ``{position: G2}`` a whole
    gate)."""
    _check_entry(entry, where=where)
    out: dict[str, Any] = {}
    for path, value in entry.items():
        adapter = TypeAdapter(cast("TypeForm[object]", field_type(path)))  # an annotation: a type form
        try:
            out[path] = canonical(adapter.dump_python(adapter.validate_python(value), mode="json"))
        except ValidationError as exc:
            raise ConfigError(f"{path}: {explain(exc)[1]}", where=where) from None
    return out


def parse_grid(text: str, *, source: str = "<grid>", sets: Sequence[str] = ()) -> Grid:
    """Check a grid document (YAML text) and apply ``--set`` overrides to its ``base``.

    >>> g = parse_grid("name: g\\ngrid: {seed: [0, 1]}", sets=["train.steps=5"])
    >>> (g.name, g.base, [a.rows for a in g.axes])
    ('g', {'train': {'steps': 5}}, [((0,), (1,))])
    """
    raw = read_yaml(text, where=source)
    if not isinstance(raw, dict):
        raise ConfigError(f"a grid file is a mapping with at least 'name', got {type(raw).__name__}",
                          where=source)
    try:
        spec = GridFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe(*explain(exc, GridFile)), where=source) from None

    base = nest_dotted(spec.base)
    _check_entry(spec.base, where=f"{source}: base")
    origins: dict[str, str] = {}
    for item in sets:
        key, value = parse_set(item)
        base = assign(base, key, value)
        origins[key] = "--set"

    grid_axes: list[Axis] = []
    for key, values in spec.grid.items():
        _check_entry({key: None}, where=f"{source}: grid")
        grid_axes.append(_once(Axis((key,), tuple((v,) for v in values), "grid"), source))
    zip_axes: list[Axis] = []
    for i, group in enumerate(spec.zip):
        where = f"{source}: zip[{i}]"
        _check_entry(dict.fromkeys(group), where=where)
        lengths = {k: len(v) for k, v in group.items()}
        if len(set(lengths.values())) > 1:
            sizes = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise ConfigError(f"the lists of a zip group must have equal length: {sizes}", where=where)
        zip_axes.append(_once(Axis(tuple(group), tuple(zip(*group.values(), strict=True)), f"zip[{i}]"),
                              source))
    # the sections' axes in the order the file writes them: the first axis varies slowest
    zip_first = "zip" in raw and "grid" in raw and list(raw).index("zip") < list(raw).index("grid")
    axes = zip_axes + grid_axes if zip_first else grid_axes + zip_axes
    if spec.ladder is not None:  # the rungs vary slowest
        paths, rows = ladder_axis(spec.ladder, base, source, axis_paths=[p for a in axes for p in a.paths],
                                  include=spec.include, base_origins=origins)
        axes = [Axis(paths, rows, "ladder"), *axes]
    _no_repeated_paths(axes, source)
    _no_set_on_axes(origins, axes, source)

    for i, entry in enumerate(spec.include):
        _check_entry(entry, where=f"{source}: include[{i}]")
    exclude = tuple(_normalized(entry,
                                where=f"{source}: exclude[{i}]") for i, entry in enumerate(spec.exclude))
    return Grid(
        name=spec.name, base=base, axes=tuple(axes), include=tuple(spec.include), exclude=exclude,
        match_params=spec.match_params, source=source, text=text, base_origins=origins, ladder=spec.ladder,
        plugins=tuple(spec.plugins),
    )


def _once(axis: Axis, source: str) -> Axis:
    """``axis``, unless it lists a value twice (by value: ``1e-3`` and ``0.001`` are one): a repeated seed
    would silently be one run, so it is an error naming the value."""
    import json

    seen: set[str] = set()
    for row in axis.rows:
        key = json.dumps(canonical(list(row)), sort_keys=True, default=str)
        if key in seen:
            what = axis.paths[0] if len(axis.paths) == 1 else f"({', '.join(axis.paths)})"
            value = row[0] if len(row) == 1 else tuple(row)
            listed = [r[0] for r in axis.rows] if len(axis.paths) == 1 else [tuple(r) for r in axis.rows]
            raise ConfigError(f"{what} lists {value!r} twice ({listed}): each value once (a repeat is the "
                              "same run)", where=f"{source}: {axis.origin}")
        seen.add(key)
    return axis


def _no_repeated_paths(axes: Iterable[Axis], source: str) -> None:
    seen: dict[str, str] = {}
    for axis in axes:
        for path in axis.paths:
            if path in seen:
                raise ConfigError(f"'{path}' is varied twice, in {seen[path]} and in {axis.origin}",
                                  where=source)
            seen[path] = axis.origin


def _no_set_on_axes(origins: dict[str, str], axes: Iterable[Axis], source: str) -> None:
    """``--set`` changes the base, which an axis overrides in every run: setting an axis would do nothing."""
    for key in origins:
        for axis in axes:
            for path in axis.paths:
                if key == path or key.startswith(path + ".") or path.startswith(key + "."):
                    raise ConfigError(f"{path} is a grid axis (in {axis.origin} of {source}), so --set "
                                      f"{key}=... would change nothing; use --where or edit the "
                                      "grid", where="--set")


def file_base(text: str) -> Any | None:
    """The ``base`` a grid file's text writes (dotted keys nested, numbers canonical), without ``--set``; None
    when the text is not a grid this version can read.

    >>> file_base("name: g\\nbase: {train.lr: 3.0e-3}") == file_base("name: g\\nbase: {train: {lr: 0.003}}")
    True
    """
    try:
        raw = read_yaml(text, where="<grid>")
    except ConfigError:
        return None
    if not isinstance(raw, dict):
        return None
    return canonical(nest_dotted(raw.get("base") or {}))


def load_grid(path: str | Path, sets: Sequence[str] = ()) -> Grid:
    """Read and check a grid file; ``sets`` are ``--set K=V`` overrides of its ``base``. A grid that lists
    ``plugins:`` makes its folder importable for them (``ablate.ablations.plugins.beside``)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such grid file{not_found_hint(path)}", where=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the grid file: {exc}", where=source) from None
    grid = parse_grid(text, source=source, sets=sets)
    if grid.plugins:  # its plugin modules are found beside it
        beside(path)
    return grid
