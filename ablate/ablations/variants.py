"""The variant catalogue: every arm of the paper as data, and ``apply_variant`` to put one on a model config.

A ``Variant``'s ``changes`` are ``ModelConfig`` field overrides. A value is either a plain value (``gate`` as
a ``GateSpec`` mapping) or a ``Rel`` relative to the base config (``Rel("x", 2)`` doubles the field,
``Rel("+", 4)`` adds four), so "double the key/value heads" means the same thing at every preset. Importing
this module never imports torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from ablate.ablations.config import ModelConfig
from ablate.errors import ConfigError, one_of


@dataclass(frozen=True)
class Rel:
    """A change relative to the base config's value: ``x`` multiplies, ``+`` adds. Must land on an integer."""

    op: Literal["x", "+"]
    value: float

    def apply(self, base: int, *, field_name: str) -> int:
        new = base * self.value if self.op == "x" else base + self.value
        if new != int(new):
            raise ConfigError(
                f"{self} on {field_name}={base} gives {new}, not an integer; choose a preset where it "
                "divides",
                where=f"model.{field_name}",
            )
        return int(new)

    def __str__(self) -> str:
        return f"{self.op}{self.value:g}"


GATED_ATTENTION = "Qiu et al. 2025, Gated Attention for LLMs (arXiv 2505.06708)"


@dataclass(frozen=True)
class Reference:
    """The authors' code an arm's layer computes the same forward as
    (tests/unit/ablations/test_attn_reference.py holds it to a re-derivation of that code): ``path`` of
    repository ``repo`` at ``commit``, or, where the authors published no code, a paper's figure or formula
    (``repo`` the paper, no commit). ``note``: what the arm leaves to the decoder or does differently, if
    anything."""

    repo: str
    path: str
    commit: str = ""
    note: str = ""

    def __str__(self) -> str:
        """``owner/name@commit12:path``, or ``paper, path`` without a commit."""
        return f"{self.repo}@{self.commit[:12]}:{self.path}" if self.commit else f"{self.repo}, {self.path}"


