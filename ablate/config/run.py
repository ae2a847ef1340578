"""``RunConfig``: the one complete description of a run (model, data, train, eval, variant, seed, stages), and
the effective config of each of its training stages (``stage_configs``). The stages live here because
``RunConfig``'s validator checks each stage's paths against the sections' fields."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ablate.ablations.config import ModelConfig, PluginArm
from ablate.config.fields import Int, Strict, identity_field, shorthand
from ablate.config.sections import DataConfig, EvalConfig, TrainConfig
from ablate.errors import did_you_mean

# What a later training stage may change: anything of how it trains and what it reads, and the model fields
# that no weight depends on (the weights carry over from the stage before).
STAGE_MODEL_FIELDS = ("rope_theta", "rope_yarn_factor", "rope_yarn_original_len", "moe_aux_coef",
                      "moe_z_coef")
STAGE_FIXED_DATA_FIELDS = ("tokenizer", "bpe_vocab_size")


class RunConfig(Strict):
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
    stages: list[dict[str, object]] = Field(
        default_factory=list,
        description="later training stages: dotted overrides of train.*, data.*, model.rope_*"
    )

    @model_validator(mode="before")
    @classmethod
    @shorthand
    def _plugin_variant(cls, data: object) -> object:
        # variant: {arm: module:Class, args: {...}} is the plugin arm: its label names the run, the model
        # carries it
        if not (isinstance(data, dict) and isinstance(variant := data.get("variant"), dict)):
            return data
        arm = PluginArm.model_validate(variant)
        model = data.get("model", {})
        model = model.model_dump() if isinstance(model, BaseModel) else dict(model)
        return {**data, "variant": arm.label, "model": {**model, "plugin": arm.model_dump(exclude_none=True)}}

    @field_validator("stages", mode="before")
    @classmethod
    def _dotted(cls, v: object) -> object:
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


def _dotted_stage(stage: Mapping[object, object]) -> dict[str, object]:
    out: dict[str, object] = {}
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


def total_steps(config: RunConfig | Mapping[str, object]) -> int:
    """Optimizer steps of a run over every training stage (a run's progress total), from a RunConfig or its
    dump; a stage keeps the steps of the one before unless it sets its own.

    >>> total_steps(RunConfig(train={"steps": 100}, stages=[{"train.steps": 20}, {"data.seq_len": 512}]))
    140
    """
    if not isinstance(config, RunConfig):
        if not config.get("stages"):  # most runs: read the dump, no validation
            train = config.get("train") or {}
            steps = train.get("steps") if isinstance(train, Mapping) and "steps" in train else None
            return int(TrainConfig.model_fields["steps"].default if steps is None else steps)
        config = RunConfig.model_validate(dict(config))
    return sum(c.train.steps for c in stage_configs(config))


