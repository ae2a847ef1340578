"""Differential attention: two softmax maps per head, the second subtracted, so what both attend to cancels.

- ``Differential`` (Ye et al. 2025, "Differential Transformer", ICLR): adjacent heads are paired. Query heads
  2i, 2i+1 are the Q1, Q2 of differential head i; key/value heads 2j, 2j+1 are the K1, K2 of kv pair j, and
  their two values side by side its V, of width 2 dk. The weights are

      A = softmax(Q1 K1ᵀ / √dk) - λ softmax(Q2 K2ᵀ / √dk),  λ = exp(λq1·λk1) - exp(λq2·λk2) + λ_init

  (λq1, λk1, λq2, λk2 learned vectors of dk per layer, drawn from N(0, 0.1); λ_init = 0.8 - 0.6 exp(-0.3 (l -
  1)) at layer l = 1..L, or ``diff_lambda_init``). The output A V (2 dk per differential head) goes through
  an RMSNorm per head (one learned scale of 2 dk, shared by the heads; eps ``diff_norm_eps``, which the
  catalogue's arms set to the reference code's 1e-5) and is scaled by (1 - λ_init); it fills
  the two heads' slots of ``[B, q, T, dk]``. So a model of q heads of dk has q/2 differential heads whose maps
  have the baseline's dk and whose values are twice as wide: the paper's layout (h = d_model / 2d), with the
  baseline's projections unchanged. A catalogue arm that doubles the heads and halves ``head_dim`` gives each
  of the baseline's heads a differential head of its own (maps of dk/2).
- ``DiffV2`` (Microsoft, "Differential Transformer V2", Hugging Face blog, 20 January 2026): the query
  projection makes two query heads per output head (``ModelConfig.query_heads``), the pair adjacent and in one
  GQA group, so they share their key and value; plain softmax attention over all of them, then per output head
  ``y = y_{2i} - sigmoid(x W_λ)_i y_{2i+1}``, λ a logit per token and head from the block's input (``W_λ``
  without bias). No per-head norm, no λ_init; the output has the baseline's heads, so ``W_o`` is the
  baseline's.

Training runs fused SDPA calls (V1: four, one per map and value half; V2: one) and combines their outputs; the
probe path computes the maps by hand and returns the signed weights ``A`` (``[B, q/2, T, T]`` for V1, ``[B,
q, T, T]`` for V2, λ applied per query row), so F-Attn is the net weight on the first token: the first map's
share less λ times the second's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ablate.ablations.config import ModelConfig
from ablate.ablations.layers import RMSNorm
from ablate.ablations.scores import causal_scores, repeat_kv

LAMBDA_STD = 0.1  # the λ vectors' init (the paper's code)


def lambda_init_at(layer: int) -> float:
    """λ_init = 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l = ``layer`` + 1 (the paper's, 1-based).

    >>> round(lambda_init_at(0), 3), round(lambda_init_at(27), 3)
    (0.2, 0.8)
    """
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def causal_softmax(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√dk) over the visible keys, float32 ``[B, q, T, T]`` (kv heads repeated for ``q``)."""
    scores, mask = causal_scores(q, k)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


class Differential(nn.Module):
    """DIFF Transformer's attention on pairs of adjacent heads (module docstring)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        dk = cfg.head_dim
        init = cfg.diff_lambda_init
        self.lambda_init = lambda_init_at(layer) if init is None else init
        self.lambdas = nn.Parameter(torch.zeros(4, dk))  # rows: λq1, λk1, λq2, λk2
        if not self.lambdas.is_meta:  # meta: counting only (a meta normal_ imports torch._dynamo)
            nn.init.normal_(self.lambdas, std=LAMBDA_STD)
        # the reference's sub-layer norm eps (1e-5) where the catalogue sets it, else the model's
        self.norm = RMSNorm(2 * dk, cfg.norm_eps if cfg.diff_norm_eps is None else cfg.diff_norm_eps)

    def weight(self) -> torch.Tensor:
        """λ = exp(λq1·λk1) - exp(λq2·λk2) + λ_init (a scalar, float32)."""
        q1, k1, q2, k2 = self.lambdas.float()
        return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + self.lambda_init

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, H, T, dk = q.shape
        q1, q2, k1, k2 = q[:, 0::2], q[:, 1::2], k[:, 0::2], k[:, 1::2]  # (B, q/2 or k/2, T, dk)
        halves = v[:, 0::2], v[:, 1::2]  # a pair's two values, side by side its V of 2 dk
        lam = self.weight()
        p = None
        if probe:
            p = causal_softmax(q1, k1) - lam * causal_softmax(q2, k2)  # (B, q/2, T, T)
            y = torch.cat([p @ repeat_kv(q1, h).float() for h in halves], -1).to(q.dtype)
        else:
            # one fused call per map and value half (dk each: the CPU's flash kernel needs the value's width
            # to be the key's, and a T x T map is never kept)
            def attend(qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
                return torch.cat([F.scaled_dot_product_attention(qi, ki, h, is_causal=True, enable_gqa=True)
                                  for h in halves], -1)  # (B, q/2, T, 2 dk)

            y = attend(q1, k1) - lam.to(q.dtype) * attend(q2, k2)
        y = self.norm(y) * (1 - self.lambda_init)
        # differential head i's 2 dk fill head slots 2i and 2i + 1
        return y.unflatten(-1, (2, dk)).transpose(2, 3).reshape(B, H, T, dk), p


class DiffV2(nn.Module):
    """DIFF V2: query heads in adjacent pairs of one GQA group, ``y_{2i} - sigmoid(λ_i(x)) y_{2i+1}``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.lambda_proj = nn.Linear(cfg.d_model, cfg.n_heads, bias=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert x is not None, "DIFF V2's lambda reads the block's input"
        lam = torch.sigmoid(self.lambda_proj(x).float()).transpose(1, 2).unsqueeze(-1)  # (B, q, T, 1)
        if probe:
            a = causal_softmax(q, k)  # (B, 2q, T, T)
            p = a[:, 0::2] - lam * a[:, 1::2]  # (B, q, T, T)
            # the pair's shared values: kv head of query head 2i
            return (p @ repeat_kv(q, v)[:, 0::2].float()).to(q.dtype), p
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, 2q, T, dk)
        return y[:, 0::2] - lam.to(y.dtype) * y[:, 1::2], None
