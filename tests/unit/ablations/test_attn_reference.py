"""Each 2025-26 arm against its authors' code (``Variant.reference``, shown by ``ablate variants --wide``).

For every arm a small re-derivation of the reference's forward, written here in plain torch from that code's
math and constants (never copied from it), is given ablate's weights and must give ablate's output, in fp32,
to 1e-4 of the output's largest magnitude: once at ablate's init scale (the model as built) and once with
every parameter drawn from N(0, 1).

What is compared is the attention layer, from the block's normed input ``x`` to the output projection, in
both of ablate's paths (fused training, explicit probe). The decoder's own QK-norm and RoPE are off in these
models (``qk_norm: false``, ``rope: false``): ablate keeps them for every arm, as the baseline has them, where
the references have none (differential, DIFF V2, FoX's basic layer, gpt-oss's sinks, selective attention) or
rotate interleaved pairs (unilm); ``forgetting-attention-rope`` keeps RoPE, which FoX rotates in halves as
ablate does. FoX has no GQA, so its cases use as many kv heads as query heads; the others use the tiny
preset's GQA. The sparse gate is compared as the gate it is, and its zero start is checked in a built model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model
from ablate.ablations.differential import lambda_init_at
from ablate.ablations.gates import QueryGateProjection

B, T, LAYER = 2, 12, 1
Tensor = torch.Tensor


# ---------------------------------------------------------------- the references, re-derived
def causal_softmax(s: Tensor) -> Tensor:
    """softmax over the keys a query may see (``s [..., T, T]``)."""
    n = s.shape[-1]
    return s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


def flash(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """flash_attn_func(q, k, v, causal=True) on ``[B, T, heads, d]``: scale 1/sqrt(d of q), query head h
    reads kv head h // (q heads / kv heads)."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhts,bshd->bthd", causal_softmax(s), v)


def rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """unilm's rms_norm.py / FoX's RMS group norm on the last dim: x / sqrt(mean(x^2) + eps) * weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def diff_v1(x: Tensor, w: dict[str, Tensor], *, heads: int, kv_heads: int, depth: int,
            eps: float = 1e-5) -> Tensor:
    """MultiheadFlashDiff1.forward (microsoft/unilm, multihead_flashdiff_1.py), without its rotary."""
    b, t, _ = x.shape
    d = w["q"].shape[0] // (2 * heads)
    q = (x @ w["q"].T).view(b, t, heads, 2, d)  # view(2 heads) then reshape(heads, 2)
    k = (x @ w["k"].T).view(b, t, kv_heads, 2, d)
    v = (x @ w["v"].T).view(b, t, kv_heads, 2 * d)
    attn1, attn2 = flash(q[..., 0, :], k[..., 0, :], v), flash(q[..., 1, :], k[..., 1, :], v)
    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * depth)
    lam = (torch.exp(torch.sum(w["lq1"] * w["lk1"])) - torch.exp(torch.sum(w["lq2"] * w["lk2"]))
           + lambda_init)
    attn = rms(attn1 - lam * attn2, w["subln"], eps) * (1 - lambda_init)
    return attn.reshape(b, t, -1) @ w["o"].T


def diff_v2(x: Tensor, w: dict[str, Tensor], *, heads: int, kv_heads: int) -> Tensor:
    """MultiheadFlashDiffV2.forward with use_diff_v2 (microsoft/unilm, multihead_flashdiffv2.py), without
    its rotary."""
    b, t, _ = x.shape
    d = w["q"].shape[0] // (2 * heads)
    attn = flash((x @ w["q"].T).view(b, t, 2 * heads, d), (x @ w["k"].T).view(b, t, kv_heads, d),
                 (x @ w["v"].T).view(b, t, kv_heads, d))
    lam = x @ w["lambda"].T  # (b, t, heads)
    attn = attn[:, :, 0::2] - torch.sigmoid(lam).unsqueeze(-1) * attn[:, :, 1::2]
    return attn.reshape(b, t, -1) @ w["o"].T


def shift(y: Tensor, alpha: Tensor, heads: int) -> Tensor:
    """FoX's ShiftLinear after its linear: per head, (1 - alpha_t) y_t + alpha_t y_(t-1), y_(-1) = 0."""
    b, t, _ = y.shape
    per_head = y.view(b, t, heads, -1)
    prev = torch.cat([torch.zeros_like(per_head[:, :1]), per_head[:, :-1]], 1)
    a = alpha.unsqueeze(-1)
    return (per_head * (1 - a) + prev * a).view(b, t, -1)


