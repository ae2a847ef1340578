"""Dotted paths into a ``RunConfig`` (``train.lr``, ``model.gate.position``, ``data.heldout.code.kind``).

Grid axes, ``include`` / ``exclude`` entries and ``--set`` name config fields by dotted path. This module
checks a path against the config schema (with a near match for a misspelt segment), reads a value at a path
and writes one into a nested mapping. It also turns pydantic's first validation error into one line with the
full dotted location. Pure: no I/O, no torch.
"""

from __future__ import annotations

import copy
import difflib
import types
from typing import TypeGuard, Union, get_args, get_origin, overload

from pydantic import BaseModel, ValidationError

from ablate.config import RunConfig


def unwrap_optional(tp: object) -> object:
    """``X | None`` -> ``X``; anything else unchanged."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def is_model(tp: object) -> TypeGuard[type[BaseModel]]:
    """Is ``tp`` a pydantic model class (a config section with named fields)?"""
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _unknown_key(seg: str, prefix: str, fields: list[str]) -> str:
    """``unknown key 'train.stpes' (did you mean 'train.steps'?); allowed in train: ...``."""
    full = f"{prefix}.{seg}" if prefix else seg
    close = difflib.get_close_matches(seg, fields, n=1, cutoff=0.6)
    hint = f" (did you mean '{prefix + '.' if prefix else ''}{close[0]}'?)" if close else ""
    return (
        f"unknown key '{full}'{hint}; allowed{' in ' + prefix if prefix else ''}: {', '.join(sorted(fields))}"
    )


def field_type(path: str | tuple[object, ...], root: type[BaseModel] = RunConfig) -> object:
    """The annotation at ``path`` in ``root``'s schema, or ``ValueError`` with a near match.

    Mapping fields (``data.heldout``) take any key as the next segment; list fields take an index.

    >>> field_type("train.lr")
    <class 'float'>
    """
    segs = path.split(".") if isinstance(path, str) else [str(p) for p in path]
    tp: object = root
    done: list[str] = []
    for seg in segs:
        tp = unwrap_optional(tp)
        if is_model(tp):
            fields = list(tp.model_fields)
            if seg not in fields:
                raise ValueError(_unknown_key(seg, ".".join(done), fields))
            tp = tp.model_fields[seg].annotation
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        elif get_origin(tp) is list and seg.isdigit():
            tp = get_args(tp)[0]
        else:
            raise ValueError(f"unknown key '{'.'.join([*done, seg])}': '{'.'.join(done)}' has no fields")
        done.append(seg)
    return tp


def check_path(path: object) -> str:
    """``path`` itself when it names a field of ``RunConfig``; ``ValueError`` otherwise."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"a key must be a dotted field path like 'train.lr', got {path!r}")
    field_type(path)
    return path


def get_path(tree: object, path: str) -> tuple[bool, object]:
    """``(found, value)`` at ``path`` in a nested mapping/list (a dumped config)."""
    node = tree
    for seg in path.split("."):
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            return False, None
    return True, node


def merge(tree: object, patch: object) -> object:
    """``patch`` deep-merged over ``tree`` (mappings merge key by key; anything else replaces). No
    aliasing."""
    if isinstance(tree, dict) and isinstance(patch, dict):
        out = dict(tree)
        for key, value in patch.items():
            out[key] = merge(tree.get(key), value) if key in tree else copy.deepcopy(value)
        return out
    return copy.deepcopy(patch)


def assign(tree: object, path: str, value: object) -> dict[str, object]:
    """``tree`` with ``value`` merged in at the dotted ``path`` (partial mappings merge with what is
    there)."""
    out = merge(tree, nest_dotted({path: value}))
    assert isinstance(out, dict)  # the patch is a mapping: so is what it is merged into
    return out


@overload
def nest_dotted(tree: dict[str, object]) -> dict[str, object]: ...
@overload
def nest_dotted(tree: object) -> object: ...
def nest_dotted(tree: object) -> object:
    """Expand dotted keys of a mapping (``{"train.lr": 1}`` -> ``{"train": {"lr": 1}}``), recursively."""
    if not isinstance(tree, dict):
        return tree
    out: dict[object, object] = {}
    for key, value in tree.items():
        value = nest_dotted(value)
        if isinstance(key, str) and "." in key:
            head, rest = key.split(".", 1)
            prior = out.get(head)
            merged = prior if isinstance(prior, dict) else {}
            out[head] = nest_dotted({**merged, rest: value})
        elif isinstance(prior := out.get(key), dict) and isinstance(value, dict):
            out[key] = {**prior, **value}
        else:
            out[key] = value
    return out


def explain(exc: ValidationError, root: type[BaseModel] = RunConfig) -> tuple[str, str]:
    """``(dotted location, message)`` for the most useful error of ``exc``: an unknown key first (its message
    names the full path and a near match), else the first error, with the wrong value.

    ``describe(*explain(exc))`` is the one line to show.
    """
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(p) for p in err["loc"]]
    if err["type"] == "extra_forbidden":
        try:
            parent = unwrap_optional(field_type(tuple(loc[:-1]), root)) if loc[:-1] else root
            fields = list(parent.model_fields) if is_model(parent) else []
        except ValueError:
            fields = []
        return ".".join(loc), _unknown_key(loc[-1], ".".join(loc[:-1]), fields)
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if err["type"] not in ("value_error", "assertion_error") and not isinstance(err.get("input"), dict):
        msg = f"{msg}, got {err.get('input')!r}"
    return ".".join(loc), msg


def describe(loc: str, msg: str) -> str:
    """``"loc: msg"``, or ``msg`` alone when it already names the key or there is no location."""
    return f"{loc}: {msg}" if loc and not msg.startswith("unknown key") else msg
