"""Softmax attention whose logits lose a cumulative sum over the sequence: what fades, or what was selected
away.

- ``Forgetting`` (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate", ICLR): per
  query head a forget gate ``f_t = sigmoid(w_fᵀ x_t + b_f)`` from the block's normed input, and the logit of
  query i on key j gains ``D_ij = Σ_{l=j+1..i} log f_l``, computed as a difference of prefix sums ``c_i -
  c_j`` (``c_t = Σ_{l<=t} log f_l``). ``b_f`` starts at ``forget_bias_init`` (FoX: 0); it is a parameter of
  its own, not the projection's bias, so the decoder's init (which zeroes a Linear's bias) leaves it. The
  paper trains it without RoPE (``rope: false``); with RoPE is a catalogue arm too.
- ``Selective`` (Leviathan, Kalman, Matias 2025, "Selective Attention Improves Transformer", ICLR), parameter
  free: head 0's causal logits ``s``, through ReLU, with the first key (it is never selected away) and the
  diagonal (a token does not select itself) zeroed, are summed over the earlier queries, ``F_ij = Σ_{i'<i}
  ReLU(s_i'j)``; every head's logits subtract ``F`` before the softmax, so a token selected away stays masked
  for every later query.

Both are softmax over biased logits, so training passes the bias to SDPA as a float mask (its gradient
reaches the forget gate, and head 0's logits); the probe path computes the weights by hand. ``p`` is a share:
F-Attn is the softmax's share on the first token, after the decay (forgetting) or the selection (selective).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ablate.ablations.config import ModelConfig
from ablate.ablations.weights import causal_scores, mix


def softmax_with_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                      mask: torch.Tensor, probe: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(QKᵀ/√d + bias) over the visible keys (``mask [T, T]``), ``bias [B, q or 1, T, T]`` float32:
    the fused kernel with a float mask in training, by hand (returning ``p``) when probed."""
    bias = bias.masked_fill(~mask, float("-inf"))
    if probe:
        scores, _ = causal_scores(q, k)
        p = (scores + bias).softmax(-1)  # (B, q, T, T)
        return mix(p, q, v), p
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), enable_gqa=True), None


class Forgetting(nn.Module):
    """FoX: softmax(QKᵀ/√d + D), ``D_ij = Σ_{l=j+1..i} log f_l`` per query head (module docstring)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.forget_bias_init is not None  # refused by ModelConfig
        self.proj = nn.Linear(cfg.d_model, cfg.n_heads, bias=False)
        self.bias = nn.Parameter(torch.full((cfg.n_heads,), float(cfg.forget_bias_init)))

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """``log f [B, q, T]`` in float32: log sigmoid(x w_f + b_f)."""
        return F.logsigmoid(self.proj(x).float() + self.bias.float()).transpose(1, 2)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert x is not None, "the forget gate reads the block's input"
        c = self.log_forget(x).cumsum(-1)  # (B, q, T): c_t = Σ_{l<=t} log f_l
        decay = c.unsqueeze(-1) - c.unsqueeze(-2)  # (B, q, T, T): D_ij = c_i - c_j
        mask = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).tril()
        return softmax_with_bias(q, k, v, decay, mask, probe)


def selected_away(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``F [B, T, T]`` from one head's logits ``scores [B, T, T]``: ``F_ij = Σ_{i'<i} ReLU(s_i'j)`` over the
    visible keys, the first key and each query's own key never selected."""
    T = scores.shape[-1]
    keep = mask.clone()
    keep[:, 0] = False  # the first token is never selected away
    keep.fill_diagonal_(False)  # nor does a token select itself
    s = scores.masked_fill(~keep, 0.0).relu()  # (B, T, T)
    total = s.cumsum(-2)  # Σ_{i'<=i}
    return torch.cat([total.new_zeros(*total.shape[:-2], 1, T), total[..., :-1, :]], -2)  # Σ_{i'<i}


class Selective(nn.Module):
    """Selective attention: every head's logits less ``F``, what head 0 selected away (module docstring)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        scores, mask = causal_scores(q[:, :1], k[:, :1])  # head 0 and its kv head: (B, 1, T, T)
        return softmax_with_bias(q, k, v, -selected_away(scores[:, 0], mask).unsqueeze(1), mask, probe)
