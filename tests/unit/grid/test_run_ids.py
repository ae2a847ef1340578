"""Run ids that survive upgrades: a new defaulted field changes no id, a changed default cannot go unnoticed,
and the hashed minimal config always validates back to the run's config."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field, model_validator

from ablate.ablations.presets import PRESETS
from ablate.config import CONFIG_VERSION, DataConfig, RunConfig, SourceConfig, TrainConfig
from ablate.grid import defaults
from ablate.grid.ids import minimal, run_id

# configs that exercise every kind of field: nested models, presets, optional gates, lists and maps of
# sources, stages (free-form values), and numbers spelled several ways
SAMPLES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "lr": {"train": {"lr": 0.004, "steps": 50}, "seed": 3},
    "variant": {"variant": "sdpa-elementwise", "model": {"preset": "tiny-moe"}},
    "preset-small": {"model": {"preset": "small"}},
    "preset-override": {"model": {"preset": "small", "n_layers": 2}},
    "gate": {"model": {"gate": {"position": "G2", "granularity": "headwise"}}},
    "sources": {"data": {"train": [{"kind": "task", "name": "mqar"}, {"kind": "builtin", "name": "arithmetic",
                                                                      "weight": 2}],
                         "heldout": {"a": {"kind": "builtin", "name": "arithmetic"}}, "seq_len": 64}},
    "task-loss-all": {"data": {"train": [{"kind": "task", "name": "mqar", "loss": "all"}]}},
    "stages": {"stages": [{"data.seq_len": 512, "model.rope_theta": 1.0e5, "train.steps": 20}]},
    "eval": {"eval": {"benchmarks": ["mqar"], "yarn_factor": "auto", "every": 10}},
    "plugin": {"variant": {"arm": "myattn:CappedSoftmax", "args": {"cap": 5}}},
}


@pytest.mark.parametrize("name", SAMPLES)
def test_minimal_config_validates_back_to_the_config(name: str) -> None:
    config = RunConfig.model_validate(SAMPLES[name])
    assert RunConfig.model_validate(minimal(config)) == config


@pytest.mark.parametrize("name", SAMPLES)
def test_a_shorthand_validator_passes_a_resolved_config_through(name: str) -> None:
    # so minimal() need not re-validate a whole run once per field (what planning 10,000 runs cost)
    dumped = RunConfig.model_validate(SAMPLES[name]).model_dump(mode="json")
    marked = [v.func for v in RunConfig.__pydantic_decorators__.model_validators.values()
              if getattr(getattr(v.func, "__func__", None), "__ablate_shorthand__", False)]
    assert marked and all(fn(dumped) is dumped for fn in marked)


def test_minimal_keeps_exactly_what_differs_from_what_an_omitted_field_means() -> None:
    assert minimal(RunConfig()) == {}
    # shape from the preset
    assert minimal(RunConfig(model={"preset": "small"})) == {"model": {"preset": "small"}}
    # equal to ModelConfig's declared default, but not to what the preset gives: kept (else it would collide)
    assert minimal(RunConfig(model={"preset": "small", "n_layers": 2})) == {"model": {"preset": "small",
                                                                                     "n_layers": 2}}
    assert minimal(RunConfig(data={"train": [{"kind": "task", "name": "mqar"}]})) == {
        "data": {"train": [{"kind": "task", "name": "mqar"}]}}  # loss 'answer' is what a task source means
    assert run_id(RunConfig(model={"preset": "small",
                                   "n_layers": 2})) != run_id(RunConfig(model={"preset": "small"}))


def test_numbers_compare_by_value_and_spelling_does_not_matter() -> None:
    a = RunConfig.model_validate({"train": {"lr": 0.003, "steps": 300.0}, "model": {"rope_theta": 1e4}})
    b = RunConfig.model_validate({"model": {"rope_theta": 10000}, "train": {"lr": 3e-3}})
    assert run_id(a) == run_id(b) == run_id(RunConfig())
    staged = [{"stages": [{"train.steps": 20.0, "data.seq_len": 512}]},
              {"stages": [{"train": {"steps": 20}, "data.seq_len": 512.0}]}]
    assert run_id(RunConfig.model_validate(staged[0])) == run_id(RunConfig.model_validate(staged[1]))


# -------------------------------------------------------------- a new defaulted field changes no existing id
class _TrainPlus(TrainConfig):
    activation_offload: bool = False  # a new field with a static default
    warmup_steps: int | None = None  # a new field whose default is derived from others when omitted

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("warmup_steps") is None:
            data = {**data, "warmup_steps": int(data.get("steps", 300) * data.get("warmup_frac", 0.05))}
        return data


class _SourcePlus(SourceConfig):
    sink_token: int = Field(-1, description="a new field of a model held in a list and a mapping")


def _train_sources() -> list[_SourcePlus]:
    return [_SourcePlus(kind="builtin", name="python-docs"), _SourcePlus(kind="builtin", name="python-code")]


def _heldout_sources() -> dict[str, _SourcePlus]:
    return {"prose": _SourcePlus(kind="builtin", name="python-docs"),
            "code": _SourcePlus(kind="builtin", name="python-code")}


class _DataPlus(DataConfig):
    train: list[_SourcePlus] = Field(default_factory=_train_sources, min_length=1)
    heldout: dict[str, _SourcePlus] = Field(default_factory=_heldout_sources)
    attention_sink_probe: bool = False


class _RunPlus(RunConfig):
    train: _TrainPlus = Field(default_factory=_TrainPlus)
    data: _DataPlus = Field(default_factory=_DataPlus)
    ladder_rung: int | None = None


@pytest.mark.parametrize("name", SAMPLES)
def test_adding_defaulted_fields_leaves_existing_ids_unchanged(name: str) -> None:
    config = RunConfig.model_validate(SAMPLES[name])
    upgraded = _RunPlus.model_validate(SAMPLES[name])
    assert upgraded.train.activation_offload is False and upgraded.data.train[0].sink_token == -1
    assert run_id(upgraded) == run_id(config)  # type: ignore[arg-type]
    # and setting a new field away from its default is a new run
    changed = _RunPlus.model_validate({**SAMPLES[name], "ladder_rung": 2})
    assert run_id(changed) != run_id(config)  # type: ignore[arg-type]


# -------------------------------------------------------------- a changed default cannot go unnoticed
def test_recorded_defaults_agree_with_the_code() -> None:
    assert defaults.check() == [], "\n".join(defaults.check())


class _TrainLowerLr(TrainConfig):
    lr: float = Field(1e-3, gt=0)


class _RunLowerLr(RunConfig):
    train: _TrainLowerLr = Field(default_factory=_TrainLowerLr)


def test_changing_a_default_without_bumping_config_version_fails_the_check() -> None:
    (problem,) = defaults.check(_RunLowerLr)
    assert problem.startswith("the default of train.lr changed from 0.003 to 0.001 but CONFIG_VERSION is "
                              f"still {CONFIG_VERSION}: bump it")
    # the two configs would share an id (both leave lr out): exactly what config_version must prevent
    assert minimal(_RunLowerLr()) == minimal(RunConfig()) == {}
    # bumped: the check now asks to record the new defaults
    problems = defaults.check(_RunLowerLr, version=CONFIG_VERSION + 1)
    assert f"recorded at CONFIG_VERSION {CONFIG_VERSION}, the code is at {CONFIG_VERSION + 1}" in problems[0]
    assert not any("changed from" in p for p in problems)


def test_changing_a_preset_is_a_changed_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PRESETS, "small", {**PRESETS["small"], "n_layers": 7})
    (problem,) = defaults.check()
    assert problem.startswith("the default of model.preset=small.n_layers changed from 6 to 7")


def test_a_new_field_must_be_recorded_but_is_not_a_change() -> None:
    problems = defaults.check(_RunPlus)
    assert len(problems) == 1 and problems[0].startswith("new config fields or presets not recorded: ")
    for path in ("data.attention_sink_probe", "data.train[].sink_token", "ladder_rung", "train.warmup_steps"):
        assert path in problems[0]
    assert "change no run id" in problems[0] and defaults.RECORD_COMMAND in problems[0]


def test_the_record_round_trips(tmp_path) -> None:  # noqa: ANN001
    path = defaults.write_record(tmp_path / "d.yaml")
    assert defaults.recorded(path) == (CONFIG_VERSION, defaults.defaults())
    assert defaults.check(record=path) == []
