"""Run ids: a short hash of the config's fields that differ from their defaults, and ``CONFIG_VERSION``.

The same config is the same run on every machine and across upgrades of ablate:

- Keys are sorted and numbers compare by value (``lr: 0.003``, ``lr: 3e-3`` and an integral ``1.0`` vs ``1``
  give one id).
- A field that holds the value it would take if it were left out is left out of the hash (recursively: a
  nested model keeps only its own non-default fields). Adding a new field with a default therefore changes no
  existing id, and neither does adding a model preset or a variant.
- "The value it would take if left out" is the field's declared default, except in models whose ``before``
  validators fill omitted fields from others (a ``preset`` fills the shape fields, a source's ``loss`` follows
  its ``kind``): there a field is left out only when re-validating without it gives the same model, so
  ``{preset: small, n_layers: 2}`` never collides with ``{preset: small}``.
- What an omitted field means is fixed per ``CONFIG_VERSION`` (``ablate/config/fields.py``), which is hashed
  too: changing a default's value (or a preset's, or a rule that fills a default) needs a bump, and the
  recorded defaults (``ablate/grid/defaults.py``, checked by the tests) say when one was forgotten.

What a run read outside its config (its data's fingerprints) is in identity fields of the config, which ablate
fills when a grid is loaded (``ablate/grid/identity.py``): the run id covers them, and ``stem_id`` is the id
without them, so two runs of one stem read different data.

Stores made under other ids are carried over by ``ablate db rehash`` (``ablate/store/rehash.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from typing import overload

from pydantic import BaseModel, ValidationError

from ablate.config import CONFIG_VERSION, RunConfig, is_shorthand

ID_LENGTH = 12
_MINIMAL_CACHE_SIZE = 4096


@overload
def canonical(value: dict[str, object]) -> dict[str, object]: ...
@overload
def canonical(value: object) -> object: ...
def canonical(value: object) -> object:
    """``value`` with every number in one spelling: an integral float becomes an int; mappings and lists
    recurse.

    >>> canonical({"lr": 3e-3, "steps": 300.0, "on": True})
    {'lr': 0.003, 'steps': 300, 'on': True}
    """
    kind = type(value)  # exact types first: this runs for every field of every run id
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def _key(value: object) -> str:
    return json.dumps(canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_KEYS: dict[str, str] = {}  # a value's JSON as it is -> its canonical JSON


def _fast_key(value: object) -> str:
    """``_key(value)`` through a cache keyed by ``value``'s plain JSON (json's C encoder, no ``canonical``
    walk): a grid's runs repeat a few sections, and this is asked for each section of each run."""
    raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if (key := _KEYS.get(raw)) is None:
        if len(_KEYS) >= _MINIMAL_CACHE_SIZE:
            _KEYS.clear()
        key = _KEYS[raw] = _key(value)
    return key


@cache
def _fills_omitted(cls: type[BaseModel]) -> bool:
    """Does ``cls`` have a ``before``/``wrap`` model validator (which may fill an omitted field from
    others), other than one that only spells out a shorthand (``ablate.config.shorthand``)?"""
    validators = cls.__pydantic_decorators__.model_validators.values()
    return any(v.info.mode in ("before", "wrap")
               and not is_shorthand(v.func)
               for v in validators)


@cache
def _default_keys(cls: type[BaseModel]) -> dict[str, str | None]:
    """Each field's declared default as canonical JSON (None for a required field)."""
    out: dict[str, str | None] = {}
    for name, info in cls.model_fields.items():
        if info.is_required():
            out[name] = None
            continue
        default = info.get_default(call_default_factory=True)
        out[name] = _key(_dump(default))
    return out