def group_rms(y: Tensor, weight: Tensor, heads: int, eps: float) -> Tensor:
    """FoX's GroupNorm(num_groups=heads, is_rms_norm=True): each head's channels RMS-normed, a scale per
    channel of the hidden size."""
    b, t, _ = y.shape
    return rms(y.view(b, t, heads, -1), weight.view(heads, -1), eps).view(b, t, -1)


def rotary_half(x: Tensor, base: float) -> Tensor:
    """FoX's RotaryEmbedding (flash-attn's, not interleaved) on ``[B, T, heads, d]``."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    freqs = torch.outer(torch.arange(x.shape[1], dtype=torch.float32), inv_freq)
    cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]  # (T, 1, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def fox(x: Tensor, w: dict[str, Tensor], *, heads: int, pro: bool = False, rope_base: float | None = None,
        norm_eps: float = 1e-6) -> Tensor:
    """ForgettingAttentionLayer.forward (zhixuan-lin/forgetting-transformer), fgate_type full; ``pro``: with
    use_k_shift, use_v_shift, qk_norm (per-head GroupNorm, its default eps 1e-5), use_output_gate and
    use_output_norm (sigmoid); ``rope_base``: use_rope."""
    b, t, _ = x.shape
    q, k, v = x @ w["q"].T, x @ w["k"].T, x @ w["v"].T
    if pro:
        k = shift(k, torch.sigmoid(x @ w["k_shift"].T), heads)
        v = shift(v, torch.sigmoid(x @ w["v_shift"].T), heads)
        q, k = group_rms(q, w["q_norm"], heads, 1e-5), group_rms(k, w["k_norm"], heads, 1e-5)
    q, k = q.view(b, t, heads, -1), k.view(b, t, heads, -1)
    if rope_base is not None:
        q, k = rotary_half(q, rope_base), rotary_half(k, rope_base)
    log_fgate = F.logsigmoid(x @ w["fgate"].T + w["fgate_bias"]).transpose(1, 2)  # (b, heads, t)
    log_lambda = torch.cumsum(log_fgate, -1)
    decay = log_lambda[..., :, None] - log_lambda[..., None, :]  # (b, heads, t, t)
    d = q.shape[-1]
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d) + decay
    o = causal_softmax(s) @ v.view(b, t, heads, -1).transpose(1, 2)  # (b, heads, t, d)
    o = o.transpose(1, 2).reshape(b, t, -1)
    if pro:
        o = group_rms(o, w["o_norm"], heads, norm_eps) * torch.sigmoid(x @ w["o_gate"].T)
    return o @ w["o"].T


def selective(x: Tensor, w: dict[str, Tensor], *, heads: int, kv_heads: int) -> Tensor:
    """Selective attention as the paper's Figure 2 sketches it (Leviathan et al., arXiv 2410.02703v2): head
    0's ReLU'd causal logits, BOS and the diagonal not masked, shifted to the strictly later queries and
    summed, subtracted from every head's logits. Kv heads repeated for the query heads (GQA)."""
    b, t, _ = x.shape
    q = (x @ w["q"].T).view(b, t, heads, -1).transpose(1, 2)
    k, v = ((x @ w[n].T).view(b, t, kv_heads, -1).transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
            for n in ("k", "v"))
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    s = F.relu(logits[:, 0])  # head 0
    s[..., 0] = 0  # do not mask BOS
    s = (1 - torch.eye(t)) * s  # do not mask self
    s = torch.roll(s, 1, -2)
    s[..., 0, :] = 0  # mask strictly in the future
    logits = logits - torch.cumsum(s, -2)[:, None]
    return (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1) @ w["o"].T


