"""The paper's gates (Eq. 5, ``Y' = Y (op) act(X W)``) and switch heads (Table 6), as modules chosen at build
time.

Every gate slot takes ``(y, x)``, ``y [B, T, H, w]`` the tensor gated and ``x [B, T, d]`` the normed block
input, and returns ``(y', scores)``; an absent gate is ``NoGate`` (an ``nn.Identity`` returning ``(y,
None)``), so the attention's forward never branches on what is gated. A plugin arm's gate fills its slot the
same way (``gate_for``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ablate.ablations import plugins
from ablate.ablations.config import GateSpec, ModelConfig, SwitchSpec
from ablate.ablations.layers import RMSNorm


class NoGate(nn.Identity):
    """The "off" gate: ``y`` unchanged, no scores."""

    def forward(  # type: ignore[override]  # a gate slot's (y, x) -> (y, None), where Identity's is x -> x
            self, y: torch.Tensor, x: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        return y, None


class NSSigmoid(nn.Module):
    """Non-sparse sigmoid, 0.5 + 0.5 sigmoid: scores in [0.5, 1] (Table 4 row 7)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 + 0.5 * torch.sigmoid(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "sigmoid": nn.Sigmoid,
    "silu": nn.SiLU,
    "ns_sigmoid": NSSigmoid,
    "identity": nn.Identity,
}


class HeadLinear(nn.Linear):
    """Input-dependent gate logits ``x W`` as ``[B, T, H, w]`` (an ``nn.Linear``: its weight is
    ``proj.weight``)."""

    def __init__(self, d_model: int, n_heads: int, width: int, bias: bool):
        super().__init__(d_model, n_heads * width, bias=bias)
        self.heads = (n_heads, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).unflatten(-1, self.heads)  # type: ignore[no-untyped-call,no-any-return]  # unannotated in torch


class PrefixHeadLinear(HeadLinear):
    """``HeadLinear`` reading only the first ``k`` channels of the input (``GateSpec.input_dims``): a cheap
    gate, as modded-nanogpt's attention gate (k = 12), ``k x H w`` weights instead of ``d_model x H w``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x[..., : self.in_features])


class ZeroHeadLinear(nn.Module):
    """``HeadLinear`` (on the first ``in_features`` channels, as ``PrefixHeadLinear``) whose weight starts at
    zero (``GateSpec.init: zero``), so every score starts at act(0) (modded-nanogpt's attention gate). Not an
    ``nn.Linear``: the decoder's init draws every Linear's weight (``init_rng.drawn``), and this one must stay
    zero. Its weight is ``proj.weight`` as a Linear gate's; the FLOPs count takes it as a matmul."""

    def __init__(self, in_features: int, n_heads: int, width: int, bias: bool):
        super().__init__()
        self.in_features = in_features
        self.weight = nn.Parameter(torch.zeros(n_heads * width, in_features))
        self.bias = nn.Parameter(torch.zeros(n_heads * width)) if bias else None
        self.heads = (n_heads, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x[..., : self.in_features], self.weight, self.bias).unflatten(-1, self.heads)  # type: ignore[no-untyped-call,no-any-return]  # unannotated in torch


class IndependentScore(nn.Module):
    """Input-independent gate logits: a learned ``[H, w]`` parameter, zero-initialised (Table 4 row 6)."""

    def __init__(self, n_heads: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_heads * width))
        self.heads = (n_heads, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight.to(x.dtype).view(self.heads).expand(*x.shape[:-1], *self.heads)


class FusedLogits(nn.Module):
    """The logits of a gate fused into the query projection (``QueryGateProjection``): they arrive computed,
    as ``[B, T, H, w]``; only the gate's bias, if it has one, lives here (as ``proj.bias``, its unfused
    name)."""

    def __init__(self, n_heads: int, width: int, bias: bool):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_heads * width)) if bias else None
        self.heads = (n_heads, width)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits if self.bias is None else logits + self.bias.to(logits.dtype).view(self.heads)


class HeadMean(nn.Module):
    """Head-shared scores: the per-head scores averaged over heads (Sec. 3.2.1), broadcast back to every
    head."""

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return s.mean(dim=-2, keepdim=True)