def _dump(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _render(value: object, dumped: object, key: str | None = None) -> object:
    """A kept field's value for the hash: nested models reduced to their own non-default fields."""
    if isinstance(value, BaseModel):
        assert isinstance(dumped, dict)  # a model's dump is a mapping, a list's a list, a mapping's a mapping
        return _minimal(type(value), value, dumped, key or _fast_key(dumped))
    if isinstance(value, list):
        assert isinstance(dumped, list)
        return [_render(v, d) for v, d in zip(value, dumped, strict=True)]
    if isinstance(value, dict):
        assert isinstance(dumped, dict)
        return {str(k): _render(v, dumped[k]) for k, v in value.items()}
    return canonical(dumped)


def minimal(model: BaseModel) -> dict[str, object]:
    """The fields of ``model`` that differ from what they would be if left out, nested models reduced the same
    way, numbers canonical. Validating the result gives ``model`` back.

    >>> minimal(RunConfig(seed=2, train={"lr": 3e-3, "steps": 50}))
    {'train': {'steps': 50}, 'seed': 2}
    """
    # a copy: the cache's dicts are shared
    out: dict[str, object] = json.loads(json.dumps(reduced_config(model)))
    return out


def reduced_config(model: BaseModel, dumped: dict[str, object] | None = None) -> dict[str, object]:
    return _minimal(type(model), model, model.model_dump(mode="json") if dumped is None else dumped)


def _minimal(cls: type[BaseModel], model: BaseModel, dumped: dict[str, object], key: str | None = None
             ) -> dict[str, object]:
    """``minimal`` of ``model`` (dumped as ``dumped``). Nested models come with ``key``, their canonical JSON,
    and are cached by it: a grid's runs share a few model, data, train and eval sections."""
    if key is not None and (cached := _CACHE.get((cls, key))) is not None:
        return cached
    field_keys: dict[str, str] = {}
    if _fills_omitted(cls):
        kept = _revalidated(cls, key or _fast_key(dumped), dumped)
    else:
        defaults = _default_keys(cls)
        field_keys = {name: _fast_key(dumped[name]) for name in cls.model_fields}
        kept = [
            name for name in cls.model_fields if defaults[name] is None or field_keys[name] != defaults[name]
        ]
    out = {name: _render(getattr(model, name), dumped[name], field_keys.get(name)) for name in kept}
    if key is not None:
        if len(_CACHE) >= _MINIMAL_CACHE_SIZE:
            _CACHE.clear()
        _CACHE[(cls, key)] = out
    return out


_CACHE: dict[tuple[type[BaseModel], str], dict[str, object]] = {}


def _revalidated(cls: type[BaseModel], key: str, dumped: dict[str, object]) -> list[str]:
    """The fields to keep, dropping in declaration order each one whose absence re-validates to the same
    model."""
    raw = dict(dumped)
    for name in cls.model_fields:
        trial = {k: v for k, v in raw.items() if k != name}
        try:
            same = _key(cls.model_validate(trial).model_dump(mode="json")) == key
        except (ValidationError, ValueError):
            same = False
        if same:
            raw = trial
    return [name for name in cls.model_fields if name in raw]


def identity(config: RunConfig, dumped: dict[str, object] | None = None) -> dict[str, object]:
    """What a run id hashes: ``{"config_version": CONFIG_VERSION, "config": minimal(config)}`` (``dumped``:
    the config's ``model_dump(mode="json")`` when the caller has it already)."""
    return {"config_version": CONFIG_VERSION, "config": reduced_config(config, dumped)}


def canonical_json(config: RunConfig, dumped: dict[str, object] | None = None) -> str:
    """``identity(config)`` as canonical JSON: sorted keys, numbers by value, no whitespace."""
    return json.dumps(identity(config, dumped), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def hash_reduced(reduced: dict[str, object]) -> str:
    """The id of a reduced config (``reduced_config``): the run id, or a stem's (``identity.stem_id``)."""
    text = json.dumps({"config_version": CONFIG_VERSION, "config": reduced}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def run_id(config: RunConfig, dumped: dict[str, object] | None = None) -> str:
    """The run's identity: the first 12 hex digits of the sha256 of ``canonical_json(config)`` (``dumped``:
    the config's ``model_dump(mode="json")`` when the caller has it already: planning 10,000 runs dumps each
    once).

    >>> run_id(RunConfig()) == run_id(RunConfig(train={"lr": 0.003}))
    True
    """
    return hashlib.sha256(canonical_json(config, dumped).encode()).hexdigest()[:ID_LENGTH]


def reduced(value: object) -> object:
    """A default as it counts in a run id: models reduced to their non-default fields (their own fields are
    recorded one by one), so adding a field to ``SourceConfig`` does not read as a change of
    ``data.train``."""
    if isinstance(value, BaseModel):
        return minimal(value)  # a fresh copy (no YAML anchors between equal defaults)
    if isinstance(value, list):
        return [reduced(v) for v in value]
    if isinstance(value, dict):
        return {str(k): reduced(v) for k, v in value.items()}
    return canonical(value)
