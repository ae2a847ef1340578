"""The model's config: every architectural choice of the paper as a typed field.

``ModelConfig(preset="tiny")`` fills every field from the preset; fields given beside it override the preset.
The resolved config (``model_dump()``) has no missing values, so it serializes unchanged to YAML, MLflow and
SQL. Importing this module never imports torch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ablate.ablations.presets import PRESETS
from ablate.errors import one_of

GatePosition = Literal["G1", "G2", "G3", "G4", "G5"]
InitRng = Literal["sequential", "per-parameter"]
AttnWeights = Literal["softmax", "sink-learned", "softmax1", "sigmoid", "softpick", "differential", "diff-v2",
                      "forgetting", "forgetting-pro", "selective"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GateSpec(_Strict):
    """Paper Eq. 5: Y' = Y (op) act(X W), X the block input after its pre-norm.

    - position: G1 SDPA output (per query head), G2 value, G3 key, G4 query, G5 after W_o.
    - granularity: ``elementwise`` (a score per dimension) or ``headwise`` (one score per head).
    - shared: head-shared (per-head scores averaged over heads) instead of head-specific.
    - combine: ``multiplicative`` (Y * s) or ``additive`` (Y + s).
    - activation: sigmoid, silu, ns_sigmoid (0.5 + 0.5 sigmoid), identity.
    - input: ``dependent`` (X W) or ``independent`` (a learned per-head parameter, zero-initialised).
    - init: an input-dependent gate's ``W`` drawn as every matrix is (``normal``, N(0, init_std)) or ``zero``
      (scores start at act(0): modded-nanogpt's attention gate).
    """

    position: GatePosition = "G1"
    granularity: Literal["elementwise", "headwise"] = "elementwise"
    shared: bool = False
    combine: Literal["multiplicative", "additive"] = "multiplicative"
    activation: Literal["sigmoid", "silu", "ns_sigmoid", "identity"] = "sigmoid"
    input: Literal["dependent", "independent"] = "dependent"
    bias: bool = False
    input_dims: int | None = Field(
        None, ge=1, description="an input-dependent gate reads only the first k channels of the block's "
        "normed input (modded-nanogpt's attention gate: k = 12); None = all d_model")
    init: Literal["normal", "zero"] = Field(
        "normal", description="an input-dependent gate's weights at the start: normal (N(0, init_std), as "
        "every matrix) or zero (modded-nanogpt's attention gate: every score starts at act(0)); a zero gate "
        "is never fused into the query projection")

    @model_validator(mode="after")
    def _zero_needs_weights(self) -> GateSpec:
        if self.init == "zero" and self.input == "independent":
            raise ValueError("gate.init 'zero' is for an input-dependent gate's weights; an "
                             "input-independent gate's logits start at zero already")
        return self


class SwitchSpec(_Strict):
    """Switch heads (paper Table 6): per head, ``n_experts`` value (``v``) or key and value (``kv``) experts,
    mixed by sigmoid router scores of the normed input, top-k, non-competitive."""

    kind: Literal["v", "kv"] = "v"
    n_experts: int = Field(4, ge=1)
    top_k: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _k_le_e(self) -> SwitchSpec:
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
        return self


class PluginArm(_Strict):
    """An arm from the user's code (``ablate.ablations.plugins``): ``arm`` is ``module:Class`` (or the name an
    installed package registers under the ``ablate.arms`` entry points), ``args`` the keyword arguments its
    ``Args`` model validates. ``version`` is filled by ablate when the grid is loaded: the package's version,
    or else a hash of the module's source, so the run id changes with the plugin's code."""

    arm: str = Field(pattern=r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$",
                     description="module:Class, or a name registered under the ablate.arms entry points")
    args: dict[str, Any] = Field(default_factory=dict, description="the arm's arguments (its Args model)")
    version: str | None = Field(
        None, description="filled by ablate when the grid is loaded (a grid file never sets it): the plugin "
        "package's version, or sha256 of its module's source",
        json_schema_extra={"identity": True, "filled_by": "ablate.ablations.plugins:fill_version"})

    def __hash__(self) -> int:  # args is a dict: hash by value, so a ModelConfig holding it can be cached on
        return hash(self.model_dump_json())

    @property
    def label(self) -> str:
        """The run's variant name: ``module:Class``, with its arguments when it has some."""
        args = ",".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"{self.arm}({args})" if args else self.arm


