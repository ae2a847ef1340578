"""Stem ids: a run's id without its identity fields (what it read outside its config). Runs of one stem
differ only in what they read, so a stored run of the planned run's stem under another id read other data
(``ablate plan`` shows it stale). The stem is hashed from the run's own reduced config with its identity
fields taken out, without reducing the config again.
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel

from ablate.config import RunConfig
from ablate.grid.identity import children, identity_fields, stage_shape
from ablate.grid.ids import hash_reduced, reduced, reduced_config


def strip_minimal(reduced: dict[str, object]) -> dict[str, object]:
    """A run's reduced config (``ablate.grid.ids.minimal``) with its identity fields taken out, as the reduced
    config of ``strip(config)`` is (a field left at its default by that is left out); ``reduced`` itself when
    it holds none. What the stem id hashes, without reducing the config again."""
    out = _strip_reduced(RunConfig, reduced)
    assert isinstance(out, dict)  # a mapping in, a mapping out
    return out


def _strip_reduced(cls: type[BaseModel], reduced: object) -> object:
    if not isinstance(reduced, dict):
        return reduced
    out: dict[str, object] = {}
    changed = False
    shapes = {name: (shape, sub) for name, shape, sub in children(cls)}
    for name, value in reduced.items():
        if name in identity_fields(cls):
            changed = True
            continue
        new = value
        if name in shapes:
            shape, sub = shapes[name]
            new = _strip_shaped(shape, sub, value)
        elif cls is RunConfig and name == "stages" and isinstance(value, list):
            new = [_strip_stage(stage) if isinstance(stage, dict) else stage for stage in value]
            new = value if all(a is b for a, b in zip(new, value, strict=True)) else new
        if new is not value:
            changed = True
            if name in shapes and new == _reduced_default(cls, name):
                continue  # back at its default: left out, as minimal() leaves it
        out[name] = new
    return out if changed else reduced


def _strip_shaped(shape: str, sub: type[BaseModel], value: object) -> object:
    if shape == "list" and isinstance(value, list):
        new = [_strip_reduced(sub, v) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    if shape == "dict" and isinstance(value, dict):
        new_d = {k: _strip_reduced(sub, v) for k, v in value.items()}
        return value if all(new_d[k] is value[k] for k in value) else new_d
    return _strip_reduced(sub, value) if shape == "model" else value


def _strip_stage(stage: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in stage.items():
        found = stage_shape(key)
        out[key] = _strip_shaped(*found, value) if found is not None else value
    return stage if all(out[k] is stage[k] for k in stage) else out


@cache
def _reduced_default(cls: type[BaseModel], name: str) -> object:
    """The reduced form of a field's default (``{}`` for a model section left at its defaults)."""
    info = cls.model_fields[name]
    return None if info.is_required() else reduced(info.get_default(call_default_factory=True))


def run_and_stem_ids(config: RunConfig, dumped: dict[str, object] | None = None) -> tuple[str, str]:
    """``(run_id(config), stem_id(config))`` at the cost of one: the stem is hashed from the run's own reduced
    config with its identity fields taken out (``strip_minimal``)."""
    small = reduced_config(config, dumped)
    stripped = strip_minimal(small)
    rid = hash_reduced(small)
    return rid, (rid if stripped is small else hash_reduced(stripped))


def stem_id(config: RunConfig, dumped: dict[str, object] | None = None) -> str:
    """The run id of ``config`` without its identity fields (``strip``): runs of one stem
    differ only in what they read outside their config. A config without identity values is its own stem.

    >>> from ablate.grid.ids import run_id
    >>> cfg = RunConfig(data={"train": [{"kind": "text", "path": "/d/a.txt", "fingerprint": "ab12"}]})
    >>> stem_id(cfg) == run_id(cfg.model_copy(update={"data": cfg.data.model_copy(update={
    ...     "train": [cfg.data.train[0].model_copy(update={"fingerprint": None})]})}))
    True
    """
    return run_and_stem_ids(config, dumped)[1]