@dataclass(frozen=True)
class Variant:
    """One catalogue entry. ``paper`` lists the rows it reproduces (``"table1:5"``); ``act_func`` and
    ``score_shape`` are the paper's descriptor columns (``"-"`` where they do not apply); ``source`` names the
    paper the arm comes from (the gated-attention paper unless said); ``reference`` the authors' code it was
    checked against. ``revision`` counts the times what the arm computes changed (its ``changes``, or its
    layer's code): past 1 it is in the run id (``RunConfig.variant_revision``), so runs trained before a
    change are not read as runs of the arm as it is now."""

    name: str
    description: str
    paper: tuple[str, ...]
    changes: dict[str, Any] = field(default_factory=dict)
    requires_moe: bool = False
    act_func: str = "-"
    score_shape: str = "-"
    source: str = GATED_ATTENTION
    reference: Reference | None = None
    revision: int = 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``Rel`` changes as strings like ``"x2"``, the reference as its fields and ``pin``
        (``owner/name@commit:path``)."""
        changes = {k: (str(v) if isinstance(v, Rel) else v) for k, v in self.changes.items()}
        ref = self.reference
        return dict(
            name=self.name, description=self.description, paper=list(self.paper), changes=changes,
            requires_moe=self.requires_moe, act_func=self.act_func, score_shape=self.score_shape,
            source=self.source, revision=self.revision,
            reference=None if ref is None else dict(repo=ref.repo, path=ref.path, commit=ref.commit,
                                                    note=ref.note, pin=str(ref)),
        )


def _gate(position: str = "G1", **spec: Any) -> dict[str, Any]:
    return {"gate": {"position": position, **spec}}


_ELEM, _HEAD = {"granularity": "elementwise"}, {"granularity": "headwise"}
_DIFF = "Ye et al. 2025, Differential Transformer (ICLR 2025; arXiv 2410.05258)"
_FOX = ("Lin et al. 2025, Forgetting Transformer: Softmax Attention with a Forget Gate (ICLR 2025; arXiv "
        "2503.02130)")
_DIFF_V1_REF = Reference(
    "microsoft/unilm", "Diff-Transformer/multihead_flashdiff_1.py",
    "b3783e7d6c080cd682345aa80f3b2322e447da38",
    "its sub-layer RMSNorm is rms_norm.py (62aab43c), eps 1e-5; the reference has no QK-norm and rotates "
    "interleaved pairs, ablate keeps the decoder's QK-norm and half-split RoPE, as for every arm")
_FOX_REF = Reference(
    "zhixuan-lin/forgetting-transformer",
    "src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py",
    "883f260c636e87971339749b0d8310004794a5cc",
    "ForgettingAttentionLayer, fgate_type full, as configs/experiment/longcrawl64/forgetting_transformer/"
    "llama_125m_2b.yaml sets it; ablate keeps the decoder's QK-norm (and, with RoPE, its rope_theta; FoX's "
    "code uses 500000 for its baseline and FoX alike)")
_T2_BASELINE = ("table2:1", "table2:3", "table2:5", "table2:6", "table2:11", "table2:12")
_T2_ELEMENTWISE = ("table2:2", "table2:4", "table2:8", "table2:10", "table2:13", "table2:14")

_CATALOGUE: list[Variant] = [
    # ---- reference baselines (Table 1 rows 1-4)
    Variant("baseline", "the plain Qwen3-style decoder, no gate",
            ("table1:1", "table3:1", "table4:1", "table6:1", *_T2_BASELINE)),
    Variant("kv-heads-x2",
            "twice the key/value heads (paper: k=8 at 4 kv heads); a parameter-matched reference",
            ("table1:2",), {"n_kv_heads": Rel("x", 2)}),
    Variant("q-heads-x1.5", "1.5x the query heads (paper: q=48 at 32 q heads); a parameter-matched reference",
            ("table1:3",), {"n_heads": Rel("x", 1.5)}),
    Variant("add-4-experts",
            "four more experts and four more active per token; a parameter-matched reference", ("table1:4",),
            {"n_experts": Rel("+", 4), "moe_top_k": Rel("+", 4)}, requires_moe=True),
    # ---- gate positions (Table 1 rows 5-9)
    Variant("sdpa-elementwise",
            "sigmoid gate on the SDPA output, one score per head and dim (the paper's best)",
            ("table1:5", "table3:2", "table4:2", *_T2_ELEMENTWISE), _gate("G1", **_ELEM), act_func="sigmoid",
            score_shape="n x q x dk"),
    Variant("v-elementwise", "sigmoid gate on the value projection, per kv head and dim",
            ("table1:6", "table3:3", "table4:5"), _gate("G2", **_ELEM), act_func="sigmoid",
            score_shape="n x k x dk"),
    Variant("k-elementwise", "sigmoid gate on the key projection, per kv head and dim",
            ("table1:7",), _gate("G3", **_ELEM), act_func="sigmoid", score_shape="n x k x dk"),
    Variant("q-elementwise", "sigmoid gate on the query projection, per query head and dim",
            ("table1:8",), _gate("G4", **_ELEM), act_func="sigmoid", score_shape="n x q x dk"),
    Variant("dense-output", "sigmoid gate after the attention output projection W_o, per model dim",
            ("table1:9",), _gate("G5", **_ELEM), act_func="sigmoid", score_shape="n x dmodel"),
    # ---- granularity (rows 10-11), head-shared (12-13)
    Variant("sdpa-headwise", "sigmoid gate on the SDPA output, one score per query head",
            ("table1:10", "table4:3", "table2:9"), _gate("G1", **_HEAD), act_func="sigmoid",
            score_shape="n x q"),
    Variant("v-headwise", "sigmoid gate on the value projection, one score per kv head",
            ("table1:11",), _gate("G2", **_HEAD), act_func="sigmoid", score_shape="n x q"),
    Variant("sdpa-head-shared", "SDPA elementwise gate whose per-head scores are averaged over the heads",
            ("table1:12", "table4:4"), _gate("G1", **_ELEM, shared=True), act_func="sigmoid",
            score_shape="n x dk"),
    Variant("v-head-shared", "value elementwise gate whose per-head scores are averaged over the kv heads",
            ("table1:13",), _gate("G2", **_ELEM, shared=True), act_func="sigmoid", score_shape="n x dk"),
    # ---- combination and activation (rows 14-15, Table 3)
    Variant("sdpa-additive-silu", "additive gate on the SDPA output: Y + silu(XW)",
            ("table1:14", "table3:4"), _gate("G1", **_ELEM, combine="additive", activation="silu"),
            act_func="SiLU", score_shape="n x q x dk"),
    Variant("sdpa-elementwise-silu", "SDPA elementwise gate with SiLU instead of sigmoid: Y * silu(XW)",
            ("table1:15",), _gate("G1", **_ELEM, activation="silu"), act_func="SiLU",
            score_shape="n x q x dk"),
    Variant("sdpa-groupnorm", "RMSNorm per head on the SDPA output, no gate ('SDPA GroupNorm')",
            ("table3:5",), {"sdpa_norm": True}, act_func="RMSNorm"),
    Variant("sdpa-silu", "SiLU alone on the SDPA output, no gate projection",
            ("table3:6",), {"sdpa_silu": True}, act_func="SiLU"),
    Variant("sdpa-additive-identity", "additive linear gate on the SDPA output: Y + XW",
            ("table3:7",), _gate("G1", **_ELEM, combine="additive", activation="identity"),
            act_func="identity", score_shape="n x q x dk"),
    # ---- sparsity (Table 4 rows 6-7)
    Variant("sdpa-input-independent",
            "SDPA elementwise gate from a learned per-head constant, not from the input", ("table4:6",),
            _gate("G1", **_ELEM, input="independent"), act_func="sigmoid", score_shape="q x dk"),
    Variant("sdpa-ns-sigmoid",
            "SDPA elementwise gate with the non-sparse 0.5 + 0.5 sigmoid (scores in [0.5, 1])", ("table4:7",),
            _gate("G1", **_ELEM, activation="ns_sigmoid"), act_func="NS-sigmoid", score_shape="n x q x dk"),
    # ---- stability (Table 2 row 7, Appendix A.5)
    Variant("sandwich-norm", "RMSNorm on attention and FFN outputs before the residual add (no gate)",
            ("table2:7",), {"sandwich_norm": True}),
    Variant("clip-300", "attention and FFN outputs clipped to (-300, 300) before the residual (Appendix A.5)",
            (), {"output_clip": 300.0}),
    Variant("clip-100", "attention and FFN outputs clipped to (-100, 100) before the residual (Appendix A.5)",
            (), {"output_clip": 100.0}),
    # ---- switch heads (Table 6)
    Variant("switch-kv-8top8",
            "switch heads: 8 key and 8 value experts per kv head, all 8 active, sigmoid router",
            ("table6:2",), {"switch": {"kind": "kv", "n_experts": 8, "top_k": 8}}, act_func="sigmoid",
            score_shape="n x k x E"),
    Variant("switch-kv-4top4", "switch heads: 4 key and 4 value experts per kv head, all 4 active",
            ("table6:3",), {"switch": {"kind": "kv", "n_experts": 4, "top_k": 4}}, act_func="sigmoid",
            score_shape="n x k x E"),
    Variant("switch-v-4top4", "switch heads: 4 value experts per kv head, all 4 active",
            ("table6:4",), {"switch": {"kind": "v", "n_experts": 4, "top_k": 4}}, act_func="sigmoid",
            score_shape="n x k x E"),
    Variant("switch-v-8top2", "switch heads: 8 value experts per kv head, top 2 active",
            ("table6:5",), {"switch": {"kind": "v", "n_experts": 8, "top_k": 2}}, act_func="sigmoid",
            score_shape="n x k x E"),
    Variant("switch-v-1top1", "switch heads with one value expert: the same function as v-headwise",
            ("table6:6",), {"switch": {"kind": "v", "n_experts": 1, "top_k": 1}}, act_func="sigmoid",
            score_shape="n x k"),
    # ---- beyond the paper's tables: completing the position x granularity grid and the non-linearity story
    Variant("k-headwise", "sigmoid gate on the key projection, one score per kv head (not in the paper)",
            (), _gate("G3", **_HEAD), act_func="sigmoid", score_shape="n x k"),
    Variant("q-headwise", "sigmoid gate on the query projection, one score per query head (not in the paper)",
            (), _gate("G4", **_HEAD), act_func="sigmoid", score_shape="n x q"),
    Variant("sdpa-multiplicative-identity",
            "linear multiplicative gate on the SDPA output: Y * XW (not in the paper)", (),
            _gate("G1", **_ELEM, activation="identity"), act_func="identity", score_shape="n x q x dk"),
    Variant("sdpa-headwise-input-independent",
            "SDPA headwise gate from a learned per-head constant (not in the paper)", (),
            _gate("G1", **_HEAD, input="independent"), act_func="sigmoid", score_shape="q"),
    # ---- the field's other sink fixes: the attention weights slot (ablate/ablations/weights.py), no gate
    Variant("sink-learned",
            "softmax with a learned per-head sink logit in the denominator (a zero-value key)", (),
            {"attn_weights": "sink-learned"}, act_func="softmax+sink", score_shape="q",
            source="OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card; Xiao et al. 2023 (arXiv 2309.17453)",
            reference=Reference("openai/gpt-oss", "gpt_oss/torch/model.py",
                                "243a1b02767da73bd2e3975be250afa801635866",
                                "sdpa(): the sink logit per query head; gpt-oss loads its sinks from a "
                                "checkpoint, ablate starts them at 0")),
    Variant("softmax-off-by-one", "softmax with an extra zero logit: a sink fixed at 0 (softmax1)",
            (), {"attn_weights": "softmax1"}, act_func="softmax1",
            source="Miller 2023, Attention Is Off By One (blog post)",
            reference=Reference("Miller 2023, Attention Is Off By One (blog post; no code)",
                                "softmax_1(x)_i = exp(x_i) / (1 + sum_j exp(x_j))")),
    Variant("sigmoid-attention", "sigmoid(QK^T/sqrt(d) - log T) per key, no normalisation across keys",
            (), {"attn_weights": "sigmoid"}, act_func="sigmoid",
            source="Ramapuram et al. 2024, Theory, Analysis, and Best Practices for Sigmoid Self-Attention "
                   "(arXiv 2409.04431)",
            reference=Reference("apple/ml-sigmoid-attention",
                                "attention_simulator/src/attention_simulator/layers/attention.py",
                                "9273b493f234ccbb184cab1131010dd0e965d8ce",
                                "Attention.forward with attn_bias = -log(n), the training length (their "
                                "configs: -7.62 at 2048); ablate takes n from the sequence it is given")),
    Variant("softpick", "ReLU(e^x - 1) / (sum |e^x - 1| + eps) over the visible keys, instead of softmax",
            (), {"attn_weights": "softpick"}, act_func="softpick",
            source="Zuhri et al. 2025, Softpick: No Attention Sink, No Massive Activations (arXiv "
                   "2504.20966)",
            reference=Reference("zaydzuhri/softpick-attention", "flash_softpick_attn.py",
                                "c97f4dc5f9fcec2e8afc2932db2cba6d7d7e5465",
                                "the forward kernel: m the row max, eps 1e-6 on the e^-m-scaled sum (the "
                                "repo's naive_softpick_attn.py adds 1e-8 instead)"),
            revision=2),
    # ---- the field's 2025-26 changes to softmax attention beside G1 (differential.py, cumulative.py)
    Variant("diff-attention",
            "differential attention on the baseline's heads: each head's query and key split in two (two "
            "maps of head_dim/2, the second subtracted with a learned lambda), its value whole; per-head "
            "RMSNorm",
            (), {"attn_weights": "differential", "n_heads": Rel("x", 2), "n_kv_heads": Rel("x", 2),
                 "head_dim": Rel("x", 0.5), "diff_norm_eps": 1e-5}, act_func="softmax-λsoftmax",
            score_shape="q", source=_DIFF, reference=_DIFF_V1_REF, revision=2),
    Variant("diff-attention-matched",
            "differential attention in the paper's layout: half the heads, each two maps of the baseline's "
            "head_dim and a value twice as wide (the baseline's projections)", (),
            {"attn_weights": "differential", "diff_norm_eps": 1e-5}, act_func="softmax-λsoftmax",
            score_shape="q/2", source=_DIFF, reference=_DIFF_V1_REF, revision=2),
    Variant("diff-v2",
            "DIFF V2: two query heads per output head in one GQA group, y1 - sigmoid(x W) y2, lambda per "
            "token and head; no norm", (), {"attn_weights": "diff-v2"}, act_func="softmax-σ(λ)softmax",
            score_shape="n x q",
            source="Ye, Dong, Sun, Wei 2026, Differential Transformer V2 (Microsoft, Hugging Face blog, 20 "
                   "January 2026; code: microsoft/unilm Diff-Transformer-V2)",
            reference=Reference("microsoft/unilm",
                                "Diff-Transformer/Diff-Transformer-V2/multihead_flashdiffv2.py",
                                "31646c58ba06272ce1771bf07681751f0114abd0",
                                "MultiheadFlashDiffV2 with use_diff_v2; no QK-norm and interleaved RoPE "
                                "there, the decoder's here")),
    Variant("forgetting-attention",
            "softmax logits plus a per-head forget gate's cumulative log decay, sum of log f over j+1..i; no "
            "RoPE (as the paper trains it)", (), {"attn_weights": "forgetting", "rope": False},
            act_func="softmax+decay", score_shape="n x q", source=_FOX, reference=_FOX_REF),
    Variant("forgetting-attention-rope", "forgetting attention with RoPE kept", (),
            {"attn_weights": "forgetting"}, act_func="softmax+decay", score_shape="n x q", source=_FOX,
            reference=_FOX_REF),
    Variant("forgetting-pro",
            "FoX Pro, the paper's recommended block: forgetting attention with data-dependent key and value "
            "shifts and per-head QK-norm, then a per-head RMSNorm and an elementwise sigmoid output gate "
            "(G1); no RoPE", (),
            {"attn_weights": "forgetting-pro", "rope": False, "qk_norm": False, "sdpa_norm": True,
             **_gate("G1", **_ELEM)}, act_func="softmax+decay", score_shape="n x q", source=_FOX,
            reference=Reference(
                _FOX_REF.repo, _FOX_REF.path, _FOX_REF.commit,
                "as configs/experiment/longcrawl64/forgetting_transformer/pro_125m_2b.yaml sets it "
                "(use_k_shift, use_v_shift, qk_norm, use_output_gate, use_output_norm; no RoPE); the output "
                "gate and norm are ablate's G1 gate and sdpa_norm, the QK-norm the arm's own (a scale per "
                "head, eps 1e-5) in place of the decoder's; Pro's smaller FFN (hidden_ratio 3.5) is left to "
                "match_params")),
    Variant("selective-attention",
            "every head's logits less what head 0 selected away (its ReLU logits summed over earlier "
            "queries); parameter-free", (), {"attn_weights": "selective"}, act_func="softmax-F",
            source="Leviathan, Kalman, Matias 2025, Selective Attention Improves Transformer (ICLR 2025; "
                   "arXiv 2410.02703)",
            reference=Reference("Leviathan et al., arXiv 2410.02703v2 (no code published)",
                                "Figure 2, the sketch of selective attention")),
    Variant("sdpa-headwise-sparse",
            "G1 headwise gate reading only the first 12 channels of the block's input (a fraction of "
            "sdpa-headwise's parameters), its weights starting at zero", (),
            _gate("G1", **_HEAD, input_dims=12, init="zero"), act_func="sigmoid", score_shape="n x q",
            source="modded-nanogpt (Jordan et al. 2024-25), its attention gate; G1 headwise of "
                   + GATED_ATTENTION,
            reference=Reference("KellerJordan/modded-nanogpt", "train_gpt.py",
                                "9d9dc969c451c87b7ad3c84f807db2c2d9109f41",
                                "CausalSelfAttention.attn_gate, the commit that added it: 12 channels, "
                                "zero-initialised, sigmoid, one score per head"),
            revision=2),
]

VARIANTS: dict[str, Variant] = {v.name: v for v in _CATALOGUE}


def get_variant(name: str) -> Variant:
    """The catalogue entry ``name``; ConfigError with a near match if there is none."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(one_of(name, VARIANTS, what="variant"), where="variant") from None


