"""Every field a grid file can set, read from the pydantic models themselves: what ``ablate schema`` prints.

A row per field: its dotted path, its type, its default, the values it allows and what it means. The grid
file's own keys come first (``name``, ``base``, ``grid``, ..., ``ladder.*``), then the run config's fields,
which a grid sets in ``base`` (``base: {train: {lr: 3.0e-3}}``), on an axis (``grid: {train.lr: [...]}``), in
``zip``, ``include`` or ``--set`` by the same dotted path. A field of the sections in a list is written
``data.train[].kind``, in a mapping of named ones ``data.heldout{}.kind`` (as ``defaults.yaml`` writes them).

Nothing is kept by hand but ``REGISTRIES``: the fields whose allowed values are the names of a registry (a
size preset, a variant, a built-in corpus) rather than of their type. Pure: no I/O.
"""

from __future__ import annotations

import json
import types
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ablate.ablations import VARIANTS
from ablate.ablations.presets import PRESETS
from ablate.config import BUILTIN_CORPORA, RunConfig
from ablate.errors import ConfigError, did_you_mean
from ablate.grid.defaults import models_in  # the one walk over the config models (defaults.yaml's too)
from ablate.grid.schema import GridFile


def _presets() -> list[str]:
    return list(PRESETS)


def _variants() -> list[str]:
    return list(VARIANTS)


def _corpora() -> list[str]:
    return list(BUILTIN_CORPORA)


# fields whose values are a registry's names (their type is plain str): how to list them
REGISTRIES = {"model.preset": _presets, "variant": _variants, "ladder.sizes": _presets,
              "data.train[].name": _corpora, "data.heldout{}.name": _corpora}
BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "at least"))


@dataclass(frozen=True)
class FieldDoc:
    """One field: ``default`` is JSON text ('' when the field is required or is a section of its own)."""

    path: str
    type: str
    default: str
    allowed: str
    description: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def schema_fields() -> list[FieldDoc]:
    """Every field of a grid file, in declaration order: the grid's own keys, then the run config's."""
    return _fields(GridFile, "") + _fields(RunConfig, "")


def find(rows: list[FieldDoc], path: str) -> list[FieldDoc]:
    """The rows of ``path`` and of everything under it (``data`` -> every ``data.*``; ``data.train`` -> its
    sources' fields too); a ``ConfigError`` with a near match when there is none.

    >>> [r.path for r in find(schema_fields(), "train.lr")]
    ['train.lr']
    """
    key = _bare(path.strip())
    found = [r for r in rows if _bare(r.path) == key or _bare(r.path).startswith(key + ".")]
    if not found:
        hint = did_you_mean(path, [r.path for r in rows])
        raise ConfigError(f"no field {path!r}{hint}; `ablate schema` lists them all", where="FIELD")
    return found


def _bare(path: str) -> str:
    return path.replace("[]", "").replace("{}", "")


def _fields(model: type[BaseModel], prefix: str) -> list[FieldDoc]:
    rows: list[FieldDoc] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        sections = models_in(info.annotation)
        if len(sections) == 1:  # a section of its own (optional or not), or a list or mapping of them
            inner, suffix = sections[0]
            what = {"[]": f"list of {inner.__name__}", "{}": f"mapping of name to {inner.__name__}"}.get(
                suffix, inner.__name__ + (" or null" if _optional(info.annotation) else ""))
            shown = suffix or _optional(info.annotation)  # a list's, a mapping's or an optional one's default
            rows.append(FieldDoc(path, what, _default(info) if shown else "", "",
                                 info.description or _summary(inner)))
            rows += _fields(inner, f"{path}{suffix}.")
            continue
        rows.append(FieldDoc(path, _type(info.annotation), _default(info), _allowed(path, info),
                             info.description or ""))
    return rows


def _summary(model: type[BaseModel]) -> str:
    """A section's meaning: its docstring, whole (a source's kinds are listed there), on one line."""
    return " ".join((model.__doc__ or "").split())


def _is_union(ann: Any) -> bool:
    return get_origin(ann) in (Union, types.UnionType)


def _optional(ann: Any) -> bool:
    return _is_union(ann) and type(None) in get_args(ann)


def _type(ann: Any) -> str:
    """The annotation as a reader writes it: ``int``, ``float (> 1) | 'auto' | null``, ``list of str``."""
    if ann is type(None):
        return "null"
    if _is_union(ann):
        return " | ".join(_type(a) for a in get_args(ann))
    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin is Annotated:
        metadata = [m for meta in args[1:] for m in ([meta, *meta.metadata] if isinstance(meta, FieldInfo)
                                                      else [meta])]
        bounds = _bounds(metadata)
        return _type(args[0]) + (f" ({bounds})" if bounds else "")
    if origin is list:
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}" if args else "mapping"
    if ann is Any:
        return "any"
    return getattr(ann, "__name__", str(ann))


def _bounds(metadata: list[Any]) -> str:
    out = []
    for attr, word in BOUNDS:
        for m in metadata:
            if getattr(m, attr, None) is not None:
                out.append(f"{word} {getattr(m, attr)}")
    return ", ".join(out)


def _allowed(path: str, info: FieldInfo) -> str:
    if path in REGISTRIES:
        return ", ".join(REGISTRIES[path]())
    literal = [a for a in (get_args(info.annotation) if _is_union(info.annotation) else [info.annotation])
               if get_origin(a) is Literal]
    if literal:
        return ", ".join(json.dumps(v) for lit in literal for v in get_args(lit))
    return _bounds(info.metadata)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "(required)"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list | dict):
        value = json.loads(json.dumps(value, default=lambda v: v.model_dump(mode="json")))
    return json.dumps(value)
