"""Attention ideas of one's own, as ablate plugin arms, one for each kind of slot a plugin fills:

- ``CappedSoftmax`` (the attention weights): softmax(cap * tanh(s / cap)) over the visible keys, s =
  QK^T/sqrt(d) times a learned per-head temperature (so the arm has parameters to count);
- ``HeadGate`` (a gate at one of the paper's positions G1-G5, the grid's ``position``): one sigmoid score per
  head from the block's normed input, its scores reported as the gate statistics;
- ``LayerScale`` (the block's attention output): a learned per-channel scale before the residual add (Touvron
  et al. 2021), no scores.

Each module trains from the weights its ``__init__`` makes (seeded with the run's seed), unless its class says
``init = "ablate"``, as ``HeadGate`` does: its projection is then drawn as the decoder's own gates are,
N(0, init_std) (with ``model.init_rng: per-parameter``, at G1 it starts equal to the catalogue's
``sdpa-headwise`` gate).

ablate imports this module only because the grid lists it (``plugins: [myattn]``); see ``grid.yaml`` beside
this folder and docs/internals.md, "plugins".
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from ablate.ablations.weights import causal_scores, mix


class CappedSoftmax(nn.Module):
    """Fills ablate's attention weights slot: ``forward(q, k, v, probe) -> (y, p | None)``."""

    slot = "weights"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        cap: float = Field(gt=0, description="the logits' soft cap")

    def __init__(self, args: Args, cfg) -> None:
        super().__init__()
        self.cap = args.cap
        self.temperature = nn.Parameter(torch.ones(cfg.n_heads))

    def forward(self, q, k, v, probe: bool = False):
        scores, mask = causal_scores(q, k)  # (B, q, T, T) float32, (T, T)
        scores = scores * self.temperature.float().view(1, -1, 1, 1)
        capped = self.cap * torch.tanh(scores / self.cap)
        p = capped.masked_fill(~mask, float("-inf")).softmax(-1)
        return mix(p, q, v), (p if probe else None)


class HeadGate(nn.Module):
    """Fills a gate slot: ``forward(y, x) -> (y', scores)``, ``y`` the tensor gated at ``position`` (G1 and
    G4: ``[B, T, q, dk]``; G2 and G3: ``[B, T, k, dk]``; G5: ``[B, T, d]``), ``x [B, T, d]`` the block's
    normed input."""

    slot = "gate"
    init = "ablate"  # the projection drawn as the decoder's gates are, not nn.Linear's own init

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        position: Literal["G1", "G2", "G3", "G4", "G5"] = Field("G2", description="where the gate sits")

    def __init__(self, args: Args, cfg) -> None:
        super().__init__()
        heads = {"G1": cfg.n_heads, "G4": cfg.n_heads, "G2": cfg.n_kv_heads, "G3": cfg.n_kv_heads, "G5": 1}
        self.proj = nn.Linear(cfg.d_model, heads[args.position], bias=False)
        self.per_head = args.position != "G5"  # G5's one "head" is the flat output

    def forward(self, y, x):
        s = torch.sigmoid(self.proj(x))  # (B, T, heads)
        return y * (s.unsqueeze(-1) if self.per_head else s).to(y.dtype), s


class LayerScale(nn.Module):
    """Fills the block's attention output slot: ``forward(a, x) -> (a', None)``, ``a`` and ``x`` ``[B, T,
    d]``."""

    slot = "attn_out"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        init: float = Field(1.0, description="the scale's initial value")

    def __init__(self, args: Args, cfg) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((cfg.d_model,), args.init))

    def forward(self, a, x):
        return a * self.scale.to(a.dtype), None
