"""The recorded defaults of every config field, so that a default's value cannot change unnoticed.

A run id hashes only the fields that differ from their defaults (``ablate/grid/ids.py``), so what an omitted
field means must not change while ``CONFIG_VERSION`` stays the same. ``defaults.yaml`` (next to this file)
records, at one ``CONFIG_VERSION``, the default of every field by dotted path (``train.lr``,
``data.train[].weight`` for the models in a list, ``data.heldout{}.kind`` in a mapping,
``model.gate.position`` in an optional one) and every preset's values (``model.preset=small.n_layers``).
``check()`` compares them with the code; the tests fail on any difference:

- a default whose value changed: bump ``CONFIG_VERSION`` (``ablate/config/fields.py``), then record;
- a field added or removed, or a new ``CONFIG_VERSION``: record (``python -m ablate.grid.defaults --record``;
  a new field with a default changes no run id).
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ablate.ablations.presets import PRESETS
from ablate.config import CONFIG_VERSION, RunConfig
from ablate.grid.ids import canonical, reduced
from ablate.layout import atomic_write

RECORD = Path(__file__).with_name("defaults.yaml")
RECORD_COMMAND = "python -m ablate.grid.defaults --record"


def models_in(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The config models a field holds, with the path suffix of their fields: ``M | None`` -> "", ``list[M]``
    -> "[]", ``dict[str, M]`` -> "{}"."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [m for a in args for m in models_in(a)]
    if origin is list:
        return [(m, "[]" + s) for a in args for m, s in models_in(a)]
    if origin is dict:
        return [(m, "{}" + s) for m, s in models_in(args[-1])] if args else []
    return []


def defaults(root: type[BaseModel] = RunConfig) -> dict[str, Any]:
    """Every field's default by dotted path (required fields have none), then every model preset's values."""

    out: dict[str, Any] = {}

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, info in cls.model_fields.items():
            path = f"{prefix}{name}"
            if not info.is_required():
                out[path] = reduced(info.get_default(call_default_factory=True))
            for sub, suffix in models_in(info.annotation):
                walk(sub, f"{path}{suffix}.")

    walk(root, "")
    for preset, values in PRESETS.items():
        out.update({f"model.preset={preset}.{k}": canonical(v) for k, v in values.items()})
    return dict(sorted(out.items()))


def recorded(path: Path = RECORD) -> tuple[int | None, dict[str, Any]]:
    """``(config_version, defaults)`` as recorded (``(None, {})`` when nothing is)."""
    import yaml

    if not path.is_file():
        return None, {}
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("config_version"), dict(data.get("defaults") or {})


def check(root: type[BaseModel] = RunConfig, *, version: int = CONFIG_VERSION,
          record: Path = RECORD) -> list[str]:
    """What differs between the code's defaults and the record, each a line saying what to do (empty:
    nothing)."""
    at, old = recorded(record)
    new = defaults(root)
    changed = [p for p in old if p in new and old[p] != new[p]]
    if changed and at == version:
        return [f"the default of {p} changed from {old[p]!r} to {new[p]!r} but CONFIG_VERSION is still "
                f"{version}: bump it in ablate/config/fields.py (runs that left {p} out meant {old[p]!r}), "
                f"then {RECORD_COMMAND}; users carry their stores over with `ablate db rehash`"
                for p in changed]
    problems = []
    if at != version:
        problems.append(f"the defaults were recorded at CONFIG_VERSION {at}, the code is at {version}: "
                        f"{RECORD_COMMAND}")
    added = [p for p in new if p not in old]
    removed = [p for p in old if p not in new]
    if added:
        problems.append(f"new config fields or presets not recorded: {', '.join(added)} (their defaults "
                        f"change no run id): {RECORD_COMMAND}")
    if removed:
        problems.append(f"recorded fields or presets that are gone: {', '.join(removed)}: {RECORD_COMMAND}")
    return problems


def write_record(path: Path = RECORD) -> Path:
    """Record the code's defaults at the current ``CONFIG_VERSION``."""
    import yaml

    text = ("# Written by `" + RECORD_COMMAND + "`; checked by tests/unit/grid/test_run_ids.py (see "
                                                "ablate/grid/defaults.py)\n"
            + yaml.safe_dump({"config_version": CONFIG_VERSION, "defaults": defaults()}, sort_keys=False,
                             default_flow_style=None, allow_unicode=True, width=120))
    return atomic_write(path, text)


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: {RECORD_COMMAND}")
    print(f"recorded {len(defaults())} defaults at CONFIG_VERSION {CONFIG_VERSION} in {write_record()}")
