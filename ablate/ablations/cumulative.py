"""Softmax attention whose logits lose a cumulative sum over the sequence: what fades, or what was selected
away.

- ``Forgetting`` (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate", ICLR): per
  query head a forget gate ``f_t = sigmoid(w_fᵀ x_t + b_f)`` from the block's normed input, and the logit of
  query i on key j gains ``D_ij = Σ_{l=j+1..i} log f_l``, computed as a difference of prefix sums ``c_i -
  c_j`` (``c_t = Σ_{l<=t} log f_l``). ``b_f`` starts at ``forget_bias_init`` (FoX: 0); it is a parameter of
  its own, not the projection's bias, so the decoder's init (which zeroes a Linear's bias) leaves it. The
  paper trains it without RoPE (``rope: false``); with RoPE is a catalogue arm too.
- ``ForgettingPro``: FoX's recommended "Pro" block, as its code builds it (``ForgettingAttentionLayer`` with
  ``use_k_shift``, ``use_v_shift``, ``qk_norm``): the key and the value each shifted by a data-dependent
  amount, ``t'_i = (1 - α_i) t_i + α_i t_(i-1)``, ``α_i = sigmoid(x_i w)`` per head (``t_(-1) = 0``), then
  queries and keys RMS-normalised per head with a scale per head and channel (eps 1e-5, its ``GroupNorm``'s),
  then forgetting attention. The rest of Pro (an RMSNorm per head on the output, then an elementwise sigmoid
  output gate from the block's input) is the decoder's ``sdpa_norm`` and a G1 gate, which the catalogue arm
  sets with it; the model's own QK-norm and RoPE are off there. FoX has no GQA: with fewer kv heads, the
  key's and value's shifts and the key's norm are per kv head.
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
from ablate.ablations.scores import causal_scores, mix


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


PRO_QK_NORM_EPS = 1e-5  # FoX Pro's per-head QK-norm: its GroupNorm's default eps


class TokenShift(nn.Module):
    """FoX Pro's data-dependent token shift of a key or value ``t [B, H, T, dk]``: ``(1 - α) t_i + α
    t_(i-1)``, ``α = sigmoid(x w) [B, H, T, 1]`` from the block's normed input, zero before the first
    token."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_heads, bias=False)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        alpha = torch.sigmoid(self.proj(x).float()).transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)
        prev = F.pad(t.float(), (0, 0, 1, -1))  # (B, H, T, dk): t_(i-1), zero at i = 0
        return ((1 - alpha) * t.float() + alpha * prev).to(t.dtype)


class HeadNorm(nn.Module):
    """RMSNorm over each head's ``dk`` channels of ``[B, H, T, dk]`` with a learned scale per head and channel
    (FoX's QK-norm; the decoder's ``q_norm`` shares one scale across the heads)."""

    def __init__(self, n_heads: int, head_dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_heads, 1, head_dim))
        self.eps = eps

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        f = t.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(t.dtype)


class ForgettingPro(Forgetting):
    """FoX Pro's attention: keys and values token-shifted, queries and keys normed per head, then forgetting
    attention (module docstring)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        nk, dk = cfg.n_kv_heads, cfg.head_dim
        self.k_shift, self.v_shift = TokenShift(cfg.d_model, nk), TokenShift(cfg.d_model, nk)
        self.q_norm = HeadNorm(cfg.n_heads, dk, PRO_QK_NORM_EPS)
        self.k_norm = HeadNorm(nk, dk, PRO_QK_NORM_EPS)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
        x: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert x is not None, "the shifts and the forget gate read the block's input"
        k, v = self.k_shift(k, x), self.v_shift(v, x)  # shifted before the key's norm, as FoX does
        return super().forward(self.q_norm(q), self.k_norm(k), v, probe, x=x)


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
