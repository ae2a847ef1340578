"""``RunConfig``: the one complete description of a run (model, data, train, eval, variant, seed).

Everything that changes a run's behaviour is a field here, with a documented default. The resolved config
(``run.model_dump(mode="json")``) is what MLflow records as params and what the store keeps; the run id hashes
its fields that differ from their defaults, with ``CONFIG_VERSION`` (``ablate/grid/ids.py``). Importing this
module never imports torch.

Adding a field: give it a default that keeps today's behaviour; no run id changes. Then record it:
``python -m ablate.grid.defaults --record``. Changing a default's value (or a preset's, or a rule that fills
an omitted field): bump ``CONFIG_VERSION``, record, and tell users to run ``ablate db rehash``.

Identity fields (``identity_field``) say what a run read outside its config (its data files' fingerprints):
ablate fills them when a grid is loaded, a grid file may not set them, and the run id covers them
(``ablate/grid/identity.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ablate.ablations.config import ModelConfig, PluginArm
from ablate.ablations.presets import PRESETS
from ablate.errors import did_you_mean, one_of

# What a field left out of a config means: bumped by hand when a default's value changes (ablate/grid/ids.py).
# 2: data sources and hf: tokenizers carry fingerprints of their files, relative paths are made absolute.
CONFIG_VERSION = 2


def _not_a_bool(value: Any) -> Any:
    # pydantic reads true as 1 in an int field: `seed: [true]` would silently be seed 1
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not a boolean")
    return value


Int = Annotated[int, BeforeValidator(_not_a_bool)]


def identity_field(filled_by: str, description: str) -> Any:
    """A field that ablate fills when a grid is loaded, by calling ``filled_by`` ("module:function", given the
    model that holds the field and a resolver; it returns the fields to update), never set by a grid file. The
    run id covers it; the stem id (``grid.identity.stem_id``) does not, so a change of it reads as stale."""
    return Field(None, description=description, json_schema_extra={"identity": True, "filled_by": filled_by})


def shorthand(fn: Any) -> Any:
    """Mark a ``before`` model validator that only spells a grid's shorthand out into the model's own fields
    (a resolved config's dump passes through it unchanged): it fills no omitted field, so run ids
    (``ablate.grid.ids``) compare the model's fields with their defaults instead of re-validating it without
    each field, which for ``RunConfig`` would cost a validation of the whole run per field."""
    fn.__ablate_shorthand__ = True
    return fn


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


BUILTIN_CORPORA = ("python-code", "python-docs", "arithmetic", "bigram-backcopy")


class SourceConfig(_Strict):
    """One data source.

    - ``builtin``: ``name`` is ``python-code`` (the running Python's standard library source), ``python-docs``
      (its documentation text: pydoc topics and docstrings), ``arithmetic`` or ``bigram-backcopy`` (synthetic
      streams; see ``ablate.runner.corpora``).
    - ``text``: ``path`` is a file, directory or glob of text files.
    - ``jsonl``: ``path`` (file or glob) of JSON lines; ``field`` holds the text.
    - ``tokens``: ``path`` (file or glob) of flat pre-tokenized binary shards; ``dtype`` uint16 or uint32.
    - ``hf``: ``path`` is a Hugging Face ``datasets`` folder saved with ``save_to_disk``; ``field`` holds the
      text.
    - ``task``: ``name`` is an offline benchmark task whose examples are the stream. Its training rows start
      at an example (``[eos] + prompt + answer``, the following examples packed after it up to the row's end)
      and, with ``loss: answer`` (its default), only the answer tokens count in the loss.
    """

    kind: Literal["builtin", "text", "jsonl", "tokens", "hf", "task"] = Field(
        "builtin", description="where the text comes from: builtin (name), text, jsonl, tokens or hf (path), "
                               "task (name)")
    name: str | None = Field(None, description="builtin: the corpus; task: the benchmark task (mqar, "
                                               "niah-single@1k)")
    path: str | None = Field(None, description="text, jsonl, tokens: a file, a directory or a glob; hf: a "
                                               "folder saved with datasets' save_to_disk")
    field: str = Field("text", description="jsonl, hf: the key (column) that holds each document's text")
    dtype: Literal["uint16", "uint32"] = Field("uint16", description="tokens: the shards' token type")
    weight: float = Field(1.0, gt=0, description="mixture weight among the training sources")
    fingerprint: str | None = identity_field(
        "ablate.runner.fingerprints:fill_source",
        "filled by ablate when the grid is loaded (a grid file never sets it): the hash of what the source "
        "reads (its files' contents; a built-in corpus: the Python version and the standard library files it "
        "is read from; None for a synthetic stream or a task, which ablate's code makes). A relative path is "
        "made absolute at the same time.")
    loss: Literal["all", "answer"] = Field(
        None,  # type: ignore[arg-type]  # a sentinel: _loss_default resolves it by kind before validation
        description="which tokens of this source's training rows the loss is on: 'all' (every token) or "
                    "'answer' (only the answer tokens of task examples, as zoology trains MQAR: the rest of "
                    "the row is context). Default: 'answer' for a 'task' source, 'all' otherwise; 'answer' "
                    "needs a 'task' source. Held-out perplexity always scores every token.",
    )

    @model_validator(mode="before")
    @classmethod
    def _loss_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("loss") is None:
            data = {**data, "loss": "answer" if data.get("kind") == "task" else "all"}
        return data

    @model_validator(mode="after")
    def _needs(self) -> SourceConfig:
        if self.kind in ("builtin", "task") and not self.name:
            raise ValueError(f"a '{self.kind}' source needs 'name'")
        if self.kind in ("text", "jsonl", "tokens", "hf") and not self.path:
            raise ValueError(f"a '{self.kind}' source needs 'path'")
        if self.loss == "answer" and self.kind != "task":
            raise ValueError(f"loss 'answer' needs a 'task' source (a '{self.kind}' source has no answers); "
                             "use loss 'all'")
        if self.kind == "builtin" and self.name not in BUILTIN_CORPORA:
            raise ValueError(one_of(self.name, BUILTIN_CORPORA, what="built-in corpus"))
        return self


def _default_train() -> list[SourceConfig]:
    return [
        SourceConfig(kind="builtin", name="python-docs", weight=1.0),
        SourceConfig(kind="builtin", name="python-code", weight=1.0),
    ]


def _default_heldout() -> dict[str, SourceConfig]:
    return {
        "prose": SourceConfig(kind="builtin", name="python-docs"),
        "code": SourceConfig(kind="builtin", name="python-code"),
    }


class DataConfig(_Strict):
    """What the model reads: the training mixture, the named held-out sets, the tokenizer and sequence length.

    Built-in sources are split into train and held-out by a stable hash of each file, so a held-out set named
    after a built-in source never overlaps its training split.
    """

    train: list[SourceConfig] = Field(default_factory=_default_train, min_length=1)
    heldout: dict[str, SourceConfig] = Field(default_factory=_default_heldout)
    tokenizer: str = Field("byte",
                           description="'byte', 'bpe' (trained on the training split), or 'hf:<name>'")
    tokenizer_fingerprint: str | None = identity_field(
        "ablate.runner.fingerprints:fill_tokenizer",
        "filled by ablate when the grid is loaded: the hash of an 'hf:' tokenizer's files (a local folder's "
        "path is made absolute); None for 'byte', and for 'bpe', which is what it is trained from "
        "(data.train)")
    bpe_vocab_size: Int = Field(0, ge=0, description="BPE vocabulary; 0 = the model's vocab_size")
    seq_len: Int = Field(256, ge=8)
    row_start: Literal["random", "bos", "document"] = Field(
        "random",
        description="how a training row and a held-out window begin: 'random' (at any position of the "
                    "source), 'bos' (a fixed first token, the tokenizer's eos id, then seq_len tokens from "
                    "any position) or 'document' (at a document start: the eos before it, then the document "
                    "and those after it). A fixed first token is what attention sinks form on (Gu et al. "
                    "2024). Task sources always start at an example ([eos] + prompt + answer).",
    )
    heldout_fraction: float = Field(0.1, gt=0, lt=1, description="share of built-in files held out")
    stream_tokens: Int = Field(
        2_000_000, ge=1, description="tokens taken per split from an endless source (arithmetic, tasks)"
    )


class TrainConfig(_Strict):
    """How the model is trained: AdamW, linear warm-up then cosine decay to ``lr * min_lr_ratio``.

    Weight decay applies to weight matrices only: embeddings (and a head tied to them; unless
    ``decay_embeddings``), norms and biases are not decayed. ``steps`` and every step number count optimizer
    steps; ``batch_size`` is the global batch (split evenly over ``devices``, and on each device into
    micro-batches of ``micro_batch_size`` rows whose gradients are accumulated: the step and its loss are the
    same, only the peak memory changes).
    """

    steps: Int = Field(300, ge=1)
    batch_size: Int = Field(16, ge=1)
    micro_batch_size: Int = Field(
        0, ge=0, description="rows per device per forward/backward; batch_size / (devices x "
                             "micro_batch_size) micro-batches are accumulated into one optimizer step (0 = "
                             "batch_size / devices: none)",
    )
    lr: float = Field(3e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_frac: float = Field(0.05, ge=0, lt=1, description="share of steps spent warming up")
    weight_decay: float = Field(0.1, ge=0)
    decay_embeddings: bool = Field(
        False, description="decay the token embedding (and a head tied to it) too, as AdamW with a single "
                           "parameter group does; otherwise only weight matrices are decayed")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0, description="max gradient norm; 0 = no clipping")
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = Field(
        "auto", description="'auto' = fp32 on CPU, bf16-mixed on GPU"
    )
    compile: bool = False
    checkpoint_every: Int = Field(100, ge=1)
    devices: Int = Field(1, ge=1)
    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "auto", description="'fsdp': parameters, gradients and optimizer state sharded over the devices "
                            "(FSDP2, one unit per decoder block); 'ddp' or 'auto': replicated"
    )
    activation_checkpointing: bool = Field(
        False, description="keep only each decoder block's input for the backward pass and recompute the "
                           "rest (less activation memory, about a third more compute)"
    )
    spike_window: Int = Field(50, ge=2, description="trailing steps a loss spike is measured against")
    spike_sigma: float = Field(6.0, gt=0,
                               description="a spike is a loss above mean + sigma * std of the window")
    diverge_factor: float = Field(2.0, gt=1, description="loss above factor x its best ...")
    diverge_patience: Int = Field(50, ge=1, description="... for this many steps ends the run as diverged")
    diverge_margin: float = Field(0.0, ge=0, description="... and only while at least this many nats above "
                                                         "its best (0: the factor alone; e.g. 0.5 for a loss "
                                                         "that falls near zero)")

    @model_validator(mode="after")
    def _batch_splits(self) -> TrainConfig:
        per_device, rest = divmod(self.batch_size, self.devices)
        if rest:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by devices {self.devices}")
        if self.strategy == "fsdp" and self.precision == "16-mixed":
            raise ValueError("precision '16-mixed' cannot shard (FSDP2 has no fp16 loss scaling here); use "
                             "'bf16-mixed' or '32-true' with strategy 'fsdp'")
        if self.micro_batch_size and per_device % self.micro_batch_size:
            raise ValueError(f"micro_batch_size {self.micro_batch_size} does not divide the per-device batch "
                             f"{per_device} (batch_size {self.batch_size} / devices {self.devices})")
        return self

    @property
    def accumulate(self) -> int:
        """Micro-batches per optimizer step on each device (1 = no gradient accumulation)."""
        return self.batch_size // self.devices // (self.micro_batch_size or self.batch_size // self.devices)


class EvalConfig(_Strict):
    """What is measured after training, on held-out data, with fixed token budgets."""

    heldout_tokens: Int = Field(32768, ge=1, description="tokens scored per held-out set")
    probes: bool = True
    probe_tokens: Int = Field(4096, ge=1, description="held-out tokens the probes look at")
    hist_bins: Int = Field(20, ge=2, description="bins of the gate-score histogram on [0, 1]")
    benchmarks: list[str] = Field(default_factory=list, description="offline benchmark tasks to score")
    bench_multiples: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list,
        description="score benchmarks named without lengths at these multiples of the (last) training length",
    )
    yarn_factor: Annotated[float, Field(gt=1)] | Literal["auto"] | None = Field(
        None,
        description="also score benchmarks with YaRN RoPE scaling over the training length: a fixed factor "
                    "(the paper: 4), or 'auto' = each length / training length; None = no YaRN scoring",
    )
    every: Int = Field(0, ge=0,
                       description="evaluate val PPL every N steps during training (0 = only at the end)")


# What a later training stage may change: anything of how it trains and what it reads, and the model fields
# that no weight depends on (the weights carry over from the stage before).
STAGE_MODEL_FIELDS = ("rope_theta", "rope_yarn_factor", "rope_yarn_original_len", "moe_aux_coef",
                      "moe_z_coef")
STAGE_FIXED_DATA_FIELDS = ("tokenizer", "bpe_vocab_size")


class RunConfig(_Strict):
    """One run: the complete, validated description. ``variant`` names an entry of the catalogue.

    ``stages``: training stages after the first (context extension, paper Table 5). Each is a mapping of
    dotted overrides (``{data.seq_len: 1024, model.rope_theta: 1.0e5, train.steps: 200}``) applied on top of
    the stage before it; the fields above describe stage 0. A stage starts from the previous stage's final
    weights with a fresh optimizer and schedule; evaluation follows the last stage (see ``stage_configs``).
    """

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    variant: str = "baseline"
    variant_revision: int | None = identity_field(
        "ablate.ablations.variants:fill_revision",
        "filled by ablate from the catalogue (a grid file never sets it): the variant's revision when what "
        "it computes has changed since it was added (None while it has not, and for a plugin arm), so a run "
        "trained before the change keeps its own id")
    seed: Int = Field(0, ge=0)
    stages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="later training stages: dotted overrides of train.*, data.*, model.rope_*"
    )

    @model_validator(mode="before")
    @classmethod
    @shorthand
    def _plugin_variant(cls, data: Any) -> Any:
        # variant: {arm: module:Class, args: {...}} is the plugin arm: its label names the run, the model
        # carries it
        if not (isinstance(data, dict) and isinstance(data.get("variant"), dict)):
            return data
        arm = PluginArm.model_validate(data["variant"])
        model = data.get("model", {})
        model = model.model_dump() if isinstance(model, BaseModel) else dict(model)
        return {**data, "variant": arm.label, "model": {**model, "plugin": arm.model_dump(exclude_none=True)}}

    @field_validator("stages", mode="before")
    @classmethod
    def _dotted(cls, v: Any) -> Any:
        # {train: {steps: 5}} and {train.steps: 5} are one stage: keep the dotted spelling (one run id for
        # both)
        if not isinstance(v, list):
            return v
        return [_dotted_stage(stage) if isinstance(stage, dict) else stage for stage in v]

    @model_validator(mode="after")
    def _stages_valid(self) -> RunConfig:
        if self.stages:
            stage_configs(self)
        return self


def _dotted_stage(stage: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in stage.items():
        if isinstance(value, dict) and "." not in str(key) and key in ("model", "data", "train", "eval"):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[str(key)] = value
    return dict(sorted(out.items()))


def _check_stage_path(path: str, where: str) -> None:
    section, _, name = path.partition(".")
    sections: dict[str, type[BaseModel]] = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
    if section not in sections or not name or "." in name:
        hint = did_you_mean(path, [f"{s}.{f}" for s, m in sections.items() for f in m.model_fields])
        raise ValueError(f"{where}: a stage sets 'train.<field>', 'data.<field>' or 'model.<field>', "
                         f"got {path!r}{hint}")
    fields = sections[section].model_fields
    if name not in fields:
        hint = did_you_mean(path, [f"{section}.{f}" for f in fields])
        raise ValueError(f"{where}: unknown key {path!r}{hint}; "
                         f"allowed in {section}: {', '.join(sorted(fields))}")
    if (section == "model" and name not in STAGE_MODEL_FIELDS) or (
            section == "data" and name in STAGE_FIXED_DATA_FIELDS):
        allowed = [f"model.{f}" for f in STAGE_MODEL_FIELDS]
        raise ValueError(f"{where}: {path!r} cannot change between stages (the weights carry over); a stage "
                         "may set train.*, data.* (but "
                         f"{', '.join(f'data.{f}' for f in STAGE_FIXED_DATA_FIELDS)}) and "
                         f"{', '.join(allowed)}")


def stage_configs(config: RunConfig) -> list[RunConfig]:
    """The effective config of each training stage (``stages`` left empty): stage 0 is ``config`` itself,
    stage k is stage k-1 with ``config.stages[k - 1]`` applied. Raises ValueError naming ``stages.<i>.<path>``
    on a bad one.

    >>> cfgs = stage_configs(RunConfig(stages=[{"data.seq_len": 512, "model.rope_theta": 1e5}]))
    >>> [(c.data.seq_len, c.model.rope_theta) for c in cfgs]
    [(256, 10000.0), (512, 100000.0)]
    """
    if not config.stages:  # most runs: one stage, the config itself (no dump, no copy)
        return [config]
    current = config.model_dump(mode="json") | {"stages": []}
    out = [config.model_copy(update={"stages": []})]
    for i, stage in enumerate(config.stages):
        if not isinstance(stage, dict) or not stage:
            raise ValueError(f"stages.{i}: a stage is a non-empty mapping of dotted overrides, got {stage!r}")
        for path, value in stage.items():
            _check_stage_path(path, f"stages.{i}")
            section, name = path.split(".")
            current = {**current, section: {**current[section], name: value}}
        try:
            out.append(type(config).model_validate(current))
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"stages.{i}.{loc}: {msg}, got {err.get('input')!r}") from None
        current = out[-1].model_dump(mode="json")
    return out


def total_steps(config: RunConfig | Mapping[str, Any]) -> int:
    """Optimizer steps of a run over every training stage (a run's progress total), from a RunConfig or its
    dump; a stage keeps the steps of the one before unless it sets its own.

    >>> total_steps(RunConfig(train={"steps": 100}, stages=[{"train.steps": 20}, {"data.seq_len": 512}]))
    140
    """
    if not isinstance(config, RunConfig):
        if not config.get("stages"):  # most runs: read the dump, no validation
            return int((config.get("train") or {}).get("steps", TrainConfig.model_fields["steps"].default))
        config = RunConfig.model_validate(dict(config))
    return sum(c.train.steps for c in stage_configs(config))


BYTE_IDS = 257  # the byte tokenizer: 256 bytes and an end-of-document id
# a vocabulary taken from the tokenizer is padded to this, as litgpt pads (faster matmuls)
VOCAB_MULTIPLE = 64


def padded_vocab(ids: int) -> int:
    """``ids`` rounded up to a multiple of ``VOCAB_MULTIPLE``.

    >>> padded_vocab(1000), padded_vocab(257), padded_vocab(320)
    (1024, 320, 320)
    """
    return -(-ids // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def tokenizer_ids(tokenizer: str, bpe_vocab_size: int) -> int | None:
    """The most ids a tokenizer can have, known from the config alone: ``byte`` 257, ``bpe`` its
    ``bpe_vocab_size``; None when only its files say (``hf:``) or it follows the model's (``bpe`` at 0)."""
    if tokenizer == "byte":
        return BYTE_IDS
    if tokenizer == "bpe" and bpe_vocab_size:
        return bpe_vocab_size
    return None


def vocab_from_tokenizer(raw: Any) -> Any:
    """A run config as a grid gives it (a mapping, before validation), with ``model.vocab_size`` taken from
    the tokenizer (padded: ``padded_vocab``) when the grid leaves it out and its preset's is too small for the
    tokenizer's ids (``bpe_vocab_size: 1000`` on the tiny preset's 320 gives 1024). The value is written into
    the config, so the run records it and its id covers it as if the grid had set it; a config whose model
    held its tokenizer is left as it is, so no id of a run that could train changes (the ones that change
    could not train: the runner refused their vocabulary)."""
    if not isinstance(raw, Mapping):
        return raw
    model, data = raw.get("model", {}), raw.get("data", {})
    if not isinstance(model, Mapping) or not isinstance(data, Mapping) or "vocab_size" in model:
        return raw
    name = model.get("preset", "tiny")
    preset = PRESETS.get(name, {}) if isinstance(name, str) else {}  # else validation says
    bpe = data.get("bpe_vocab_size", 0)
    # else validation says
    ids = tokenizer_ids(data.get("tokenizer", "byte"), bpe) if type(bpe) is int else None
    held = preset.get("vocab_size")
    if ids is None or not isinstance(held, int) or ids <= held:
        return raw
    return {**raw, "model": {**model, "vocab_size": padded_vocab(ids)}}
