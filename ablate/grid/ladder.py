"""Scaling ladders: a ``ladder:`` section trains every run of a grid at several model sizes, each for a token
budget that grows with its size (compute-matched, as OLMo's model ladders and Chinchilla do).

::

    ladder:
      sizes:                           # the rungs, smallest first (the order the runs are listed and started
      in)
        - tiny                         # a size preset: its shape (layers, width, heads, FFN, experts)
        - {d_model: 96, n_layers: 3}   # a width/depth pair: heads, kv heads and FFN scale with the width
        - {preset: small, n_layers: 4} # a preset's shape with fields changed
      tokens_per_param: 20             # the budget: each rung trains 20 tokens per non-embedding parameter

The ladder is one more axis of the grid's product, varying slowest: every rung runs every variant, seed and
learning rate. A rung sets only the model's shape; the vocabulary, tied embeddings and RoPE base stay the base
model's at every rung, so losses along the ladder are measured on the same tokens. Its ``train.steps`` follow
from the budget at the run's batch and sequence length: ``round(tokens_per_param * N / (batch_size *
seq_len))`` with ``N`` the non-embedding parameters of the rung's model without its variant, so every variant
of a rung reads the same batches, and a gate's extra compute is counted in its FLOPs
(``ablate.ablations.flops``) rather than paid for with fewer steps. ``match_params`` matches each run to its
own rung.

Pure (``ladder_axis`` needs no torch); ``budget_steps`` counts parameters on the meta device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ablate.ablations.config import ModelConfig
from ablate.ablations.flops import flops_per_token
from ablate.ablations.params import count_params
from ablate.ablations.presets import PRESETS
from ablate.ablations.variants import apply_variant
from ablate.config import RunConfig, stage_configs
from ablate.errors import ConfigError, did_you_mean, one_of
from ablate.grid.paths import describe, explain

# What a rung sets: the model's shape. Everything else of the model (vocabulary, RoPE, the variant's arms) is
# the base's at every rung.
SHAPE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn_dim",
                "n_experts", "expert_dim", "moe_top_k")
# Fields a preset sets that are not shape: pinned to the base model's so that naming a preset in a rung does
# not change the vocabulary the ladder is measured on.
PINNED_FIELDS = ("vocab_size", "tie_embeddings", "rope_theta")
RUNG_KEYS = ("preset", *SHAPE_FIELDS)


class LadderSpec(BaseModel):
    """The ``ladder:`` section as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sizes: list[str | dict[str, Any]] = Field(description="the rungs: size presets, or mappings of shape "
                                                          "fields (d_model and n_layers: width and depth)")
    tokens_per_param: float = Field(gt=0, description="training tokens per non-embedding parameter of a rung")

    @field_validator("sizes", mode="before")
    @classmethod
    def _sizes(cls, sizes: Any) -> Any:
        for i, size in enumerate(sizes if isinstance(sizes, list) else []):
            if not isinstance(size, str | dict):
                raise ValueError(f"item {i} is {size!r}: a size is a preset name (tiny) or a mapping of "
                                 "shape fields ({d_model: 128, n_layers: 4})")
        if isinstance(sizes, list) and not sizes:
            raise ValueError("a ladder needs at least one size (a preset name, or {d_model: W, n_layers: "
                             "D}), got []")
        return sizes


def rung_label(model: Mapping[str, Any]) -> str:
    """A rung's short name from its (resolved) model fields: ``L6·d256``."""
    return f"L{model['n_layers']}·d{model['d_model']}"


def _scaled(base: ModelConfig, size: dict[str, Any], where: str) -> dict[str, Any]:
    """The shape of a width/depth rung: fields it gives as given; heads, kv heads, FFN and expert widths that
    it does not give follow its width at the base model's ratios (head_dim kept)."""
    start = ModelConfig(preset=size["preset"]) if "preset" in size else base
    shape = {k: getattr(start, k) for k in SHAPE_FIELDS} | {k: v for k, v in size.items() if k != "preset"}
    d = shape["d_model"]
    if not all(isinstance(v, int) and v >= 0 for v in shape.values()) or not d or d == start.d_model:
        return shape  # nothing to scale (or a bad value, which validation names)
    if "n_heads" not in size:
        if d % shape["head_dim"]:
            raise ConfigError(f"d_model {d} is not a multiple of head_dim {shape['head_dim']}: give n_heads "
                              "(and head_dim) for this size", where=where)
        shape["n_heads"] = d // shape["head_dim"]
    if "n_kv_heads" not in size:
        kv = shape["n_heads"] * start.n_kv_heads / start.n_heads
        if kv != int(kv) or kv < 1:
            raise ConfigError(f"{shape['n_heads']} heads cannot keep the base's "
                              f"{start.n_heads}:{start.n_kv_heads} query:kv head ratio; give n_kv_heads for "
                              "this size", where=where)
        shape["n_kv_heads"] = int(kv)
    if "ffn_dim" not in size:
        shape["ffn_dim"] = max(1, round(d * start.ffn_dim / start.d_model))
    if "expert_dim" not in size and start.expert_dim:
        shape["expert_dim"] = max(1, round(d * start.expert_dim / start.d_model))
    return shape


