"""Identity fields: what a run read outside its config (its data files' fingerprints), as config fields.

A field declared with ``ablate.config.identity_field(filled_by, description)``
(``json_schema_extra={"identity": True, "filled_by": "module:function"}``) is one of them. The one mechanism
for "an input outside the config":

- ablate fills it when a grid is loaded (``fill``: ``expand`` calls it for every run, ``ablate db rehash`` for
  a run stored before it existed). ``filled_by`` is called with the model that holds the field and a resolver
  (the caller's cache, e.g. ``ablate.runner.fingerprints.Fingerprints``) and returns the fields to update: the
  identity field and any it resolves with it (a relative path made absolute). Only a field that is still None
  is filled, so a stored run keeps what it read.
- A grid file never sets it: ``given`` lists the ones a config sets, and ``expand`` refuses them.
- The run id covers it (it is a config field); the stem id (``ablate.grid.stems``) is the id without any
  of them (``strip``), so a run whose stem the store holds under another id read something else: ``changed``
  names the fields that differ, and ``ablate plan`` shows the run as stale.

Training stages' overrides (``stages``: dotted paths to raw values) are walked by their fields' types, so a
stage's own ``data.train`` is filled, stripped and compared as stage 0's is. Pure but for the fillers.
"""

from __future__ import annotations

import importlib
import types
import typing
from collections.abc import Callable, Hashable, Iterator, Mapping
from functools import cache

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ablate.config import RunConfig
from ablate.errors import InputMissingError, RunError
from ablate.grid.paths import field_type

# a filler gets the model that holds the field and the caller's resolver (e.g. Fingerprints), which only it
# reads; it returns the fields to update
Filler = Callable[[BaseModel, object], dict[str, object]]
M = typing.TypeVar("M", bound=BaseModel)
# what one model of a config is updated with, as ``fill`` and ``strip`` walk it
Own = Callable[[BaseModel], dict[str, object]]


@cache
def identity_fields(cls: type[BaseModel]) -> dict[str, str]:
    """``{field: filled_by}`` of the identity fields declared on ``cls`` itself."""
    out = {}
    for name, info in cls.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and extra.get("identity"):
            out[name] = str(extra.get("filled_by") or "")
    return out


@cache
def filler(spec: str) -> Filler:
    """The function a ``filled_by`` spec ("module:function") names."""
    module, _, name = spec.partition(":")
    fn: Filler = getattr(importlib.import_module(module), name)
    return fn


def _models(tp: object) -> list[type[BaseModel]]:
    """The config models a type holds at its top (``M``, ``M | None``, ``Annotated[M, ...]``)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    if typing.get_origin(tp) in (typing.Union, types.UnionType, typing.Annotated):
        return [m for a in typing.get_args(tp) for m in _models(a)]
    return []


def _item_type(tp: object) -> tuple[str, object] | None:
    """``("list", X)`` for ``list[X]``, ``("dict", X)`` for ``dict[str, X]`` (through Optional), else None."""
    for t in (tp, *typing.get_args(tp)):
        origin = typing.get_origin(t)
        if origin is list and typing.get_args(t):
            return "list", typing.get_args(t)[0]
        if origin is dict and typing.get_args(t):
            return "dict", typing.get_args(t)[-1]
    return None


@cache
def _shape(tp: Hashable) -> tuple[str, type[BaseModel]] | None:
    """How a field of type ``tp`` holds identity fields: ``("model", M)`` (``M``, ``M | None``), ``("list",
    M)``, ``("dict", M)`` (``dict[str, M]``); None when it holds none."""
    models = _models(tp)
    if models:
        return ("model", models[0]) if _holds(models[0]) else None
    item = _item_type(tp)
    inner = _models(item[1]) if item is not None else []
    return (item[0], inner[0]) if item is not None and inner and _holds(inner[0]) else None


def _annotation(info: FieldInfo) -> Hashable:
    """A field's annotation, as the cached helpers key on it (a type, so hashable)."""
    return typing.cast(Hashable, info.annotation)


@cache
def children(cls: type[BaseModel]) -> tuple[tuple[str, str, type[BaseModel]], ...]:
    """The fields of ``cls`` holding identity fields below them: ``(name, shape, model)`` (``stages``
    aside)."""
    out = []
    for name, info in cls.model_fields.items():
        shape = None if (cls is RunConfig and name == "stages") else _shape(_annotation(info))
        if shape is not None:
            out.append((name, *shape))
    return tuple(out)


