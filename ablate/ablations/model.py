"""The Qwen3-style decoder with every arm of the paper: attention -> block -> decoder -> ``build_model``.

Everything optional is a module chosen from config fields at build time (an absent arm is an identity), so
``forward`` reads the same for every variant. ``probe=True`` additionally computes the attention probabilities
explicitly and returns per-layer tensors for analysis; training (``probe=False``) uses the fused SDPA kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ablate.ablations.config import ModelConfig
from ablate.ablations.gates import (
    QueryGateProjection,
    gate_for,
    kv_for,
    query_gate_rows,
    query_projection,
    sdpa_post_for,
)
from ablate.ablations.init_rng import Parts, init_per_parameter, init_sequential
from ablate.ablations.layers import Clip, MoE, NoRope, RMSNorm, Rope, Rotary, SwiGLU
from ablate.ablations.plugins import build as build_plugin
from ablate.ablations.plugins import inits as plugin_inits
from ablate.ablations.plugins import slot as plugin_slot
from ablate.ablations.weights import weights_for


class ModelOutput(NamedTuple):
    """``logits [B, T, V]``; ``aux_loss`` (scalar, 0 for dense); ``probes`` per layer when asked, else
    None."""

    logits: torch.Tensor
    aux_loss: torch.Tensor
    probes: list[dict[str, torch.Tensor | None]] | None


class Attention(nn.Module):
    """GQA with per-head q/k RMSNorm, RoPE, causal attention weights and the five gate slots G1..G5.

    Order: project -> q/k norm -> G4/G3/G2 gates -> RoPE (``rope``: off for ``rope: false``) -> weights
    (SDPA) -> SDPA norm/SiLU -> G1 -> W_o -> G5. The weights slot (``weights``, from ``attn_weights``; it also
    reads the block's normed input ``x``, and is built for its ``layer``, 0-based) is softmax through SDPA
    unless an arm replaces it; a plugin arm (``ablate.ablations.plugins``) fills the weights slot or one gate
    slot.
    An input-dependent G1 gate's projection is fused into the query projection's weight (``fuse_g1``;
    Qwen3-Next's layout in export: see ``QueryGateProjection``); ``fuse_g1=False`` builds the same function
    with a separate gate projection.
    """

    def __init__(self, cfg: ModelConfig, *, fuse_g1: bool = True, layer: int = 0):
        super().__init__()
        d, nq, nk, dk = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = nq, nk, dk
        # DIFF V2 projects two query heads per output head: its G1 gate is not fused into them
        nq_in = cfg.query_heads
        self.q_proj = query_projection(cfg.gate, d, nq_in, dk, fuse=fuse_g1 and nq_in == nq)
        fused = isinstance(self.q_proj, QueryGateProjection)
        self.kv = kv_for(cfg.switch, d, nk, dk)
        self.o_proj = nn.Linear(nq * dk, d, bias=False)
        self.q_norm = RMSNorm(dk, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(dk, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.gate_q = gate_for(cfg, "G4", nq_in, dk)
        self.gate_k = gate_for(cfg, "G3", nk, dk)
        self.gate_v = gate_for(cfg, "G2", nk, dk)
        self.rope = Rope() if cfg.rope else NoRope()
        plugged = plugin_slot(cfg) == "weights"
        self.weights = build_plugin(cfg) if plugged else weights_for(cfg, layer)
        self.sdpa_post = sdpa_post_for(cfg.sdpa_norm, cfg.sdpa_silu, nq, dk, cfg.norm_eps)
        self.gate_sdpa = gate_for(cfg, "G1", nq, dk, fused=fused)
        self.gate_out = gate_for(cfg, "G5", 1, d)
        if fused:  # a checkpoint with the gate's rows apart, or per head (ablate before): stacked on load
            self._register_load_state_dict_pre_hook(  # type: ignore[no-untyped-call]  # unannotated in torch
                self._stack_query_gate)

    def init_parts(self) -> Parts:
        """The fused query projection's rows under their unfused names (``init_rng.init_per_parameter``):
        the query rows are ``q_proj.weight`` as in a model without the gate, the gate rows
        ``gate_sdpa.proj.weight`` as in one built with ``fuse_g1=False``."""
        if not isinstance(self.q_proj, QueryGateProjection):
            return {}
        q_rows, gate_rows = self.q_proj.rows
        return {"q_proj.proj.weight": [("q_proj.weight", q_rows), ("gate_sdpa.proj.weight", gate_rows)]}

    def _stack_query_gate(self, state: dict[str, torch.Tensor], prefix: str, *args: object) -> None:
        key = f"{prefix}q_proj.proj.weight"
        rows = None if key in state else query_gate_rows(state, prefix, self.n_heads, self.head_dim)
        if rows is not None:
            state.pop(f"{prefix}q_proj.weight")
            state.pop(f"{prefix}gate_sdpa.proj.weight", None)
            state[key] = torch.cat(rows)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, probe: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None] | None]:
        # (B, T, q, dk); the G1 gate's input: its logits (B, T, q, w) if fused, else x
        q, g1_in = self.q_proj(x)
        q = self.q_norm(q)
        k, v, switch_scores = self.kv(x)  # (B, T, k, dk) each
        k = self.k_norm(k)
        q, g4 = self.gate_q(q, x)
        k, g3 = self.gate_k(k, x)
        v, g2 = self.gate_v(v, x)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, T, dk)
        y, attn = self.weights(q, k, v, probe, x=x)  # (B, q, T, dk); attn (B, heads, T, T) when probed
        y_pre = y.transpose(1, 2)  # (B, T, q, dk)
        y, g1 = self.gate_sdpa(self.sdpa_post(y_pre), g1_in)
        out, g5 = self.gate_out(self.o_proj(y.flatten(-2)), x)  # (B, T, d)
        if not probe:
            return out, None
        gate = next((s for s in (g1, g2, g3, g4, g5, switch_scores) if s is not None), None)
        return out, dict(gate=gate, sdpa_pre=y_pre, sdpa_post=y, attn=attn)


class Block(nn.Module):
    """Pre-norm block: x + out(attn(norm(x))), then x + out(ffn(norm(x))), ``out`` = sandwich norm then clip.

    The attention's output passes the ``attn_out`` slot after its sandwich norm: ``NoGate`` unless a plugin
    arm fills it (``(a, norm(x)) -> (a', scores)``, a G5 gate's signature); its scores are the layer's gate
    statistics where the attention has no gate of its own."""

    def __init__(self, cfg: ModelConfig, *, fuse_g1: bool = True, layer: int = 0):
        super().__init__()
        d, eps = cfg.d_model, cfg.norm_eps
        self.attn_norm = RMSNorm(d, eps)
        self.attn = Attention(cfg, fuse_g1=fuse_g1, layer=layer)
        self.attn_out_norm = RMSNorm(d, eps) if cfg.sandwich_norm else nn.Identity()
        self.attn_out = gate_for(cfg, "attn_out", 1, d)
        self.ffn_norm = RMSNorm(d, eps)
        self.ffn = MoE(cfg) if cfg.is_moe else SwiGLU(d, cfg.ffn_dim)
        self.ffn_out_norm = RMSNorm(d, eps) if cfg.sandwich_norm else nn.Identity()
        self.clip = Clip(cfg.output_clip) if cfg.output_clip else nn.Identity()

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, probe: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor | None] | None]:
        h = self.attn_norm(x)
        a, probes = self.attn(h, cos, sin, probe)
        a, scores = self.attn_out(self.attn_out_norm(a), h)
        x = x + self.clip(a)
        if probes is not None and probes["gate"] is None:
            probes["gate"] = scores
        f, aux = self.ffn(self.ffn_norm(x))
        x = x + self.clip(self.ffn_out_norm(f))
        return x, aux, probes


class Decoder(nn.Module):
    """Embedding -> blocks -> final RMSNorm -> LM head (tied to the embedding or not).

    ``plugin_init``: ``{qualified name: "own" | "ablate"}``, the init each module of a plugin arm got
    (``plugins.inits``; empty without one)."""

    def __init__(self, cfg: ModelConfig, *, fuse_g1: bool = True, seed: int | None = None):
        super().__init__()
        self.cfg = cfg
        # _weight skips nn.Embedding's own normal_ init; the init below draws it (off the meta device).
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model,
                                  _weight=torch.empty(cfg.vocab_size, cfg.d_model))
        self.rotary = Rotary(cfg)
        self.blocks = nn.ModuleList(Block(cfg, fuse_g1=fuse_g1, layer=i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # {qualified name: "own" | "ablate"} of the plugin arm's modules: the "own" ones keep their __init__'s
        self.plugin_init = plugin_inits(self, cfg)
        own = [name for name, init in self.plugin_init.items() if init == "own"]
        if cfg.init_rng == "sequential":  # drawn before tying: the untied head's draw is part of the stream
            init_sequential(self, cfg.init_std, keep=own)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        if cfg.init_rng == "per-parameter":
            init_per_parameter(self, cfg.init_std, torch.initial_seed() if seed is None else seed, keep=own)

    def forward(self, idx: torch.Tensor, probe: bool = False) -> ModelOutput:
        """``idx [B, T]`` token ids -> ``ModelOutput``; ``probe=True`` adds per-layer tensors (detached)."""
        x = self.embed(idx)  # (B, T, d)
        cos, sin = self.rotary(idx.shape[1], idx.device)
        aux = x.new_zeros((), dtype=torch.float32)
        probes: list[dict[str, torch.Tensor | None]] | None = [] if probe else None
        for block in self.blocks:
            x, block_aux, p = block(x, cos, sin, probe)
            aux = aux + block_aux
            if probes is not None and p is not None:
                p["hidden"] = x
                probes.append({k: (t.detach() if t is not None else None) for k, t in p.items()})
        return ModelOutput(self.lm_head(self.norm(x)), aux, probes)


def build_model(cfg: ModelConfig, *, device: torch.device | str | None = None,
                fuse_g1: bool = True, seed: int | None = None) -> Decoder:
    """The decoder for ``cfg`` with its N(0, init_std) init (a plugin arm's modules keep their own unless
    their class asks for it: ``Decoder.plugin_init``); ``device="meta"`` builds without memory.
    ``fuse_g1=False``: the G1 gate's projection apart from the query's (the same function, for comparison).
    ``seed``: the run's seed, which keys every parameter's stream when ``cfg.init_rng`` is ``per-parameter``
    (None: the global generator's seed, ``torch.initial_seed()``); a ``sequential`` init draws from the global
    generator as it stands (the runner seeds it with the run's seed first).

    >>> build_model(ModelConfig(preset="tiny"))(torch.zeros(1, 8, dtype=torch.long)).logits.shape
    torch.Size([1, 8, 320])
    """
    if device is None:
        return Decoder(cfg, fuse_g1=fuse_g1, seed=seed)
    with torch.device(device):
        return Decoder(cfg, fuse_g1=fuse_g1, seed=seed)
