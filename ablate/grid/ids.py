"""Run ids: a short hash of the canonical JSON of the fully resolved ``RunConfig``.

The same config is the same run on every machine, whatever the grid file looked like: defaults are filled in
(the config is dumped whole), keys are sorted, and numbers compare by value, so ``lr: 0.003``, ``lr: 3e-3`` and
an integral ``1.0`` vs ``1`` give one id.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ablate.config import RunConfig

ID_LENGTH = 12


def canonical(value: Any) -> Any:
    """``value`` with every number in one spelling: an integral float becomes an int; mappings and lists recurse.

    >>> canonical({"lr": 3e-3, "steps": 300.0, "on": True})
    {'lr': 0.003, 'steps': 300, 'on': True}
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def canonical_json(config: RunConfig) -> str:
    """The resolved config as canonical JSON: all fields, sorted keys, numbers by value, no whitespace."""
    return json.dumps(
        canonical(config.model_dump(mode="json")), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def run_id(config: RunConfig) -> str:
    """The run's identity: the first 12 hex digits of the sha256 of ``canonical_json(config)``.

    >>> run_id(RunConfig()) == run_id(RunConfig(train={"lr": 0.003}))
    True
    """
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:ID_LENGTH]