class ModelConfig(_Strict):
    """A Qwen3-style decoder. Every field has a default; ``preset`` supplies the shape fields."""

    preset: str = Field("tiny", description="size preset that supplies the shape fields (see PRESETS)")
    # shape
    n_layers: int = Field(2, ge=1)
    d_model: int = Field(64, ge=1)
    n_heads: int = Field(4, ge=1, description="query heads (q)")
    n_kv_heads: int = Field(2, ge=1, description="key/value heads (k)")
    head_dim: int = Field(16, ge=2, description="d_k; even, for RoPE's half split")
    ffn_dim: int = Field(192, ge=1, description="SwiGLU intermediate width (dense FFN)")
    vocab_size: int = Field(320, ge=2)
    tie_embeddings: bool = True
    # attention
    qk_norm: bool = True
    rope_theta: float = Field(10000.0, gt=0)
    rope_yarn_factor: float = Field(1.0, ge=1, description="YaRN context scaling factor (1 = off)")
    rope_yarn_original_len: int = Field(0, ge=0, description="YaRN: the length the model was trained at")
    norm_eps: float = Field(1e-6, gt=0)
    init_std: float = Field(0.02, gt=0)
    init_rng: InitRng = Field(
        "sequential", description="how the initial weights are drawn: sequential (one stream in build order: "
        "two arms at one seed share no weight) or per-parameter (a stream per parameter keyed by the run's "
        "seed, its name and its shape: every weight two arms both have is identical at step 0)")
    # mixture of experts (n_experts == 0: dense SwiGLU FFN)
    n_experts: int = Field(0, ge=0)
    expert_dim: int = Field(0, ge=0, description="width of one expert's SwiGLU")
    moe_top_k: int = Field(0, ge=0)
    moe_renormalize: bool = True
    moe_aux_coef: float = Field(0.001, ge=0, description="load-balancing loss coefficient")
    moe_z_coef: float = Field(0.0, ge=0, description="router z-loss coefficient")
    # the paper's arms
    gate: GateSpec | None = None
    sdpa_norm: bool = Field(False, description="RMSNorm per head on the SDPA output ('SDPA GroupNorm')")
    sdpa_silu: bool = Field(False, description="SiLU alone on the SDPA output")
    sandwich_norm: bool = Field(False, description="RMSNorm on attention and FFN outputs before the residual")
    output_clip: float | None = Field(None, gt=0, description="clip attention/FFN outputs to (-c, c) (A.5)")
    switch: SwitchSpec | None = None
    # the attention weights slot (ablate/ablations/weights.py): the field's sink fixes and other 2025-26 arms
    attn_weights: AttnWeights = Field(
        "softmax", description="how scores become attention weights: softmax; sink-learned (a learned "
        "per-head sink logit); softmax1 (a zero sink logit); sigmoid (b = -log T, unnormalised); softpick; "
        "differential (two maps per pair of heads, the second subtracted); diff-v2 (two query heads per "
        "output head, a per-token sigmoid lambda); forgetting (a forget gate's cumulative decay on the "
        "logits); forgetting-pro (forgetting with FoX Pro's key and value shifts and per-head QK-norm); "
        "selective (logits less what head 0 selected away)")
    diff_lambda_init: float | None = Field(
        None, description="differential attention's lambda_init (read by attn_weights: differential only): "
        "None = the paper's 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l; else this constant, in [0, 1)")
    diff_norm_eps: float | None = Field(
        None, gt=0, description="the eps of differential attention's per-head RMSNorm (read by attn_weights: "
        "differential only; the reference code's 1e-5 in the catalogue's arms); None = norm_eps")
    forget_bias_init: float | None = Field(
        0.0, description="forgetting attention's forget-gate bias b_f at initialisation (read by "
        "attn_weights: forgetting only; FoX: 0, so f starts near 0.5); None = no bias, refused")
    rope: bool = Field(True, description="rotary position embedding on queries and keys (off: position only "
                       "through the causal mask, and forgetting attention's decay)")
    plugin: PluginArm | None = Field(None, description="an arm from the user's code (set by a grid's variant "
                                     "{arm: module:Class, args: {...}}): the attention weights (replacing "
                                     "attn_weights), a gate at G1-G5 or the block's attention output "
                                     "(ablate.ablations.plugins)")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        name = data.get("preset", "tiny")
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(one_of(name, PRESETS, what="preset"))
        return {**PRESETS[name], **data}

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for RoPE")
        if self.n_experts:
            if not (1 <= self.moe_top_k <= self.n_experts):
                raise ValueError(f"moe_top_k ({self.moe_top_k}) must be in 1..n_experts ({self.n_experts})")
            if self.expert_dim < 1:
                raise ValueError("expert_dim must be >= 1 when n_experts > 0")
        if self.gate is not None and self.gate.input_dims is not None:
            if self.gate.input == "independent":
                raise ValueError(f"gate.input_dims ({self.gate.input_dims}) is for an input-dependent gate; "
                                 "an input-independent gate reads no input")
            if self.gate.input_dims > self.d_model:
                raise ValueError(f"gate.input_dims (k={self.gate.input_dims}) must be at most d_model "
                                 f"({self.d_model}): the gate reads the first k channels of the block's "
                                 "input")
        self._check_arm_fields()
        return self

    def _check_arm_fields(self) -> None:
        """The attention weights arms' own fields: in range (each is read only by its arm)."""
        lam = self.diff_lambda_init
        if lam is not None and not 0 <= lam < 1:
            raise ValueError(f"diff_lambda_init ({lam}) must be in [0, 1): differential attention scales its "
                             "output by 1 - lambda_init, and a negative one would add the second map")
        if self.attn_weights == "differential" and (self.n_heads % 2 or self.n_kv_heads % 2):
            raise ValueError(f"differential attention pairs adjacent heads: n_heads ({self.n_heads}) and "
                             f"n_kv_heads ({self.n_kv_heads}) must be even")
        if self.attn_weights in ("forgetting", "forgetting-pro") and self.forget_bias_init is None:
            raise ValueError("forget_bias_init is None: a forget gate without a bias is not Forgetting "
                             "attention's (f_t = sigmoid(w_f x_t + b_f), Lin et al. 2025); give b_f's "
                             "initial value (FoX: 0.0)")

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def query_heads(self) -> int:
        """The query projection's heads: two per output head for DIFF V2 (subtracted in pairs), else
        ``n_heads``."""
        return 2 * self.n_heads if self.attn_weights == "diff-v2" else self.n_heads