@cache
def _holds(cls: type[BaseModel]) -> bool:
    return bool(identity_fields(cls)) or any(
        _shape(_annotation(f)) is not None
        for n, f in cls.model_fields.items()
        if not (cls is RunConfig and n == "stages")
    )


def holds_identity(tp: object) -> bool:
    """Does a value of type ``tp`` hold an identity field anywhere below it?"""
    return _shape(tp) is not None


@cache
def stage_shape(path: str) -> tuple[str, type[BaseModel]] | None:
    try:
        return _shape(field_type(path))
    except ValueError:
        return None  # not a field: the stage is refused when it is validated


# ---------------------------------------------------------------- reading: over a config or its dump
def _get(node: object, name: str) -> object:
    if isinstance(node, BaseModel):
        return getattr(node, name)
    return node.get(name) if isinstance(node, dict) else None


def _nodes(cls: type[BaseModel], node: object, prefix: str) -> Iterator[tuple[str, type[BaseModel], object]]:
    """``(dotted path, model class, node)`` of every model holding identity fields in ``node`` (a model of
    ``cls`` or its dump), stages' overrides included."""
    if node is None:
        return
    if identity_fields(cls):
        yield prefix, cls, node
    for name, shape, sub in children(cls):
        yield from _shaped(shape, sub, _get(node, name), f"{prefix}.{name}" if prefix else name)
    if cls is RunConfig:
        stages = _get(node, "stages")
        for i, stage in enumerate(stages if isinstance(stages, list) else []):
            for key, value in (stage.items() if isinstance(stage, dict) else ()):
                found = stage_shape(key)
                if found is not None:
                    yield from _shaped(*found, value, f"stages.{i}.{key}")


def _shaped(shape: str, sub: type[BaseModel], value: object,
            path: str) -> Iterator[tuple[str, type[BaseModel], object]]:
    if shape == "model":
        yield from _nodes(sub, value, path)
    elif shape == "list" and isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(sub, v, f"{path}.{i}")
    elif shape == "dict" and isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(sub, v, f"{path}.{k}")


def values(config: RunConfig | Mapping[str, object]) -> dict[str, object]:
    """Every identity field's value by dotted path (``data.train.0.fingerprint``,
    ``stages.1.data.train.0...``), from a config or its whole dump (a stored config; a field it lacks reads as
    None).

    >>> values(RunConfig(data={"train": [{"kind": "text", "path": "/d/a.txt", "fingerprint": "ab12"}]}))
    {'variant_revision': None, 'data.tokenizer_fingerprint': None, 'data.train.0.fingerprint': 'ab12', \
'data.heldout.prose.fingerprint': None, 'data.heldout.code.fingerprint': None}
    """
    out: dict[str, object] = {}
    for prefix, cls, node in _nodes(RunConfig, config, ""):
        for name in identity_fields(cls):
            out[f"{prefix}.{name}" if prefix else name] = _get(node, name)
    return out


@cache
def names(cls: type[BaseModel] = RunConfig) -> frozenset[str]:
    """The names of every identity field below ``cls``."""
    out = set(identity_fields(cls))
    for _name, _shape_kind, sub in children(cls):
        out |= names(sub)
    return frozenset(out)


