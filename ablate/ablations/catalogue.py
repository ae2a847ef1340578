"""The catalogue as ``ablate variants`` lists it: every variant of ``variants.VARIANTS``, then the plugin arms
installed packages register, with the parameters each adds at a preset.

It sits above the variants, the parameter counts and the plugins, which it reads; none of them reads it.
"""

from __future__ import annotations

from typing import Any

from ablate.ablations.config import ModelConfig
from ablate.ablations.params import added_params
from ablate.ablations.plugins import catalogue_rows as plugin_rows
from ablate.ablations.presets import PRESETS
from ablate.ablations.variants import VARIANTS
from ablate.errors import ConfigError, one_of


def catalogue_rows(preset: str | None = None) -> list[dict[str, Any]]:
    """``ablate variants``: every variant as a JSON-ready dict, then the plugin arms installed packages
    register (``ablate.arms`` entry points), with ``added_params`` at ``preset`` when given (None for an
    MoE-only variant on a dense preset, and for a plugin arm, whose arguments the grid gives). An unknown
    preset is a ConfigError naming ``--preset``."""
    rows = [v.as_dict() for v in VARIANTS.values()] + plugin_rows()
    if preset is None:
        return rows
    if preset not in PRESETS:
        raise ConfigError(one_of(preset, PRESETS, what="preset"), where="--preset")
    base = ModelConfig(preset=preset)
    for row in rows:
        # counted only when asked for the plugin's own arguments: none here
        plugin = row["name"] not in VARIANTS
        row["added_params"] = None if plugin or (row["requires_moe"] and not base.is_moe) else added_params(
            base, row["name"])
    return rows
