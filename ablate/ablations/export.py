"""Interop: a model as a Hugging Face transformers folder (``config.json`` + ``model.safetensors``).

The target class follows from the config's fields, never from the variant's name:

- ``Qwen3ForCausalLM``: the dense baseline family (baseline, kv-heads-x2, q-heads-x1.5).
- ``Qwen3MoeForCausalLM``: the same on a mixture-of-experts preset (baseline, add-4-experts).
- ``Qwen3NextForCausalLM``: the G1 gate (sigmoid, multiplicative, input-dependent, no bias) on a dense or MoE
  preset. Qwen3-Next's full-attention layer is exactly the paper's G1: ``q_proj`` emits per head ``[q_h ;
  g_h]`` and the SDPA output is multiplied by ``sigmoid(g)`` before ``o_proj``. Every layer is written
  ``full_attention`` (no linear attention), ``partial_rotary_factor`` is 1.0 (transformers' default is 0.25),
  RMSNorm scales are stored as ``w - 1`` (Qwen3-Next norms scale by ``1 + w``), and on MoE the always-present
  shared expert is zero-width, so it adds nothing. A headwise gate becomes an elementwise one whose rows
  repeat within each head; a head-shared gate one whose rows are the heads' mean (its logits are averaged
  before the sigmoid).

Everything else (gates at G2-G5, other activations, additive gates, input-independent gates, a gate reading
part of its input, SDPA norm or SiLU, sandwich norm, clipping, switch heads, no q/k norm, no RoPE, attention
weights other than softmax, plugin arms) has no transformers class and is refused with a ConfigError naming
the field, before anything is written.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

from ablate.ablations.config import ModelConfig
from ablate.ablations.gates import fuse_query_gate, query_gate_rows
from ablate.errors import ConfigError

log = logging.getLogger(__name__)

QWEN3, QWEN3_MOE, QWEN3_NEXT = "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM"
DEFAULT_MAX_POSITIONS = 32768

# Fields no transformers class can express at a non-default value, with why.
_NO_CLASS: dict[str, tuple[object, str]] = {
    "switch": (None, "switch heads (per-head value/key experts) exist in no transformers model"),
    "sdpa_norm": (False, "no transformers attention normalizes the SDPA output per head"),
    "sdpa_silu": (False, "no transformers attention applies SiLU to the SDPA output"),
    "sandwich_norm": (False, "Qwen3 and Qwen3-Next have no norm after attention and FFN (sandwich norm)"),
    "output_clip": (None, "no transformers decoder clips its attention/FFN outputs"),
    "qk_norm": (True, "Qwen3 and Qwen3-Next always normalize queries and keys per head"),
    "attn_weights": ("softmax", "Qwen3 and Qwen3-Next attend with a plain softmax (no sink, sigmoid, "
                     "softpick, differential map, forget gate or selection)"),
    "rope": (True, "Qwen3 and Qwen3-Next always rotate queries and keys (RoPE)"),
    "plugin": (None, "a plugin arm is the user's code, which no transformers class holds"),
}
# G1 gate fields Qwen3-Next fixes: sigmoid(x W) times the SDPA output, W without bias.
_QWEN3_NEXT_GATE: dict[str, object] = dict(position="G1", combine="multiplicative", activation="sigmoid",
                                        input="dependent", bias=False, input_dims=None)


def hf_target(cfg: ModelConfig) -> str:
    """The transformers class ``cfg`` exports to; a ConfigError naming the field no class can express.

    >>> hf_target(ModelConfig(preset="tiny"))
    'Qwen3ForCausalLM'
    """
    for field, (default, why) in _NO_CLASS.items():
        value = getattr(cfg, field)
        if value != default:
            raise ConfigError(f"cannot export {field}={value!r} to Hugging Face: {why}",
                              where=f"model.{field}")
    if cfg.gate is None:
        return QWEN3_MOE if cfg.is_moe else QWEN3
    for field, wanted in _QWEN3_NEXT_GATE.items():
        value = getattr(cfg.gate, field)
        if value != wanted:
            raise ConfigError(
                f"cannot export gate.{field}={value!r} to Hugging Face: the only gated attention in "
                "transformers is Qwen3-Next's, "
                f"{', '.join(f'{k}={v!r}' for k, v in _QWEN3_NEXT_GATE.items())}",
                where=f"model.gate.{field}")
    return QWEN3_NEXT


def hf_unsupported(cfg: ModelConfig) -> dict[str, object]:
    """The field of ``cfg`` no transformers class can express, with its value (empty = exportable)."""
    try:
        hf_target(cfg)
    except ConfigError as exc:
        field = (exc.where or "").removeprefix("model.")
        obj: object = cfg
        for part in field.split("."):
            obj = getattr(obj, part)
        return {field: obj}
    return {}


def _rope(cfg: ModelConfig, max_positions: int | None) -> tuple[dict[str, object], int]:
    """``rope_parameters`` (partial_rotary_factor 1.0: every dim rotates, as in ablate) and the context
    length."""
    rope: dict[str, object] = {"rope_type": "default", "rope_theta": cfg.rope_theta,
                            "partial_rotary_factor": 1.0}
    max_pos = max_positions or DEFAULT_MAX_POSITIONS
    if cfg.rope_yarn_factor > 1:
        rope.update(rope_type="yarn", factor=cfg.rope_yarn_factor,
                    original_max_position_embeddings=cfg.rope_yarn_original_len)
        max_pos = int(cfg.rope_yarn_original_len * cfg.rope_yarn_factor)
    return rope, max_pos


def hf_config(cfg: ModelConfig, *, max_positions: int | None = None,
              eos_id: int | None = None) -> dict[str, object]:
    """The ``config.json`` of the transformers model equivalent to ``cfg`` (see ``hf_target``).

    ``max_positions``: the context the model was trained for (``max_position_embeddings``, what lm-eval and
    vLLM take as the window); ``eos_id``: the tokenizer's end-of-text id.
    """
    target = hf_target(cfg)
    rope, max_pos = _rope(cfg, max_positions)
    common: dict[str, object] = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
        rms_norm_eps=cfg.norm_eps, initializer_range=cfg.init_std, tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters=rope, max_position_embeddings=max_pos, eos_token_id=eos_id,
    )
    moe = dict(num_experts=cfg.n_experts, num_experts_per_tok=cfg.moe_top_k,
               moe_intermediate_size=cfg.expert_dim, norm_topk_prob=cfg.moe_renormalize,
               decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=cfg.moe_aux_coef)
    if target == QWEN3:
        hf = transformers.Qwen3Config(**common, intermediate_size=cfg.ffn_dim,
                                           max_window_layers=cfg.n_layers, use_sliding_window=False,
                                           sliding_window=None)
    elif target == QWEN3_MOE:
        hf = transformers.Qwen3MoeConfig(**common, **moe, intermediate_size=cfg.ffn_dim,
                                         use_sliding_window=False, sliding_window=None,
                                         max_window_layers=cfg.n_layers)
    else:
        experts = moe | dict(shared_expert_intermediate_size=0) if cfg.is_moe else dict(num_experts=0)
        hf = transformers.Qwen3NextConfig(**common, **experts, intermediate_size=cfg.ffn_dim,
                                          layer_types=["full_attention"] * cfg.n_layers)
    out: dict[str, object] = hf.to_dict()
    out["architectures"] = [target]
    out["torch_dtype"] = "float32"
    return out


def _gated_q_proj(state: Mapping[str, torch.Tensor], prefix: str, cfg: ModelConfig) -> torch.Tensor:
    """Qwen3-Next's ``q_proj`` weight, ``[nq * 2 dk, d]``: per head the query rows then dk gate rows.

    ``state`` holds the G1 gate in any form ablate writes (``gates.query_gate_rows``): fused into the query
    projection (all query rows, then all gate rows: ``QueryGateProjection``), apart from it
    (``fuse_g1=False``), or in the per-head layout of checkpoints from before.
    """
    nq, dk, d = cfg.n_heads, cfg.head_dim, cfg.d_model
    rows = query_gate_rows(state, prefix + "attn.", nq, dk)
    if rows is None:
        raise KeyError(f"{prefix}attn.q_proj.proj.weight")
    q, g = rows
    g = g.reshape(nq, -1, d)  # (nq, dk or 1, d): elementwise or headwise rows
    if cfg.gate is not None and cfg.gate.shared:  # the heads' logits are averaged before the sigmoid
        g = g.mean(0, keepdim=True)
    g = g.expand(nq, dk, d).reshape(nq * dk, d)  # headwise: its one row repeated over the head's dims
    return fuse_query_gate(q, g, nq)


def hf_state_dict(state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A ``Decoder`` state dict as the target class's parameters (contiguous CPU copies, a tied head left
    out)."""
    target = hf_target(cfg)
    next_norm: Callable[[torch.Tensor], torch.Tensor] = (  # Qwen3-Next scales by 1 + w
        (lambda w: w - 1) if target == QWEN3_NEXT else (lambda w: w))
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": state["embed.weight"],
                           "model.norm.weight": next_norm(state["norm.weight"])}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    for i in range(cfg.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        out.update({
            f"{theirs}input_layernorm.weight": next_norm(state[f"{ours}attn_norm.weight"]),
            f"{theirs}post_attention_layernorm.weight": next_norm(state[f"{ours}ffn_norm.weight"]),
            f"{theirs}self_attn.q_norm.weight": next_norm(state[f"{ours}attn.q_norm.weight"]),
            f"{theirs}self_attn.k_norm.weight": next_norm(state[f"{ours}attn.k_norm.weight"]),
            f"{theirs}self_attn.k_proj.weight": state[f"{ours}attn.kv.k_proj.proj.weight"],
            f"{theirs}self_attn.v_proj.weight": state[f"{ours}attn.kv.v_proj.proj.weight"],
            f"{theirs}self_attn.o_proj.weight": state[f"{ours}attn.o_proj.weight"],
            f"{theirs}self_attn.q_proj.weight": (_gated_q_proj(state, ours, cfg) if target == QWEN3_NEXT
                                                 else state[f"{ours}attn.q_proj.weight"]),
        })
        if cfg.is_moe:  # ours: x @ gate_up[e] (d, 2w), theirs: F.linear(x, gate_up_proj[e]) (2w, d)
            out.update({
                f"{theirs}mlp.gate.weight": state[f"{ours}ffn.router.weight"],
                f"{theirs}mlp.experts.gate_up_proj": state[f"{ours}ffn.gate_up"].transpose(1, 2),
                f"{theirs}mlp.experts.down_proj": state[f"{ours}ffn.down"].transpose(1, 2),
            })
            if target == QWEN3_NEXT:  # its MoE block always has a shared expert: zero-width, it adds nothing
                d = cfg.d_model
                out.update({
                    f"{theirs}mlp.shared_expert.gate_proj.weight": torch.zeros(0, d),
                    f"{theirs}mlp.shared_expert.up_proj.weight": torch.zeros(0, d),
                    f"{theirs}mlp.shared_expert.down_proj.weight": torch.zeros(d, 0),
                    f"{theirs}mlp.shared_expert_gate.weight": torch.zeros(1, d),
                })
        else:
            out.update({f"{theirs}mlp.{p}.weight": state[f"{ours}ffn.{p}.weight"]
                        for p in ("gate_proj", "up_proj", "down_proj")})
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in out.items()}


def export_hf(model: torch.nn.Module | Mapping[str, torch.Tensor], cfg: ModelConfig,
              out_dir: str | os.PathLike[str], *, max_positions: int | None = None,
              eos_id: int | None = None) -> Path:
    """Write ``model`` (a ``Decoder`` or its state dict) into ``out_dir`` as a transformers folder; returns
    it.

    Raises ConfigError, before writing anything, for a config no transformers class can express (see
    ``hf_target``). ``ablate export`` calls this inside a staged folder, with the tokenizer and model card.
    """
    target = hf_target(cfg)
    state = model if isinstance(model, Mapping) else model.state_dict()
    try:
        tensors = hf_state_dict(state, cfg)
    except KeyError as exc:
        raise ConfigError(
            f"the model's weights lack {exc.args[0]!r}; is it a Decoder built from this config?",
            where="model",
        ) from None
    config = hf_config(cfg, max_positions=max_positions, eos_id=eos_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    log.info("exported a %s-preset model as %s to %s", cfg.preset, target, out)
    return out
