"""Peak memory per device of one training step, estimated from the config alone (no torch, no memory; a plugin
arm's module is measured on the meta device).

What a device holds (docs/scale.md itemises it with numbers):

- **parameters** ``N`` (the gate's included): fp32 (4 bytes each). Under ``bf16-mixed`` autocast also keeps a
  bf16 copy of every weight it multiplies with (2 bytes, saved for the backward pass). FSDP keeps ``4N / k``
  (its shard of k devices) plus bf16 copies of the units it has gathered: the root's (embedding, final norm,
  head) and two decoder blocks (the one computing and the one prefetched).
- **gradients**: fp32, ``4N`` (``4N / k`` under FSDP, plus a gathered block's bf16 gradient and its fp32 copy
  for the reduction). DDP adds its gradient buckets (another ``4N``). They exist from the backward pass to the
  optimizer step, so they add to the activations only when micro-batches accumulate into them.
- **optimizer state**: AdamW's two fp32 moments, ``8N`` (``8N / k`` under FSDP); its step adds one temporary
  fp32 tensor per parameter (``4N``, ``4N / k``) beside the gradients.
- **activations** of one micro-batch (``rows x seq_len`` tokens): what each block saves for the backward pass,
  counted tensor by tensor from ``ablate.ablations.model`` (``_block_elements``: norms, projections, RoPE,
  SDPA's output and log-sum-exp, the gate's logits, scores and product, the FFN's four intermediates), plus
  the head's logits (the model's dtype, an fp32 copy and ``log_softmax``'s fp32 output). An attention-weights
  arm other than softmax keeps fp32 ``T x T`` maps per head (``SCORE_MAPS``: the sink's probabilities, where
  SDPA falls back to its math kernel for a float mask, as for forgetting and selective attention's; sigmoid's
  and softpick's hand-computed intermediates); differential attention and DIFF V2 keep their fused calls'
  outputs (``_arm_elements``).
  A plugin arm's module is the user's code, so what it keeps is measured instead: one forward of it on the
  meta device under saved-tensor hooks, at the run's shapes (``plugins.saved_bytes``), in place of SDPA's
  output and log-sum-exp for a weights arm. With activation checkpointing only each block's input is kept and
  one block is recomputed at a time.
- **temporaries** at the peak: the start of the backward pass, where the logits' fp32 gradients (two) are
  alive with every activation.

The peak is the larger of (the backward pass starting: parameters, optimizer state, activations, the head's
temporaries, and accumulated gradients) and (the optimizer step: parameters, gradients, optimizer state and
its temporary). ``tests/unit/ablations/test_memory.py`` checks the estimate against the peak measured by
PyTorch's ``MemTracker`` on CPU; ``bench/gpu_check.sh`` against ``torch.cuda.max_memory_allocated`` on a GPU.
Not counted: the CUDA context and the allocator's cache (``FIT_FRACTION`` of a device is taken as usable),
evaluation (no gradients: smaller).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from ablate.ablations import plugins
from ablate.ablations.config import ModelConfig
from ablate.ablations.params import count_params
from ablate.errors import ConfigError

GiB = 2**30
# of a device's memory: the rest goes to the CUDA context, the allocator's cache, fragmentation
FIT_FRACTION = 0.9
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": GiB, "gb": GiB, "gib": GiB, "t": 2**40, "tb": 2**40, "tib": 2**40}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device at the step's peak, itemised; ``total`` is their sum."""

    params: float
    grads: float
    optimizer: float
    activations: float
    temporaries: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.temporaries

    @property
    def gb(self) -> float:
        """The total in GiB (2^30 bytes: the unit GPU memory is quoted in)."""
        return self.total / GiB

    def itemised_gb(self) -> dict[str, float]:
        """Each item and the total in GiB, rounded to 0.0001."""
        # not asdict: it deep-copies, per run of a plan
        items = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: round(v / GiB, 4) for k, v in items.items()} | {"total": round(self.gb, 4)}


