"""The attention weights slot: how a query's scores over the keys become the weights that mix the values.

Every module here takes ``q [B, q, T, dk]`` and ``k``/``v`` ``[B, k, T, dk]`` (kv heads not yet repeated, for
GQA), and the block's normed input ``x [B, T, d]`` (read by the arms whose weights depend on the token
itself), and returns ``(y [B, q, T, dk], p)``: ``p [B, heads, T, T]`` the weights on the real keys when
``probe=True`` (the explicit probe path, which F-Attn reads), else None. Causal everywhere. Which one a model
holds is chosen at build time from ``ModelConfig.attn_weights`` (``weights_for``):

- ``softmax`` (the default, every paper arm): softmax(QKᵀ/√d + mask) through the fused SDPA kernel.
- ``sink-learned``: a learned per-head logit in the softmax's denominator (gpt-oss; Xiao et al. 2023's sink).
- ``softmax1``: softmax with an extra zero logit, "softmax off by one" (Miller 2023): a sink fixed at 0.
- ``sigmoid``: sigmoid(QKᵀ/√d + b), b = -log(T), no normalisation across keys (Ramapuram et al. 2024).
- ``softpick``: ReLU(eˣ - 1) / (Σ|eˣ - 1| + ε) over the visible keys (Zuhri et al. 2025).
- ``differential``, ``diff-v2``: two softmax maps, the second subtracted (Ye et al. 2025; DIFF V2, 2026):
  ``ablate/ablations/differential.py``.
- ``forgetting``, ``forgetting-pro``, ``selective``: softmax over logits less a cumulative sum, a forget
  gate's decay (Lin et al. 2025; Pro: with its key and value shifts and per-head QK-norm) or what head 0
  selected away (Leviathan et al. 2025): ``ablate/ablations/cumulative.py``.

A sink is one extra key column with a zero key and a zero value, its logit added by the float mask, so the two
sink arms reuse SDPA; sigmoid and softpick have no fused kernel and compute their weights by hand.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ablate.ablations.config import ModelConfig
from ablate.ablations.cumulative import Forgetting, ForgettingPro, Selective
from ablate.ablations.differential import Differential, DiffV2
from ablate.ablations.scores import causal_scores, explicit_attention, mix

SOFTPICK_EPS = 1e-6  # added to the e^-m-scaled sum, as the authors' kernel does


class Softmax(nn.Module):
    """softmax(QKᵀ/√d + mask): the fused kernel in training, by hand when probed (the same numbers)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if probe:
            return explicit_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), None


class SinkSoftmax(nn.Module):
    """Softmax over the keys and one sink of logit ``sink[h]`` whose value is zero: rows sum to less than one.

    ``learned``: ``sink`` is a parameter per query head, zero-initialised (gpt-oss); else a zero buffer
    (softmax off by one). ``p`` is the weights on the real keys (the sink's share left out).
    """

    def __init__(self, n_heads: int, *, learned: bool):
        super().__init__()
        if learned:
            self.sink = nn.Parameter(torch.zeros(n_heads))
        else:
            self.register_buffer("sink", torch.zeros(n_heads), persistent=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, H, T, dk = q.shape
        if probe:
            scores, mask = causal_scores(q, k)
            sink = self.sink.float().view(1, H, 1, 1).expand(B, H, T, 1)
            # (B, q, T, T)
            p = torch.cat([sink, scores.masked_fill(~mask, float("-inf"))], -1).softmax(-1)[..., 1:]
            return mix(p, q, v), p
        zero = k.new_zeros(B, k.shape[1], 1, dk)
        k, v = torch.cat([zero, k], 2), torch.cat([zero, v], 2)  # (B, k, 1 + T, dk): the sink is key 0
        causal = torch.zeros(T, T, dtype=q.dtype, device=q.device).masked_fill(
            ~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
        bias = torch.cat([self.sink.to(q.dtype).view(H, 1, 1).expand(H, T, 1), causal.expand(H, T, T)], -1)
        # bias (q, T, 1 + T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True), None


class SigmoidWeights(nn.Module):
    """sigmoid(QKᵀ/√d - log T) on the visible keys, 0 elsewhere; no normalisation (Ramapuram et al. 2024)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        scores, mask = causal_scores(q, k)
        p = torch.sigmoid(scores - math.log(q.shape[-2])).masked_fill(~mask, 0.0)
        return mix(p, q, v), (p if probe else None)


class Softpick(nn.Module):
    """ReLU(eˣ - 1) / (Σ_visible |eˣ - 1| + ε) (Zuhri et al. 2025), computed as the authors' kernel does
    (``flash_softpick_attn.py``): both sides scaled by e^-m, m the row's largest visible score, and ε = 1e-6
    added to the scaled sum, so nothing overflows."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        scores, mask = causal_scores(q, k)
        m = scores.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)  # (B, q, T, 1)
        shifted = (torch.exp(scores - m) - torch.exp(-m)).masked_fill(~mask, 0.0)  # (eˣ - 1) e^-m
        p = shifted.relu() / (shifted.abs().sum(-1, keepdim=True) + SOFTPICK_EPS)
        return mix(p, q, v), (p if probe else None)


def weights_for(cfg: ModelConfig, layer: int = 0) -> nn.Module:
    """The weights module of ``cfg.attn_weights`` (validated there) for the decoder's ``layer`` (0-based:
    differential attention's lambda_init depends on it)."""
    kind = cfg.attn_weights
    if kind in ("sink-learned", "softmax1"):
        return SinkSoftmax(cfg.n_heads, learned=kind == "sink-learned")
    if kind == "differential":
        return Differential(cfg, layer)
    if kind in ("diff-v2", "forgetting", "forgetting-pro"):
        return {"diff-v2": DiffV2, "forgetting": Forgetting, "forgetting-pro": ForgettingPro}[kind](cfg)
    plain = {"softmax": Softmax, "sigmoid": SigmoidWeights, "softpick": Softpick, "selective": Selective}
    return plain[kind]()
