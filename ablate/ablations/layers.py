"""The decoder's building blocks: RMSNorm, RoPE, the SwiGLU FFN and the mixture-of-experts FFN.

Every FFN returns ``(y, aux_loss)`` so a block never asks which kind it holds; the dense one's aux loss is 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ablate.ablations.config import ModelConfig
from ablate.ablations.yarn import yarn_inv_freq


class RMSNorm(nn.Module):
    """RMS normalisation over the last dim, with a learned scale of ``shape`` (an int or e.g. ``(heads,
    dk)``)."""

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Clip(nn.Module):
    """Clamp to (-c, c): the Appendix A.5 output clipping before the residual add."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(-self.value, self.value)


class Rotary(nn.Module):
    """RoPE with the half-split rotation (as Qwen3/Llama): pairs (i, i + d/2) rotate by angle pos *
    inv_freq[i].

    With ``rope_yarn_factor > 1`` the inverse frequencies come from YaRN and cos/sin carry its attention
    factor.
    """

    inv_freq: torch.Tensor  # a buffer (register_buffer), which nn.Module's attribute lookup types loosely

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        dk = cfg.head_dim
        # On the CPU even when the model is built on the meta device: a meta arange imports torch._dynamo
        # (seconds), and forward moves these few numbers to the input's device anyway.
        with torch.device("cpu"):
            if cfg.rope_yarn_factor > 1:
                inv_freq, scale = yarn_inv_freq(dk, cfg.rope_theta, cfg.rope_yarn_factor,
                                                cfg.rope_yarn_original_len)
            else:
                inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, dk, 2, dtype=torch.float32) / dk)
                scale = 1.0
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.scale = scale

    def forward(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[T, dk]`` (float32) for positions 0..seq_len-1."""
        pos = torch.arange(seq_len, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.to(device))  # (T, dk/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (T, dk)
        return emb.cos() * self.scale, emb.sin() * self.scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, T, H, dk]`` by position; cos/sin ``[T, dk]``."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, dk) broadcasts over heads
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Rope(nn.Module):
    """``apply_rope`` as a module: the attention's position slot when ``ModelConfig.rope`` is on."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return apply_rope(x, cos, sin)


class NoRope(nn.Module):
    """The position slot off (``rope: false``): queries and keys unrotated."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x


class SwiGLU(nn.Module):
    """Dense FFN: down(silu(gate(x)) * up(x))."""

    def __init__(self, d_model: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)), x.new_zeros(())


def balance_loss(probs: torch.Tensor, top_idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Switch / Qwen-MoE load-balancing loss: ``E * sum_e f_e * P_e``.

    ``f_e`` is the fraction of tokens routed to expert e (summing to k over experts), ``P_e`` the mean router
    probability of e. Under uniform routing it equals ``k``. ``probs [N, E]``, ``top_idx [N, k]``.
    """
    counts = F.one_hot(top_idx, n_experts).sum(dim=(0, 1)).to(probs.dtype)  # (E,)
    frac = counts / top_idx.shape[0]
    return n_experts * (frac * probs.mean(0)).sum()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Router z-loss (ST-MoE): mean over tokens of logsumexp(logits)^2."""
    return torch.logsumexp(logits.float(), dim=-1).pow(2).mean()


class MoE(nn.Module):
    """Fine-grained mixture of SwiGLU experts with top-k softmax routing.

    Expert weights are stacked (``gate_up [E, d, 2w]``, ``down [E, w, d]``) so that a 128-expert layer builds
    at once. Returns ``(y, aux)`` with ``aux = aux_coef * balance_loss + z_coef * z_loss``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, w, e = cfg.d_model, cfg.expert_dim, cfg.n_experts
        self.n_experts, self.top_k, self.renormalize = e, cfg.moe_top_k, cfg.moe_renormalize
        self.aux_coef, self.z_coef = cfg.moe_aux_coef, cfg.moe_z_coef
        self.router = nn.Linear(d, e, bias=False)
        self.gate_up = nn.Parameter(torch.empty(e, d, 2 * w))
        self.down = nn.Parameter(torch.empty(e, w, d))

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.gate_up, std=std)
        nn.init.normal_(self.down, std=std)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        logits = self.router(x)  # (N, E)
        probs = logits.float().softmax(-1)
        weights, idx = probs.topk(self.top_k, dim=-1)  # (N, k)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e in range(self.n_experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            g, u = (x[tok] @ self.gate_up[e]).chunk(2, dim=-1)  # (n_e, w) each
            y = (F.silu(g) * u) @ self.down[e]  # (n_e, d)
            out.index_add_(0, tok, y * weights[tok, slot, None])
        aux = self.aux_coef * balance_loss(probs, idx, self.n_experts) + self.z_coef * z_loss(logits)
        return out.view(shape), aux

