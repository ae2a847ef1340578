"""An attention idea of one's own, as an ablate plugin arm: soft-capped softmax attention.

The weights are softmax(cap * tanh(s / cap)) over the visible keys, s = QK^T/sqrt(d) times a learned per-head
temperature (so the arm has parameters to count). ablate imports this module only because the grid lists it
(``plugins: [myattn]``); see ``grid.yaml`` beside this folder and docs/internals.md, "plugins".
"""

from __future__ import annotations

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