def mentions(tree: object) -> bool:
    """Does a raw grid value (mappings, lists, dotted keys) use the name of an identity field as a key? When
    it does not, no config made from it sets one (``given`` need not look)."""
    if isinstance(tree, dict):
        return any(str(k).rsplit(".", 1)[-1] in names() or mentions(v) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return any(mentions(v) for v in tree)
    return False


def given(config: RunConfig) -> list[str]:
    """The identity fields ``config`` sets (paths): a grid file may not set them."""
    return [path for path, value in values(config).items() if value is not None]


def check_current(config: RunConfig, resolver: object) -> None:
    """Raise ``RunError`` when an identity value of ``config`` is not what it would be filled with now (its
    data changed since the run was planned): a run trains only on what its id says. One that cannot be filled
    now (its data is gone) is left to the data loader to report."""
    now = values(fill(strip(config), resolver))
    then = values(config)
    diff = [p for p, v in then.items() if v is not None and now.get(p) is not None and now[p] != v]
    if diff:
        raise RunError(f"{diff[0]} is {now[diff[0]]} now, {then[diff[0]]} when this run was planned (what it "
                       "reads changed since): run `ablate run` again, which plans it as a new run")


def changed(planned: RunConfig | Mapping[str, object], stored: RunConfig | Mapping[str, object]) -> list[str]:
    """The identity fields whose values differ between two configs of one stem (paths, sorted)."""
    a, b = values(planned), values(stored)
    return sorted(p for p in {*a, *b} if a.get(p) != b.get(p))


# ---------------------------------------------------------------- filling and stripping: over models
def fill(config: M, resolver: object, *, strict: bool = False) -> M:
    """``config`` (a RunConfig or a section of one) with every identity field that is None filled by its
    ``filled_by`` (stages' overrides too). A filler raises ``InputMissingError`` when what it fingerprints is
    not here: ``strict`` passes it on, else the field stays None (the data check says what is missing)."""
    return _rebuild(config, lambda model: _filled(model, resolver, strict))


def fill_own(config: M, resolver: object) -> dict[str, object]:
    """The updates that fill the identity fields declared on ``config``'s own class (not those of the models
    below it): what ``fill`` would set there."""
    return _filled(config, resolver, False) if identity_fields(type(config)) else {}


def strip(config: M) -> M:
    """``config`` with every identity field back at None (what the stem id hashes); ``config`` itself when it
    sets none."""
    return _rebuild(config, _stripped)


def _filled(model: BaseModel, resolver: object, strict: bool) -> dict[str, object]:
    updates: dict[str, object] = {}
    for name, spec in identity_fields(type(model)).items():
        if getattr(model, name) is None and spec:
            current = model.model_copy(update=updates) if updates else model
            try:
                updates.update(filler(spec)(current, resolver))
            except InputMissingError as exc:
                if strict:
                    raise
                updates.update(exc.updates)
    return {k: v for k, v in updates.items() if getattr(model, k) != v}


def _stripped(model: BaseModel) -> dict[str, object]:
    return {name: None for name in identity_fields(type(model)) if getattr(model, name) is not None}


def _rebuild(model: M, own: Own) -> M:
    """``model`` with ``own(m)`` applied to every model ``m`` in it that holds identity fields (children
    first)."""
    cls = type(model)
    updates: dict[str, object] = {}
    for name, _shape_kind, _sub in children(cls):
        value = getattr(model, name)
        new = _rebuild_value(value, own)
        if new is not value:
            updates[name] = new
    if cls is RunConfig and isinstance(model, RunConfig) and model.stages:
        stages = [_stage(stage, own) if isinstance(stage, dict) else stage for stage in model.stages]
        if stages != model.stages:
            updates["stages"] = stages
    current = model.model_copy(update=updates) if updates else model
    mine = own(current) if identity_fields(cls) else {}
    return current.model_copy(update=mine) if mine else current


def _rebuild_value(value: object, own: Own) -> object:
    if isinstance(value, BaseModel):
        return _rebuild(value, own)
    if isinstance(value, list):
        new = [_rebuild_value(v, own) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    if isinstance(value, dict):
        new_d = {k: _rebuild_value(v, own) for k, v in value.items()}
        return value if all(new_d[k] is value[k] for k in value) else new_d
    return value


def _stage(stage: dict[str, object], own: Own) -> dict[str, object]:
    """A stage's dotted overrides with the identity fields of each model value updated (only the keys that
    change are written, so a stage stays as it was written)."""
    out = dict(stage)
    for key, value in stage.items():
        found = stage_shape(key)
        if found is not None:
            out[key] = _raw(*found, value, own)
    return out


def _raw(shape: str, cls: type[BaseModel], raw: object, own: Own) -> object:
    if shape == "list" and isinstance(raw, list):
        return [_raw("model", cls, v, own) for v in raw]
    if shape == "dict" and isinstance(raw, dict):
        return {k: _raw("model", cls, v, own) for k, v in raw.items()}
    if shape != "model" or not isinstance(raw, dict):
        return raw
    try:
        model = cls.model_validate(raw)
    except ValueError:
        return raw  # refused when the stage is validated
    new = _rebuild(model, own)
    diff = {name: getattr(new, name) for name in cls.model_fields if getattr(new, name) != getattr(model,
                                                                                                   name)}
    out = {**raw, **{k: _dumped(v) for k, v in diff.items()}}
    return {k: v for k, v in out.items() if not (k in identity_fields(cls) and v is None)}


def _dumped(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    return value
