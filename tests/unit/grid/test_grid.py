"""Grid expansion and run ids: golden expansions, id stability and sensitivity, parameter matching."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from ablate.ablations import apply_variant, count_params
from ablate.config import CONFIG_VERSION, RunConfig
from ablate.errors import ConfigError
from ablate.grid import canonical_json, expand, load_grid, parse_grid, run_id
from ablate.grid.identity import strip
from ablate.grid.ids import canonical

GOLDEN = """
name: golden
base:
  model: {preset: tiny}
  train: {steps: 5}
grid:
  variant: [baseline, sdpa-elementwise]
  seed: [0, 1]
zip:
  - {train.batch_size: [8, 16], train.lr: [1.0e-3, 2.0e-3]}
include:
  - {variant: sdpa-headwise, train.lr: 5.0e-3}
  - {variant: baseline, seed: 0, train.batch_size: 8, train.lr: 0.001}   # same run as the first: collapses
  - {variant: baseline, seed: 1, train.batch_size: 16, train.lr: 2e-3}   # excluded by value, kept: included
exclude:
  - {variant: baseline, seed: 1}
  - {variant: sdpa-elementwise, seed: 1, train.lr: 1e-3}  # '1e-3' (a YAML string) matches 0.001
"""


def _rows(runs):
    return [(r.config.variant, r.config.seed, r.config.train.batch_size, r.config.train.lr) for r in runs]


def test_golden_expansion_product_zip_include_exclude():
    runs = expand(parse_grid(GOLDEN))
    assert _rows(runs) == [
        ("baseline", 0, 8, 0.001),
        ("baseline", 0, 16, 0.002),
        ("sdpa-elementwise", 0, 8, 0.001),
        ("sdpa-elementwise", 0, 16, 0.002),
        ("sdpa-elementwise", 1, 16, 0.002),
        ("sdpa-headwise", 0, 16, 0.005),
        ("baseline", 1, 16, 0.002),
    ]
    assert len({r.run_id for r in runs}) == len(runs)
    assert all(r.config.train.steps == 5 and r.config.model.preset == "tiny" for r in runs)
    assert runs[0].axes == {"variant": "baseline", "seed": 0, "train.batch_size": 8, "train.lr": 0.001}
    assert runs[5].axes == {"variant": "sdpa-headwise", "train.lr": 0.005}


def test_expansion_is_deterministic_and_pure():
    grid = parse_grid(GOLDEN)
    first, second = expand(grid), expand(grid)
    assert [r.run_id for r in first] == [r.run_id for r in second]
    assert grid.base == {"model": {"preset": "tiny"}, "train": {"steps": 5}}


def test_empty_grid_is_one_run_of_the_base():
    (run,) = expand(parse_grid("name: one\nbase: {train: {steps: 7}}"))
    assert strip(run.config) == RunConfig(train={"steps": 7})  # with its data's fingerprints filled
    assert run.config.data.train[0].fingerprint is not None
    assert run.axes == {}
    assert (run.params, run.added_params, run.match_residual) == (count_params(run.config.model).total, 0,
                                                                  None)


def test_set_overrides_base_by_dotted_path_with_yaml_values():
    grid = parse_grid("name: s\nbase: {train: {steps: 9, lr: 0.1}}",
                      sets=["train.steps=50", "model.gate.position=G2", "eval.benchmarks=[niah]"])
    (run,) = expand(grid)
    assert run.config.train.steps == 50 and run.config.train.lr == 0.1
    assert run.config.model.gate is not None and run.config.model.gate.position == "G2"
    assert run.config.eval.benchmarks == ["niah"]


@pytest.mark.parametrize(("written", "value"), [
    ("1e-2", 0.01), ("1.0e-2", 0.01), ("1E3", 1000.0), ("1.0e2", 100.0), ("-2.5e-1", -0.25), (".5", 0.5),
    ("0.5e+3", 500.0), ("7", 7), ("010", 10), ("0o17", 15), ("0x1F", 31), ("1_000", "1_000"), ("1e", "1e"),
])
def test_numbers_are_read_as_yaml_1_2_reads_them(written, value):
    # PyYAML alone reads YAML 1.1: 1e-2 and 1.0e2 are strings there, and 010 is 8
    grid = parse_grid(f"name: n\nbase: {{eval: {{benchmarks: [{written}]}}}}\ngrid: {{seed: [0]}}",
                      sets=[f"stages=[{{train.lr: {written}}}]"])
    (read,) = grid.base["eval"]["benchmarks"]
    assert read == value and type(read) is type(value)
    assert grid.base["stages"] == [{"train.lr": value}]


def test_params_and_added_params_come_from_the_meta_device_count():
    runs = expand(parse_grid("name: p\ngrid: {variant: [baseline, sdpa-elementwise, kv-heads-x2]}"))
    base = RunConfig().model
    for r in runs:
        assert r.params == count_params(apply_variant(base, r.config.variant)).total
        assert r.added_params == r.params - count_params(base).total
    # tiny: d_model 64, 4 heads x 16 dims, 2 layers, no bias: 2 x 64 x 64 gate weights
    assert runs[1].added_params == 2 * 64 * 64


# ---------------------------------------------------------------------------------------------------- run ids
def test_run_id_is_12_hex_of_the_sha256_of_the_canonical_json():
    config = RunConfig(train={"steps": 50})
    text = canonical_json(config)
    # defaults are left out (issue 13: ids survive new defaulted fields); the config version is hashed with it
    assert json.loads(text) == {"config_version": CONFIG_VERSION, "config": {"train": {"steps": 50}}}
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert run_id(config) == hashlib.sha256(text.encode()).hexdigest()[:12]
    assert len(run_id(config)) == 12 and int(run_id(config), 16) >= 0


def test_canonical_numbers_compare_by_value():
    assert canonical({"a": 3e-3, "b": 1.0, "c": [2.0, 0.5], "d": True}) == {"a": 0.003, "b": 1, "c": [2, 0.5],
                                                                            "d": True}
    assert json.dumps(canonical(1.0)) == json.dumps(canonical(1))


SPELLINGS = [
    "name: a\nbase: {train: {lr: 0.003, grad_clip: 1, steps: 300}, model: {preset: tiny, rope_theta: 10000}}",
    "name: b\nbase: {model: {rope_theta: 1.0e4, preset: tiny}, train: {grad_clip: 1.0, lr: 3.0e-3}}",
    "name: c\nbase: {model: {rope_theta: 10000.0}, train: {lr: 3e-3, steps: 300.0}}",
    "name: d\nbase: {train.lr: .003, model.rope_theta: 1e4}",
    "name: e\nbase: {}\nseed: ignored\n".replace("seed: ignored\n", ""),
]


@pytest.mark.parametrize("text", SPELLINGS, ids=[s.split("\n")[0] for s in SPELLINGS])
def test_run_id_is_stable_under_reordering_and_number_respelling(text):
    (run,) = expand(parse_grid(text))
    assert run_id(strip(run.config)) == run.stem_id == run_id(RunConfig())


CHANGES = {
    "train.lr": 0.004,
    "train.steps": 301,
    "train.batch_size": 17,
    "train.precision": "bf16-mixed",
    "seed": 1,
    "variant": "sdpa-elementwise",
    "model.preset": "small",
    "model.n_layers": 3,
    "model.gate.position": "G2",
    "model.qk_norm": False,
    "data.seq_len": 128,
    "data.tokenizer": "bpe",
    "data.heldout.prose.name": "arithmetic",
    "eval.probes": False,
    "eval.benchmarks": ["niah"],
}


@pytest.mark.parametrize("path", CHANGES, ids=list(CHANGES))
def test_run_id_changes_with_any_field(path):
    (base,) = expand(parse_grid("name: x"))
    (changed,) = expand(parse_grid("name: x", sets=[f"{path}={json.dumps(CHANGES[path])}"]))
    assert changed.run_id != base.run_id
    assert changed.config != base.config


def test_run_id_does_not_depend_on_the_grid_name_or_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("name: first\ngrid: {seed: [0, 1]}")
    b.write_text("name: second\ninclude: [{seed: 1}, {seed: 0}]")
    assert sorted(r.run_id for r in expand(load_grid(a))) == sorted(r.run_id for r in expand(load_grid(b)))


def test_run_id_is_the_same_in_a_fresh_interpreter():
    code = ("from ablate.config import RunConfig; from ablate.grid import run_id; "
            "print(run_id(RunConfig(seed=3)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == run_id(RunConfig(seed=3))


def test_importing_the_grid_package_does_not_import_torch():
    code = "import sys, ablate.grid, ablate.grid.view; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


# ----------------------------------------------------------------------------------------------------
# match_params
@pytest.mark.parametrize("preset, width", [("tiny", "ffn_dim"), ("tiny-moe", "expert_dim")])
@pytest.mark.parametrize("variant", ["sdpa-elementwise", "v-elementwise", "sdpa-headwise", "sandwich-norm"])
def test_match_params_rewidens_the_ffn_to_the_reference_count(preset, width, variant):
    grid = f"name: m\nbase: {{model: {{preset: {preset}}}}}\ngrid: {{variant: [baseline, {variant}]}}\n"
    plain = expand(parse_grid(grid))
    baseline, matched = expand(parse_grid(grid + "match_params: baseline"))
    target = plain[0].params
    # the reference run is untouched: same config, same id, zero residual
    assert baseline.run_id == plain[0].run_id and baseline.match_residual == 0.0
    # the gated run's FFN is re-widened; its count is the closest one reachable to the target
    effective = apply_variant(matched.config.model, variant)
    assert matched.params == count_params(effective).total
    assert matched.match_residual == pytest.approx((matched.params - target) / target)
    step = count_params(effective.model_copy(update={width: getattr(effective,
                                                                    width) + 1})).total - matched.params
    assert abs(matched.params - target) <= step / 2
    if abs(plain[1].params - target) > step / 2:  # re-widening helps: the config (and so the run) changes
        assert getattr(matched.config.model, width) != getattr(plain[1].config.model, width)
        assert matched.run_id != plain[1].run_id
    else:
        assert matched.run_id == plain[1].run_id
    assert matched.added_params == matched.params - target


def test_match_params_at_paper_scale_is_within_half_an_ffn_unit():
    grid = parse_grid(
        "name: t2\nbase: {model: {preset: paper-dense-1.7b}}\n"
        "grid: {variant: [baseline, sdpa-elementwise, sdpa-headwise]}\nmatch_params: baseline"
    )
    baseline, elementwise, headwise = expand(grid)
    assert elementwise.config.model.ffn_dim < baseline.config.model.ffn_dim == 6144
    unit = 3 * 28 * 2048  # one more FFN width: gate, up and down rows in 28 layers of width 2048
    for run in (elementwise, headwise):
        assert abs(run.params - baseline.params) <= unit / 2
        assert abs(run.match_residual) < 1e-4


def test_match_params_names_a_variant():
    with pytest.raises(ConfigError,
                       match=r"match_params: unknown variant 'basline' \(did you mean 'baseline'\?\)"):
        expand(parse_grid("name: m\nmatch_params: basline"))
