"""Parameter counting (on the meta device: paper scale costs no memory), added parameters, FFN matching.

Non-embedding parameters exclude the token embedding and an untied LM head (the vocabulary matrices).
Importing this module never imports torch; the counting functions do, unless the count is kept from an earlier
process (``ablate.ablations.meta_counts``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from ablate.ablations.config import ModelConfig
from ablate.ablations.meta_counts import kept
from ablate.ablations.variants import apply_variant, without_variant
from ablate.errors import ConfigError


class ParamCount(NamedTuple):
    """``total`` parameters (shared ones once) and ``non_embedding`` (without the vocabulary matrices)."""

    total: int
    non_embedding: int


def _count(cfg_json: str) -> ParamCount:
    return ParamCount(*_counted(cfg_json))


def _count_now(cfg_json: str) -> list[int]:
    from ablate.ablations.model import build_model

    cfg = ModelConfig.model_validate_json(cfg_json)
    model = build_model(cfg, device="meta")
    total = sum(p.numel() for p in model.parameters())
    vocab = model.embed.weight.numel() + (0 if cfg.tie_embeddings else model.lm_head.weight.numel())
    return [total, total - vocab]


_counted = kept("params")(_count_now)  # kept on disk per version of ablate's code: not for a plugin's


@functools.lru_cache(maxsize=4096)
def count_params(cfg: ModelConfig) -> ParamCount:
    """Total and non-embedding parameters of ``cfg``'s model, counted on the meta device (cached by config).

    >>> count_params(ModelConfig(preset="tiny")).total
    119168
    """
    if cfg.plugin is not None:  # the user's code may change under the same config: count it now
        return ParamCount(*_count_now(cfg.model_dump_json()))
    return _count(cfg.model_dump_json())


def added_params(base: ModelConfig, variant: str) -> int:
    """Parameters the variant adds over ``base`` (negative when it removes some)."""
    return count_params(apply_variant(base, variant)).total - count_params(without_variant(base,
                                                                                           variant)).total


def match_ffn(cfg: ModelConfig, target_total: int) -> tuple[ModelConfig, float]:
    """Re-width the FFN (``ffn_dim``, or ``expert_dim`` for MoE) so the total is closest to ``target_total``.

    Returns the new config and the residual fraction ``(total - target) / target``. The count is linear in the
    width, so two counts give the exact answer.
    """
    if target_total <= 0:
        raise ConfigError(f"target parameter count must be positive, got {target_total}",
                          where="match_params")
    key = "expert_dim" if cfg.is_moe else "ffn_dim"

    def with_width(w: int) -> ModelConfig:
        return ModelConfig(**{**cfg.model_dump(), key: w})

    w0 = getattr(cfg, key)
    t0, t1 = count_params(with_width(w0)).total, count_params(with_width(w0 + 1)).total
    per_unit = t1 - t0
    best = max(1, round(w0 + (target_total - t0) / per_unit))
    new = with_width(best)
    total = count_params(new).total
    return new, (total - target_total) / target_total