def fill_revision(run: Any, resolver: Any = None) -> dict[str, Any]:
    """``RunConfig.variant_revision`` of ``run`` (an identity field): its catalogue arm's ``revision`` past
    the first, else None (an arm unchanged since it was added, a plugin arm, whose ``version`` is its own).
    Reads only ``run.variant`` (a grid's expansion fills it once per variant).

    >>> fill_revision(type("Run", (), {"variant": "diff-attention"})())
    {'variant_revision': 2}
    """
    variant = VARIANTS.get(run.variant)
    revision = variant.revision if variant is not None else 1
    return {"variant_revision": revision if revision > 1 else None}


def is_plugin_arm(model: ModelConfig, name: str) -> bool:
    """Is ``name`` the label of the plugin arm ``model`` carries (``PluginArm.label``)? Then the plugin is the
    variant: applying it changes nothing more, and the model without it is ``without_variant``."""
    return model.plugin is not None and name == model.plugin.label


def without_variant(model: ModelConfig, name: str) -> ModelConfig:
    """The reference a variant's added parameters are counted against: ``model``, less a plugin arm's
    plugin."""
    return model.model_copy(update={"plugin": None}) if is_plugin_arm(model, name) else model


def resolve_changes(model: ModelConfig, name: str) -> dict[str, Any]:
    """The variant's changes as plain field values for this base config (``Rel`` applied)."""
    if is_plugin_arm(model, name):
        return {}
    variant = get_variant(name)
    if variant.requires_moe and not model.is_moe:
        raise ConfigError(
            f"variant {name!r} needs a mixture-of-experts model (n_experts > 0), but model preset "
            f"{model.preset!r} is dense (n_experts=0); use a MoE preset such as 'tiny-moe' or "
            "'paper-moe-15a2b'",
            where="variant",
        )
    return {
        k: (v.apply(getattr(model, k), field_name=k) if isinstance(v, Rel) else v)
        for k, v in variant.changes.items()
    }


@functools.lru_cache(maxsize=4096)  # a grid applies a few variants to a few models, thousands of times
def apply_variant(model: ModelConfig, name: str) -> ModelConfig:
    """The effective architecture of a run: ``model`` with variant ``name``'s changes on top (ModelConfig is
    frozen, so the answer is cached and shared).

    >>> apply_variant(ModelConfig(preset="tiny"), "kv-heads-x2").n_kv_heads
    4
    """
    changes = resolve_changes(model, name)
    try:
        return ModelConfig(**{**model.model_dump(), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(
            f"variant {name!r} on preset {model.preset!r} gives an invalid model: {err['msg']}",
            where=f"model{'.' + loc if loc else ''}",
        ) from None