class Gate(nn.Module):
    """One gate per ``GateSpec`` on ``n_heads`` heads of ``width`` dims (G5: one "head" of width d_model).

    Elementwise scores are ``[B, T, H, width]``; headwise ``[B, T, H, 1]`` and broadcast over the width. A
    ``fused`` gate takes its logits ``[B, T, H, w]`` (from the query projection) instead of the block input.
    """

    def __init__(self, spec: GateSpec, d_model: int, n_heads: int, width: int, *, fused: bool = False):
        super().__init__()
        self.per_head = width if spec.granularity == "elementwise" else 1
        if fused:
            self.proj: nn.Module = FusedLogits(n_heads, self.per_head, spec.bias)
        elif spec.input == "dependent" and spec.init == "zero":
            self.proj = ZeroHeadLinear(spec.input_dims or d_model, n_heads, self.per_head, spec.bias)
        elif spec.input == "dependent" and spec.input_dims is not None:
            self.proj = PrefixHeadLinear(spec.input_dims, n_heads, self.per_head, spec.bias)
        elif spec.input == "dependent":
            self.proj = HeadLinear(d_model, n_heads, self.per_head, spec.bias)
        else:
            self.proj = IndependentScore(n_heads, self.per_head)
        self.reduce = HeadMean() if spec.shared else nn.Identity()
        self.act = ACTIVATIONS[spec.activation]()
        self.combine = torch.mul if spec.combine == "multiplicative" else torch.add

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.act(self.reduce(self.proj(x)))  # (B, T, H, w or 1)
        # the scores first: the result takes their (contiguous) layout, not that of a transposed SDPA output,
        # so flattening it for W_o copies nothing
        return self.combine(s.to(y.dtype), y), s.expand(*y.shape[:-1], s.shape[-1])


class FlatGate(nn.Module):
    """A gate on a flat ``[B, T, d]`` tensor (G5, after W_o): one head of width d_model."""

    def __init__(self, spec: GateSpec, d_model: int):
        super().__init__()
        self.gate = Gate(spec, d_model, 1, d_model)

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, s = self.gate(y.unflatten(-1, (1, -1)), x)  # type: ignore[no-untyped-call]  # unannotated in torch
        return y.flatten(-2), s


def fuses_g1(spec: GateSpec | None) -> bool:
    """Is ``spec`` a G1 gate whose projection is fused into the query projection's weight? Every
    input-dependent G1 gate that reads the whole input and is drawn as every matrix is (one reading its first
    ``input_dims`` channels, or starting at zero, is not)."""
    return (spec is not None and spec.position == "G1" and spec.input == "dependent"
            and spec.input_dims is None and spec.init == "normal")


def gate_width(spec: GateSpec, head_dim: int) -> int:
    """Gate scores per query head: ``head_dim`` (elementwise) or 1 (headwise)."""
    return head_dim if spec.granularity == "elementwise" else 1


def gate_for(cfg: ModelConfig, position: str, n_heads: int, width: int, *, fused: bool = False) -> nn.Module:
    """The module for one gate slot (``"G1"`` .. ``"G5"``, or the block's ``"attn_out"``): the plugin arm's
    when it sits there (``ablate.ablations.plugins``), a ``Gate`` when ``cfg.gate`` does, else ``NoGate``."""
    if plugins.slot(cfg) == position:
        return plugins.build(cfg)
    spec = cfg.gate
    if spec is None or spec.position != position:
        return NoGate()
    if position == "G5":
        return FlatGate(spec, cfg.d_model)
    return Gate(spec, cfg.d_model, n_heads, width, fused=fused)


# ---------------------------------------------------------------- the query projection, plain or with G1
# fused