def heads_of(x: Tensor, w: dict[str, Tensor], heads: int, kv_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """``q [B, T, heads, d]``, ``k, v [B, T, kv_heads, d]``."""
    b, t, _ = x.shape
    return ((x @ w["q"].T).view(b, t, heads, -1), (x @ w["k"].T).view(b, t, kv_heads, -1),
            (x @ w["v"].T).view(b, t, kv_heads, -1))


def gpt_oss_sinks(x: Tensor, w: dict[str, Tensor], *, heads: int, kv_heads: int) -> Tensor:
    """gpt_oss/torch/model.py ``sdpa`` (no sliding window): a sink logit per query head as one more column
    of the softmax, dropped after it."""
    q, k, v = heads_of(x, w, heads, kv_heads)
    b, t, _, d = q.shape
    mult = heads // kv_heads
    q = q.view(b, t, kv_heads, mult, d)
    k, v = (z[:, :, :, None].expand(-1, -1, -1, mult, -1) for z in (k, v))
    sinks = w["sinks"].reshape(kv_heads, mult, 1, 1).expand(-1, -1, t, -1).expand(b, -1, -1, -1, -1)
    mask = torch.triu(torch.full((t, t), -float("inf")), diagonal=1)
    qk = torch.einsum("bqhmd,bkhmd->bhmqk", q, k) / math.sqrt(d) + mask
    weights = torch.softmax(torch.cat([qk, sinks], -1), -1)[..., :-1]
    return torch.einsum("bhmqk,bkhmd->bqhmd", weights, v).reshape(b, t, -1) @ w["o"].T


def by_weights(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    """An attention whose weights are ``fn(scaled logits, causal mask)``, kv heads repeated for GQA."""
    def attend(x: Tensor, w: dict[str, Tensor], *, heads: int, kv_heads: int) -> Tensor:
        q, k, v = (z.transpose(1, 2) for z in heads_of(x, w, heads, kv_heads))
        k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        t = q.shape[2]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        p = fn(s, torch.ones(t, t, dtype=torch.bool).tril())
        return (p @ v).transpose(1, 2).reshape(x.shape[0], t, -1) @ w["o"].T
    return attend


def _softmax1(s: Tensor, mask: Tensor) -> Tensor:
    """Miller's softmax_1: exp(x_i) / (1 + sum_j exp(x_j)), both sides times e^-m (m = max(0, max x))."""
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).clamp(min=0)
    e = torch.exp(s - m)
    return e / (torch.exp(-m) + e.sum(-1, keepdim=True))


def _sigmoid(s: Tensor, mask: Tensor) -> Tensor:
    """apple/ml-sigmoid-attention's Attention.forward: masked to -inf, plus attn_bias = -log(n), sigmoid."""
    return torch.sigmoid(s.masked_fill(~mask, float("-inf")) - math.log(s.shape[-1]))


def _softpick(s: Tensor, mask: Tensor) -> Tensor:
    """flash_softpick_attn.py's forward kernel over a whole row: m the largest visible score, p = e^(s - m) -
    e^-m, ReLU(p) over (the visible |p| summed + 1e-6)."""
    m = s.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    p = torch.exp(s - m) - torch.exp(-m)
    acc = torch.where(mask, p.abs(), 0.0).sum(-1, keepdim=True) + 1e-6
    return torch.where(mask, p.clamp(min=0), 0.0) / acc


# ---------------------------------------------------------------- ablate's weights, the references' names
def projections(attn: torch.nn.Module) -> dict[str, Tensor]:
    qp = attn.q_proj
    if isinstance(qp, QueryGateProjection):  # a fused G1 gate: query rows, then gate rows
        q, gate = qp.proj.weight.split(list(qp.rows))
        extra = {"o_gate": gate}
    else:
        q, extra = qp.weight, {}
    kv = attn.kv
    return {"q": q, "k": kv.k_proj.proj.weight, "v": kv.v_proj.proj.weight, "o": attn.o_proj.weight, **extra}


def diff_weights(attn: torch.nn.Module) -> dict[str, Tensor]:
    lq1, lk1, lq2, lk2 = attn.weights.lambdas
    return {"lq1": lq1, "lk1": lk1, "lq2": lq2, "lk2": lk2, "subln": attn.weights.norm.weight}


def fox_weights(attn: torch.nn.Module) -> dict[str, Tensor]:
    slot = attn.weights
    out = {"fgate": slot.proj.weight, "fgate_bias": slot.bias}
    if hasattr(slot, "k_shift"):
        out |= {"k_shift": slot.k_shift.proj.weight, "v_shift": slot.v_shift.proj.weight,
                "q_norm": slot.q_norm.weight.flatten(), "k_norm": slot.k_norm.weight.flatten(),
                "o_norm": attn.sdpa_post[0].weight.flatten()}
    return out


@dataclass(frozen=True)
class Case:
    """An arm, the base model it is built on, and its reference as a function of (x, weights, cfg)."""

    reference: Callable[[Tensor, dict[str, Tensor], ModelConfig], Tensor]
    own: Callable[[torch.nn.Module], dict[str, Tensor]] = lambda attn: {}
    base: dict[str, Any] = field(default_factory=dict)


def _gqa(fn: Callable[..., Tensor]) -> Callable[[Tensor, dict[str, Tensor], ModelConfig], Tensor]:
    return lambda x, w, cfg: fn(x, w, heads=cfg.n_heads, kv_heads=cfg.n_kv_heads)


MHA = {"n_kv_heads": 4}  # FoX asserts num_kv_heads is None
CASES: dict[str, Case] = {
    "diff-attention-matched": Case(
        lambda x, w, cfg: diff_v1(x, w, heads=cfg.n_heads // 2, kv_heads=cfg.n_kv_heads // 2, depth=LAYER),
        diff_weights),
    "diff-attention": Case(
        lambda x, w, cfg: diff_v1(x, w, heads=cfg.n_heads // 2, kv_heads=cfg.n_kv_heads // 2, depth=LAYER),
        diff_weights),
    "diff-v2": Case(lambda x, w, cfg: diff_v2(x, w, heads=cfg.n_heads, kv_heads=cfg.n_kv_heads),
                    lambda attn: {"lambda": attn.weights.lambda_proj.weight}),
    "forgetting-attention": Case(lambda x, w, cfg: fox(x, w, heads=cfg.n_heads), fox_weights, MHA),
    "forgetting-attention-rope": Case(
        lambda x, w, cfg: fox(x, w, heads=cfg.n_heads, rope_base=cfg.rope_theta), fox_weights,
        {**MHA, "rope": True}),
    "forgetting-pro": Case(lambda x, w, cfg: fox(x, w, heads=cfg.n_heads, pro=True), fox_weights, MHA),
    "selective-attention": Case(_gqa(selective)),
    "sink-learned": Case(_gqa(gpt_oss_sinks), lambda attn: {"sinks": attn.weights.sink}),
    "softmax-off-by-one": Case(_gqa(by_weights(_softmax1))),
    "sigmoid-attention": Case(_gqa(by_weights(_sigmoid))),
    "softpick": Case(_gqa(by_weights(_softpick))),
}


def layer(name: str, scale: str) -> tuple[ModelConfig, torch.nn.Module, Tensor]:
    """The arm's attention at layer ``LAYER`` of a 2-layer tiny model (its weights as built, or all drawn
    from N(0, 1)), and a normed input ``x``."""
    base = {"qk_norm": False, "rope": False, **CASES[name].base}
    cfg = apply_variant(ModelConfig(preset="tiny", **base), name)
    torch.manual_seed(0)
    model = build_model(cfg)
    if scale == "O(1)":
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
    x = torch.randn(B, T, cfg.d_model)
    return cfg, model, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))


def compare(ours: Tensor, ref: Tensor) -> None:
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def test_every_arm_with_a_reference_is_checked_here() -> None:
    """Each catalogue arm of the attention weights slot names its reference and is a case here."""
    slot_arms = {n for n, v in VARIANTS.items() if v.changes.get("attn_weights", "softmax") != "softmax"}
    assert slot_arms == set(CASES)
    assert all(VARIANTS[n].reference is not None for n in [*CASES, "sdpa-headwise-sparse"])


@pytest.mark.parametrize("probe", [False, True], ids=["train", "probe"])
@pytest.mark.parametrize("scale", ["init", "O(1)"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_arm_computes_its_references_forward(name: str, scale: str, probe: bool) -> None:
    cfg, model, x = layer(name, scale)
    attn = model.blocks[LAYER].attn
    cos, sin = model.rotary(T, x.device)
    w = {**projections(attn), **CASES[name].own(attn)}
    with torch.no_grad():
        ours, _ = attn(x, cos, sin, probe)
        ref = CASES[name].reference(x, {k: v.detach() for k, v in w.items()}, cfg)
    assert ref.abs().max() > 0
    compare(ours, ref)


@pytest.mark.parametrize("name", ["diff-attention-matched", "diff-attention"])
def test_the_comparison_sees_the_old_norm_eps(name: str) -> None:
    """At init, differential attention's output is small enough that the sub-layer norm's eps shows: the
    reference with ablate's former 1e-6 does not match to 1e-4, so the test above would have failed."""
    cfg, model, x = layer(name, "init")
    attn = model.blocks[LAYER].attn
    w = {k: v.detach() for k, v in {**projections(attn), **diff_weights(attn)}.items()}
    with torch.no_grad():
        ours, _ = attn(x, *model.rotary(T, x.device))
        old = diff_v1(x, w, heads=cfg.n_heads // 2, kv_heads=cfg.n_kv_heads // 2, depth=LAYER, eps=1e-6)
    with pytest.raises(AssertionError):
        compare(ours, old)
    assert attn.weights.lambda_init == lambda_init_at(LAYER)


def modded_nanogpt_gate(y: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """CausalSelfAttention's sparse attention gate (modded-nanogpt train_gpt.py, 9d9dc969): y times
    sigmoid(attn_gate(x[..., :12])) per head."""
    b, t, heads, _ = y.shape
    return y * torch.sigmoid(x[..., :12] @ weight.T).view(b, t, heads, 1)


@pytest.mark.parametrize("init_rng", ["sequential", "per-parameter"])
def test_the_sparse_gate_starts_at_zero_and_computes_modded_nanogpts_gate(init_rng: str) -> None:
    cfg = apply_variant(ModelConfig(preset="tiny", init_rng=init_rng), "sdpa-headwise-sparse")
    torch.manual_seed(0)
    model = build_model(cfg, seed=0)
    for block in model.blocks:
        assert torch.equal(block.attn.gate_sdpa.proj.weight, torch.zeros(cfg.n_heads, 12))  # attn_gate zeroed
    gate = model.blocks[LAYER].attn.gate_sdpa
    y, x = torch.randn(B, T, cfg.n_heads, cfg.head_dim), torch.randn(B, T, cfg.d_model)
    for _ in ("init", "O(1)"):
        with torch.no_grad():
            ours, _ = gate(y, x)
            compare(ours, modded_nanogpt_gate(y, x, gate.proj.weight))
            gate.proj.weight.normal_()
