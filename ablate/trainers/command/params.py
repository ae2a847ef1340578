"""A run's parameters: an arm's overrides merged into ``base``, one canonical form for the run's identity, and
the arguments ``{args}`` becomes in each of the three conventions.

A dotted key and a nested mapping are the same parameter, so every function here works on the nested form:

>>> params = merge({"optim": {"lr": 1e-3, "wd": 0.1}, "gate": False}, {"optim.lr": 3e-4, "gate": True})
>>> params
{'optim': {'lr': 0.0003, 'wd': 0.1}, 'gate': True}
>>> render_args(flatten(with_seed(params, 1, "seed")), "equals", "value")
['--optim.lr=0.0003', '--optim.wd=0.1', '--gate=True', '--seed=1']
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Literal, TypeAlias

from ablate.errors import ConfigError

Value: TypeAlias = "bool | int | float | str | None | list[Value] | dict[str, Value]"
Params: TypeAlias = dict[str, Value]
Style = Literal["equals", "space", "hydra"]


def nest(tree: Mapping[object, object], *, where: str) -> Params:
    """``tree`` with its dotted keys made nested mappings (``{"optim.lr": 1}`` -> ``{"optim": {"lr": 1}}``),
    its values checked to be what a YAML file holds. A parameter given twice in one mapping (``optim.lr`` and
    ``optim: {lr: ...}``), or a value and keys under it (``optim: sgd`` and ``optim.lr``: one would be lost),
    is a ``ConfigError`` naming both spellings."""
    out: Params = {}
    spelled: dict[str, str] = {}  # a leaf's dotted path -> how this mapping spelled it
    above: dict[str, str] = {}  # every path above a leaf -> how this mapping spelled that leaf
    for key, raw in tree.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"a parameter's name is a non-empty string, got {key!r}", where=where)
        value = _value(raw, f"{where}.{key}")
        patch: Value = value
        for part in reversed(key.split(".")):
            if not part:
                raise ConfigError(f"{key!r} is not a dotted name (an empty part)", where=where)
            patch = {part: patch}
        assert isinstance(patch, dict)
        for path in leaves(patch):
            if path in spelled:
                raise ConfigError(f"{path!r} is given twice, as {spelled[path]!r} and as {key!r}; give it "
                                  f"once", where=where)
            parts = path.split(".")
            ancestors = [".".join(parts[:i]) for i in range(1, len(parts))]
            valued = next((spelled[a] for a in ancestors if a in spelled), None)  # a value above this one
            if valued is not None or path in above:  # ... or keys under this value
                value_key, keys_under = (valued, key) if valued is not None else (key, above[path])
                raise ConfigError(f"{value_key!r} is given a value and keys under it ({keys_under!r}): one "
                                  f"of them would be lost; give either", where=where)
            spelled[path] = key
            for a in ancestors:
                above.setdefault(a, key)
        out = _merged(out, patch)
    return out


def merge(base: Mapping[object, object], overrides: object, *, where: str = "arm") -> Params:
    """``base`` with ``overrides`` merged in key by key: a mapping merges into a mapping, any other value
    replaces what was there. ``where`` names the overrides in errors (``grid.arm.gated``).

    >>> merge({"optim": {"lr": 1, "wd": 2}}, {"optim": {"lr": 5}, "n_layer": 4})
    {'optim': {'lr': 5, 'wd': 2}, 'n_layer': 4}
    """
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"an arm is a mapping of overrides of base ({{}} for none), got "
                          f"{type(overrides).__name__} {overrides!r}", where=where)
    return _merged(nest(base, where="base"), nest(overrides, where=where))


def with_seed(params: Params, seed: int, seed_arg: str | None) -> Params:
    """``params`` with the seed under ``seed_arg`` (a dotted name), or unchanged when ``seed_arg`` is None.

    >>> with_seed({"training": {"steps": 10}}, 2, "training.seed")
    {'training': {'steps': 10, 'seed': 2}}
    """
    if seed_arg is None:
        return params
    if seed_arg in leaves(params) or seed_arg in prefixes(params):
        raise ConfigError(f"the parameters set {seed_arg!r}, the seed's name (trainer.seed_arg): the seed "
                          f"comes from the grid's seed axis; remove it from base and the arms", where="base")
    return _merged(params, nest({seed_arg: seed}, where="trainer.seed_arg"))


def flatten(params: Params) -> dict[str, Value]:
    """Dotted name -> value of every parameter; an empty mapping stays a value (it names no parameter).

    >>> flatten({"optim": {"lr": 0.1, "betas": [0.9, 0.95]}, "empty": {}})
    {'optim.lr': 0.1, 'optim.betas': [0.9, 0.95], 'empty': {}}
    """
    out: dict[str, Value] = {}
    for key, value in params.items():
        if isinstance(value, dict) and value:
            out.update({f"{key}.{k}": v for k, v in flatten(value).items()})
        else:
            out[key] = value
    return out


def leaves(params: Params) -> list[str]:
    """The dotted names of ``params``' parameters."""
    return list(flatten(params))