class QueryProjection(nn.Linear):
    """``x -> (q [B, T, H, dk], x)``: the plain query projection; the G1 gate (if any) reads the block
    input."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__(d_model, n_heads * head_dim, bias=False)
        self.head_dim = head_dim

    def forward(  # type: ignore[override]  # x -> (q, x) for the G1 gate, where a Linear's is x -> x W^T
            self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(x).unflatten(-1, (-1, self.head_dim)), x  # type: ignore[no-untyped-call]  # unannotated in torch


class QueryGateProjection(nn.Module):
    """The query projection and the G1 gate's projection in one weight (as Qwen3-Next's ``q_proj`` and
    Megatron-Core's ``attention_output_gate``): ``x -> (q [B, T, H, dk], gate logits [B, T, H, w])``, each
    block of rows multiplied into its own contiguous tensor (``SplitLinear``: on a CPU one matmul per block
    costs what the wide one does, and strided views of a wide output made every reader slower;
    docs/results.md).

    ``proj.weight`` is ``[H * dk + H * w, d_model]``: all query rows first (the unfused ``q_proj`` rows), then
    all gate rows (the unfused gate ``proj`` rows); ``w`` = dk (elementwise) or 1 (headwise). So ``q`` and the
    logits are each one block of the output's features, and ``q`` of head h is rows ``h * dk .. + dk`` as
    without a gate. Qwen3-Next interleaves them per head (``[q_h ; g_h]``): ``fuse_query_gate`` /
    ``split_query_gate`` convert, in export only. The weight sits under ``proj`` so that a checkpoint of the
    per-head layout (which ablate wrote under ``q_proj.weight`` before) can never load into this one
    unconverted (``query_gate_rows``).
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int, gate_width: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_heads * (head_dim + gate_width), bias=False)
        self.head_dim, self.gate_width = head_dim, gate_width
        self.rows = (n_heads * head_dim, n_heads * gate_width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, g = SplitLinear.apply(x, self.proj.weight, self.rows)  # type: ignore[no-untyped-call]  # (B, T, H * dk), (B, T, H * w); unannotated in torch
        return q.unflatten(-1, (-1, self.head_dim)), g.unflatten(-1, (-1, self.gate_width))


class SplitLinear(torch.autograd.Function):
    """``x W^T`` as blocks of output features, ``rows`` of ``W`` each: ``(x W_1^T, x W_2^T, ..)``, each block
    its own contiguous tensor (one matmul per block of the one weight, so no strided views of a wide output).

    Backward takes the blocks' gradients as they come, where autograd's ``split`` would first concatenate them
    (a copy of the whole output's gradient): each block's weight gradient is written into its rows of one
    tensor, and the input's gradient is accumulated in the matmuls (``addmm`` with ``out``, not a separate
    add).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,  # ctx: torch types it Any
                rows: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        ctx.save_for_backward(x, weight)
        ctx.rows = rows
        return tuple(torch.nn.functional.linear(x, w) for w in weight.split(rows))  # type: ignore[no-untyped-call]  # (B, T, rows) each; unannotated in torch

    @staticmethod
    def backward(ctx: Any,
                 *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        dtype = next(g.dtype for g in grads if g is not None)  # autocast's, when the forward ran under it
        x2, w = x.flatten(0, -2).to(dtype), weight.to(dtype)  # (B * T, d), (sum(rows), d)
        want_x, want_w = ctx.needs_input_grad[:2]
        grad_x = None
        grad_w = (w.new_zeros(w.shape) if None in grads else torch.empty_like(w)) if want_w else None
        for g, w_rows, start in zip(grads, w.split(ctx.rows), itertools.accumulate((0, *ctx.rows)),
                                    strict=False):
            if g is None:
                continue
            g2 = g.flatten(0, -2)  # (B * T, rows)
            if want_x:
                grad_x = g2.mm(w_rows) if grad_x is None else torch.addmm(grad_x, g2, w_rows, out=grad_x)
            if grad_w is not None:
                torch.mm(g2.t(), x2, out=grad_w[start:start + g2.shape[1]])
        return (None if grad_x is None else grad_x.view(x.shape).to(x.dtype),
                None if grad_w is None else grad_w.to(weight.dtype), None)


def fuse_query_gate(q_weight: torch.Tensor, gate_weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[H * dk, d]`` query rows and ``[H * w, d]`` gate rows -> Qwen3-Next's per-head ``[H * (dk + w), d]``.

    >>> fuse_query_gate(torch.zeros(4, 3), torch.ones(2, 3), n_heads=2)[:, 0].tolist()
    [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    """
    d = q_weight.shape[-1]
    return torch.cat([q_weight.view(n_heads, -1, d), gate_weight.view(n_heads, -1, d)], dim=1).reshape(-1, d)


def split_query_gate(weight: torch.Tensor, n_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3-Next's per-head weight -> ``(query rows [H * dk, d], gate rows [H * w, d])``; the inverse of
    ``fuse_query_gate``."""
    d = weight.shape[-1]
    q, g = weight.view(n_heads, -1, d).split((head_dim, weight.shape[0] // n_heads - head_dim), dim=1)  # type: ignore[no-untyped-call]  # unannotated in torch
    return q.reshape(-1, d), g.reshape(-1, d)


def query_gate_rows(state: Mapping[str, torch.Tensor], prefix: str, n_heads: int,
                    head_dim: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(query rows, gate rows)`` of the attention at ``prefix`` in a state dict of any form ablate has
    written: ``q_proj.proj.weight`` (``QueryGateProjection``), the per-head layout under ``q_proj.weight``
    (ablate before the contiguous layout), or the two apart (``q_proj.weight`` and ``gate_sdpa.proj.weight``:
    unfused). None without a fused gate's rows (a plain query projection)."""
    if (w := state.get(f"{prefix}q_proj.proj.weight")) is not None:
        q, g = w.split((n_heads * head_dim, w.shape[0] - n_heads * head_dim))  # type: ignore[no-untyped-call]  # unannotated in torch
        return q, g
    q = state.get(f"{prefix}q_proj.weight")
    if q is None:
        return None
    if (g := state.get(f"{prefix}gate_sdpa.proj.weight")) is not None:
        return q, g
    return split_query_gate(q, n_heads, head_dim) if q.shape[0] > n_heads * head_dim else None


def query_projection(gate: GateSpec | None, d_model: int, n_heads: int, head_dim: int, *,
                     fuse: bool = True) -> nn.Module:
    """The query projection: with the G1 gate's projection fused into it when ``fuses_g1(gate)`` (and
    ``fuse``)."""
    if fuse and gate is not None and fuses_g1(gate):
        return QueryGateProjection(d_model, n_heads, head_dim, gate_width(gate, head_dim))
    return QueryProjection(d_model, n_heads, head_dim)


# ---------------------------------------------------------------- key/value projections, plain or switch
# heads


class HeadProjection(nn.Module):
    """A plain projection to ``[B, T, H, dk]``; ignores the router weights."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_heads * head_dim, bias=False)
        self.head_dim = head_dim

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return cast(torch.Tensor, self.proj(x).unflatten(-1, (-1, self.head_dim)))


class ExpertProjection(nn.Module):
    """E expert projections per head, mixed by router weights ``[B, T, H, E]`` (zero outside the top-k)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_experts: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_heads * n_experts * head_dim, bias=False)
        self.shape = (n_heads, n_experts, head_dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).unflatten(-1, self.shape)  # (B, T, H, E, dk)
        return cast(torch.Tensor, (y * weights.unsqueeze(-1).to(y.dtype)).sum(-2))  # (B, T, H, dk)


class KV(nn.Module):
    """The baseline's key and value projections: ``x -> (k, v, None)``, each ``[B, T, k_heads, dk]``."""

    def __init__(self, d_model: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.k_proj = HeadProjection(d_model, n_kv_heads, head_dim)
        self.v_proj = HeadProjection(d_model, n_kv_heads, head_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        return self.k_proj(x), self.v_proj(x), None


class SwitchKV(nn.Module):
    """Switch heads (Csordas et al.; paper Table 6): per key/value head, E value experts (and E key experts
    for ``kind="kv"``, sharing the router), mixed by sigmoid router scores of the normed input, top-k, not
    competing (no softmax, no renormalisation). With E = k = 1 this is exactly the v headwise gate.

    Returns ``(k, v, scores)``, scores ``[B, T, k_heads, E]`` with zeros outside the top-k.
    """

    def __init__(self, spec: SwitchSpec, d_model: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        e = spec.n_experts
        self.top_k, self.shape = spec.top_k, (n_kv_heads, e)
        self.router = nn.Linear(d_model, n_kv_heads * e, bias=False)
        self.v_proj = ExpertProjection(d_model, n_kv_heads, head_dim, e)
        if spec.kind == "kv":
            self.k_proj: nn.Module = ExpertProjection(d_model, n_kv_heads, head_dim, e)
        else:
            self.k_proj = HeadProjection(d_model, n_kv_heads, head_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = torch.sigmoid(self.router(x).unflatten(-1, self.shape))  # (B, T, H, E)
        top, idx = scores.topk(self.top_k, dim=-1)
        weights = torch.zeros_like(scores).scatter(-1, idx, top)
        return self.k_proj(x, weights), self.v_proj(x, weights), weights


def kv_for(switch: SwitchSpec | None, d_model: int, n_kv_heads: int, head_dim: int) -> nn.Module:
    """The key/value projection module: plain, or switch heads when ``switch`` is set."""
    if switch is None:
        return KV(d_model, n_kv_heads, head_dim)
    return SwitchKV(switch, d_model, n_kv_heads, head_dim)


def sdpa_post_for(sdpa_norm: bool, sdpa_silu: bool, n_heads: int, head_dim: int, eps: float) -> nn.Module:
    """What acts on the SDPA output before any G1 gate: per-head RMSNorm ("SDPA GroupNorm"), SiLU, or
    nothing."""
    mods: list[nn.Module] = []
    if sdpa_norm:
        mods.append(RMSNorm((n_heads, head_dim), eps))
    if sdpa_silu:
        mods.append(nn.SiLU())
    return nn.Sequential(*mods) if mods else nn.Identity()