def parse_memory(text: str, *, where: str = "--device-memory") -> float:
    """``"80GB"``, ``"80 GiB"``, ``"81920MB"``, ``"1.5T"`` -> bytes (every unit binary: 1 GB = 2^30 bytes).

    >>> parse_memory("80GB") / 2**30
    80.0
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS or float(m.group(1)) <= 0:
        raise ConfigError(f"{text!r} is not an amount of memory; give a positive number with a unit, e.g. "
                          "80GB, 40GiB, 24000MB (1 GB = 2^30 bytes)", where=where)
    return float(m.group(1)) * _UNITS[unit]


# fp32 T x T maps per head that one block keeps for the backward pass, by ``ModelConfig.attn_weights``:
# counted on CPU with MemTracker (tests/unit/ablations/test_memory.py); a GPU's fused kernel with a float
# mask keeps fewer for the sinks.
# Forgetting and selective attention pass a float mask to SDPA too (its math kernel keeps the weights and the
# mask's gradient); differential attention's fused calls keep none.
SCORE_MAPS = {"softmax": 0, "sink-learned": 1, "softmax1": 1, "sigmoid": 2, "softpick": 6,
              "differential": 0, "diff-v2": 0, "forgetting": 1.5, "forgetting-pro": 1.5, "selective": 1.25}


def _arm_elements(cfg: ModelConfig, q: int) -> int:
    """Elements per token an attention weights arm keeps beyond SDPA's output (``q`` wide), measured on CPU
    with MemTracker (tests/unit/ablations/test_memory.py): differential attention its two maps' outputs per
    value half, their difference, the per-head norm and scale; DIFF V2 its lambda logits and scores;
    selective attention head 0's running sum's rows; FoX Pro its normed queries, its shifted and normed keys
    and shifted values and their shift weights."""
    h, kv = cfg.n_heads, cfg.n_kv_heads * cfg.head_dim
    return {"differential": 5 * q + h, "diff-v2": 2 * h, "selective": 2 * q,
            "forgetting-pro": q + 3 * kv + 2 * cfg.n_kv_heads}.get(cfg.attn_weights, 0)


def _block_elements(cfg: ModelConfig) -> float:
    """Elements per token that one decoder block saves for its backward pass (in the activation dtype)."""
    d, h, hk, dk, hq = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.query_heads
    q, kv = h * dk, hk * dk
    qi = hq * dk  # the query projection's width (DIFF V2: twice the output's)
    norm = 2  # an RMSNorm keeps its normalised input and its output, each of its width
    n = norm * d  # attention's pre-norm
    n += qi + kv + kv  # the projections' outputs
    n += (norm * qi + norm * kv) if cfg.qk_norm else 0
    n += (qi + kv) if cfg.rope else 0  # RoPE's rotated q and k
    if plugins.slot(cfg) != "weights":  # a weights plugin's own tensors are measured (plugins.saved_bytes)
        n += qi + hq  # SDPA's output and log-sum-exp (fused attention: no T x T probabilities)
    n += _arm_elements(cfg, q)
    n += q  # the heads' output made contiguous for W_o
    g = cfg.gate
    if g is not None:
        heads, width = {"G1": (h, dk), "G2": (hk, dk), "G3": (hk, dk), "G4": (hq, dk),
                        "G5": (1, d)}[g.position]
        w = width if g.granularity == "elementwise" else 1
        # logits, scores, product
        n += (heads * w if g.input == "dependent" else 0) + heads * w + heads * width
    n += norm * q if cfg.sdpa_norm else 0
    n += q if cfg.sdpa_silu else 0
    if cfg.switch is not None:
        e = cfg.switch.n_experts
        # router scores; expert outputs
        n += hk * e * 2 + (2 if cfg.switch.kind == "kv" else 1) * (kv * e * 2)
    n += d  # the residual stream after attention
    n += norm * d  # the FFN's pre-norm
    if cfg.is_moe:
        k, w, e = cfg.moe_top_k, cfg.expert_dim, cfg.n_experts
        # router logits and probabilities; per expert: x, gate/up, silu, product, y
        n += 2 * e + k * (2 * d + 4 * w) + d
    else:
        n += 4 * cfg.ffn_dim  # gate, silu(gate), up, their product
    n += d  # the residual stream after the FFN
    n += 2 * norm * d if cfg.sandwich_norm else 0
    n += 2 * d if cfg.output_clip else 0
    return n


def _norm_elements(cfg: ModelConfig) -> float:
    """Elements per token of the RMSNorms of one block (their fp32 copies under bf16 autocast)."""
    q, kv = cfg.query_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return (
        2 * cfg.d_model * (1 + cfg.sandwich_norm)
        + (q + kv if cfg.qk_norm else 0)
        + (q if cfg.sdpa_norm else 0)
    )


def estimate_memory(model: ModelConfig, *, seq_len: int, rows: int, accumulate: int = 1,
                    precision: str = "32-true", strategy: str = "auto", devices: int = 1,
                    checkpointing: bool = False, gpu: bool = False) -> MemoryEstimate:
    """Peak bytes per device of a training step of ``model`` (the variant already applied) on ``rows`` rows of
    ``seq_len`` tokens per device per micro-batch (``accumulate`` micro-batches per step).

    ``precision``: ``32-true``, ``bf16-mixed`` or ``16-mixed``; ``strategy``: ``auto``/``ddp`` (replicated) or
    ``fsdp`` (sharded over ``devices``; one device is plain training); ``gpu``: AdamW's step runs on all
    parameters at once there (``foreach``), one parameter at a time on CPU. See the module docstring for the
    terms.

    >>> round(estimate_memory(ModelConfig(preset="paper-dense-1.7b"), seq_len=4096, rows=1,
    ...                       precision="bf16-mixed", strategy="fsdp", devices=8).gb, 1) > 0
    True
    """
    total = count_params(model)
    n = float(total.total)
    vocab = total.total - total.non_embedding
    block = (total.non_embedding - model.d_model) / model.n_layers  # a decoder block's parameters
    half = precision in ("bf16-mixed", "16-mixed")
    shard = strategy == "fsdp" and devices > 1
    k = devices if shard else 1
    act = 2 if half else 4  # bytes of an activation
    tokens = rows * seq_len

    params = master = 4 * n / k
    if shard:  # gathered bf16 units: the root's parameters and two blocks
        params += 2 * (vocab + model.d_model + 2 * block)
    elif half:  # autocast's bf16 copies of the weights it multiplies with
        params += 2 * n
    grads = 4 * n / k + (6 * block if shard else 0) + (4 * n if strategy == "ddp" and devices > 1 else 0)
    optimizer = 8 * n / k
    # AdamW's temporary: a tensor per parameter at once on a GPU (foreach), the largest parameter's on CPU
    step_temp = 4 * n / k if gpu else 4 * max(vocab / (2 - model.tie_embeddings), block / 3) / k

    # norms' fp32 copies
    per_block = _block_elements(model) * act + (_norm_elements(model) * 4 if half else 0)
    # per token: a row of each map
    per_block += SCORE_MAPS[model.attn_weights] * model.query_heads * seq_len * 4
    per_block += plugins.saved_bytes(model, rows=rows, seq_len=seq_len, half=half) / tokens
    if checkpointing:  # each block's input kept; one block recomputed at a time
        blocks = model.n_layers * model.d_model * act + per_block
    else:
        blocks = model.n_layers * per_block
    # the logits (an fp32 copy too under autocast) and log_softmax's fp32 output; the final norm; the
    # embedding
    head = model.vocab_size * (act + 4 + (4 if half else 0)) + 3 * model.d_model * act
    activations = tokens * (blocks + head)
    # the logits' fp32 gradients at the start of the backward pass
    temporaries = tokens * model.vocab_size * 8
    held = grads if accumulate > 1 else 0.0  # gradients accumulated over earlier micro-batches
    backward = params + optimizer + activations + temporaries + held
    step = master + optimizer + grads + step_temp  # the bf16 copies and gathered units are freed by then
    if backward >= step:
        return MemoryEstimate(params, held, optimizer, activations, temporaries)
    return MemoryEstimate(master, grads, optimizer, 0.0, step_temp)


def resolved_precision(precision: str, gpu: bool) -> str:
    """``train.precision`` with ``auto`` resolved as the runner does: bf16-mixed on a GPU, 32-true on CPU."""
    return precision if precision != "auto" else ("bf16-mixed" if gpu else "32-true")


def gpu_here() -> bool:
    """Is a CUDA GPU visible to this process? (Without importing torch: the NVIDIA driver's device list.)"""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def device_memory() -> float | None:
    """The smallest visible CUDA device's memory in bytes, or None without a GPU (imports torch)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return float(
        min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
    )


def fmt_gb(nbytes: float) -> str:
    """``85899345920`` -> ``'80.0 GB'``; below 0.1 GB three significant digits (``'0.0107 GB'``)."""
    return f"{nbytes / GiB:.1f} GB" if nbytes >= GiB / 10 or nbytes == 0 else f"{nbytes / GiB:.3g} GB"