def prefixes(params: Params) -> set[str]:
    """The dotted names of ``params``' mappings (``optim`` for ``optim.lr``)."""
    return {".".join(name.split(".")[:i]) for name in flatten(params) for i in range(1, name.count(".") + 1)}


def canonical(params: Params) -> str:
    """One JSON text per set of parameters, for a run's identity: keys sorted at every level, dotted and
    nested spellings alike, numbers as Python reads them (``1e-2``, ``1.0e-2`` and ``0.01`` are one float).
    An int and a float stay apart (``--max_iters=300`` and ``--max_iters=300.0`` are different commands).

    >>> canonical({"b": 0.01, "a": {"y": 1, "x": True}}) == canonical({"a": {"x": True, "y": 1}, "b": 1.0e-2})
    True
    """
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def text(value: Value, style: Style) -> str:
    """How one value is written: Python's ``str()`` (``True``, ``0.0003``, ``None``), or for ``hydra`` a YAML
    literal (``true``, ``null``, ``[1,2]``, a string quoted when it would read as something else).

    >>> text(3e-4, "equals"), text(True, "equals"), text(True, "hydra"), text("1", "hydra")
    ('0.0003', 'True', 'true', "'1'")
    """
    return _yaml(value) if style == "hydra" else str(value)


def render_args(flat: Mapping[str, Value], style: Style, bools: Literal["value", "flag"]) -> list[str]:
    """The argv items ``{args}`` stands for: ``--key=value`` (``equals``), ``--key value`` (``space``, two
    items) or ``key=value`` (``hydra``); with ``bools="flag"`` a true bool is ``--key`` and a false one is
    left out. A value that renders to nothing is a ``ConfigError``.

    >>> render_args({"lr": 0.001, "gate": True, "compile": False}, "space", "flag")
    ['--lr', '0.001', '--gate']
    >>> render_args({"optim.lr": 0.001, "tags": ["a", "b c"]}, "hydra", "value")
    ['optim.lr=0.001', "tags=[a,'b c']"]
    """
    out: list[str] = []
    for key, value in flat.items():
        if bools == "flag" and isinstance(value, bool):
            out += [f"--{key}"] if value else []
            continue
        if value == {} or (value == "" and style != "hydra"):
            raise ConfigError(f"the parameter {key!r} renders to nothing in {{args}} (its value is "
                              f"{value!r}); give it a value or remove it")
        written = text(value, style)
        out += [f"{key}={written}"] if style == "hydra" else \
            [f"--{key}", written] if style == "space" else [f"--{key}={written}"]
    return out


def _value(raw: object, where: str) -> Value:
    """``raw`` as a parameter value (what YAML holds), else a ``ConfigError`` naming where."""
    if raw is None or isinstance(raw, bool | int | float | str):
        return raw
    if isinstance(raw, list | tuple):
        return [_value(item, f"{where}[{i}]") for i, item in enumerate(raw)]
    if isinstance(raw, Mapping):
        return nest(raw, where=where)
    raise ConfigError(f"a parameter is a number, string, bool, null, list or mapping, got "
                      f"{type(raw).__name__} {raw!r}", where=where)


def _merged(into: Params, patch: Params) -> Params:
    out = dict(into)
    for key, value in patch.items():
        prior = out.get(key)
        out[key] = _merged(prior, value) if isinstance(prior, dict) and isinstance(value, dict) else value
    return out


_PLAIN = re.compile(r"[A-Za-z0-9_./\-+@%:~]+")  # a hydra override value that needs no quotes
_NOT_STRING = re.compile(  # what YAML would read as a number, a bool or null
    r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?|(?i:true|false|null|[-+]?(inf|nan)|~)")


def _yaml(value: Value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"  # YAML needs the spaces
    if _PLAIN.fullmatch(value) and not _NOT_STRING.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