def rung_models(spec: LadderSpec, base_model: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """Each rung's model fields (shape, the preset it names, the base's pinned fields), checked."""
    try:
        base = ModelConfig.model_validate(dict(base_model))
    except ValidationError as exc:
        loc, msg = explain(exc, ModelConfig)
        raise ConfigError(describe(f"model.{loc}" if loc else "model", msg),
                          where=f"{source}: base") from None
    out = []
    for i, size in enumerate(spec.sizes):
        where = f"{source}: ladder.sizes[{i}]"
        size = {"preset": size} if isinstance(size, str) else dict(size)
        if not size:
            raise ConfigError("an empty size; give a preset or d_model/n_layers", where=where)
        for key in size:
            if key not in RUNG_KEYS:
                raise ConfigError(f"unknown size field {key!r}{did_you_mean(key, RUNG_KEYS)}; allowed: "
                                  f"{', '.join(RUNG_KEYS)}", where=where)
        if "preset" in size and size["preset"] not in PRESETS:
            raise ConfigError(one_of(size["preset"], PRESETS, what="preset"), where=where)
        fields = _scaled(base, size, where)
        if "preset" in size:
            fields = {"preset": size["preset"], **fields, **{k: getattr(base, k) for k in PINNED_FIELDS}}
        try:
            resolved = ModelConfig.model_validate({**base.model_dump(), **fields})
        except ValidationError as exc:
            loc, msg = explain(exc, ModelConfig)
            raise ConfigError(f"{loc + ': ' if loc else ''}{msg}", where=where) from None
        out.append({k: getattr(resolved, k) for k in fields})
    return out


def ladder_axis(spec: LadderSpec, base: Mapping[str, Any], source: str, *, axis_paths: Sequence[str] = (),
                include: Sequence[Any] = (), base_origins: Mapping[str, str] | None = None,
                ) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
    """The ladder as an axis of the product: ``(paths, rows)``, one row of ``model.*`` values per rung.

    Also refuses what a ladder cannot be combined with: ``train.steps`` in ``base`` (the budget sets it), an
    axis (``axis_paths``) that varies a field a rung sets, and ``include`` entries (they would stand outside
    it).

    >>> paths, rows = ladder_axis(LadderSpec(sizes=["tiny", {"d_model": 128}], tokens_per_param=20),
    ...                           {"model": {"preset": "tiny"}}, "g.yaml")
    >>> dict(zip(paths, rows[1]))["model.n_heads"], dict(zip(paths, rows[1]))["model.ffn_dim"]
    (8, 384)
    """
    where = f"{source}: ladder"
    train = base.get("train")
    train = train if isinstance(train, dict) else {}
    if "steps" in train:
        origin = "--set" if "train.steps" in (base_origins or {}) else "base"
        raise ConfigError(f"train.steps follows from the ladder's budget (tokens_per_param); remove it from "
                          f"{origin}", where=where)
    if include:
        raise ConfigError("include entries cannot be combined with a ladder (every run of a ladder is a rung "
                          "of its product); write their values as axes instead", where=where)
    model = base.get("model")
    model = model if isinstance(model, dict) else {}
    models = rung_models(spec, model, source)
    keys = [k for k in ("preset", *SHAPE_FIELDS, *PINNED_FIELDS) if any(k in m for m in models)]
    paths = tuple(f"model.{k}" for k in keys)
    for path in axis_paths:
        if path == "train.steps" or path in paths or path == "model":
            raise ConfigError(f"'{path}' is set by each rung of the ladder and cannot be an axis too",
                              where=where)
    base_model = ModelConfig.model_validate(dict(model))
    rows = tuple(tuple(m.get(k, getattr(base_model, k)) for k in keys) for m in models)
    return paths, rows


def budget_steps(config: RunConfig, spec: LadderSpec, where: str) -> RunConfig:
    """``config`` with ``train.steps`` from the ladder's budget: ``tokens_per_param`` times the non-embedding
    parameters of its model (without the variant), over the tokens of one step. Zero steps is an error."""
    n = count_params(config.model).non_embedding
    per_step = config.train.batch_size * config.data.seq_len
    steps = round(spec.tokens_per_param * n / per_step)
    if steps < 1:
        raise ConfigError(
            f"tokens_per_param {spec.tokens_per_param:g} gives {spec.tokens_per_param * n:,.0f} tokens for "
            f"the {rung_label(config.model.model_dump())} rung ({n:,} non-embedding parameters), under one "
            f"step of {per_step:,} tokens (batch_size x seq_len): zero steps; raise tokens_per_param or "
            "shrink the batch",
            where=where)
    return config.model_copy(update={"train": config.train.model_copy(update={"steps": steps})})


def tokens_per_run(config: RunConfig) -> int:
    """Tokens a run trains on over all its stages (steps x batch x sequence length)."""
    return sum(c.train.steps * c.train.batch_size * c.data.seq_len for c in stage_configs(config))


def planned_flops(config: RunConfig) -> int:
    """Training FLOPs a run is planned to spend: per stage, tokens x FLOPs per token of its effective
    model."""
    model = apply_variant(config.model, config.variant)
    return sum(c.train.steps * c.train.batch_size * c.data.seq_len * flops_per_token(model, c.data.seq_len)
               for c in stage_configs(config))
