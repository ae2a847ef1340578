"""``model.init_rng``: today's sequential draw kept to the bit, and the per-parameter draw under which arms at
one seed share every weight they have in common, so that two arms that are the same function train the
same."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model
from ablate.ablations.export import export_hf
from ablate.ablations.init_rng import logical_state
from ablate.cli import app
from ablate.config import RunConfig
from ablate.grid.ids import run_id
from ablate.runner import run_one

PER = "per-parameter"


def _preset(name: str) -> str:
    return "tiny-moe" if VARIANTS[name].requires_moe else "tiny"


def _state(preset: str, variant: str = "baseline", *, seed: int = 3, init_rng: str = PER,
           **over) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)  # as the runner does: a sequential init draws from here
    cfg = apply_variant(ModelConfig(preset=preset, init_rng=init_rng, **over), variant)
    return logical_state(build_model(cfg, seed=seed))


def _shared(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in a if k in b and a[k].shape == b[k].shape]


@pytest.mark.parametrize("name", sorted(VARIANTS), ids=sorted(VARIANTS))
def test_every_variant_shares_every_common_weight_with_the_baseline(name: str) -> None:
    base, arm = _state(_preset(name)), _state(_preset(name), name)
    shared = _shared(base, arm)
    assert "embed.weight" in shared and "blocks.1.ffn_norm.weight" in shared
    assert [k for k in shared if not torch.equal(base[k], arm[k])] == []
    # a drawn weight whose shape differs between the arms (more heads, experts) has a stream of its own (a
    # norm's ones of another width are ones still)
    for k in (k for k in arm if k in base and arm[k].shape != base[k].shape and base[k].std() > 0):
        assert not torch.equal(arm[k].flatten()[:8], base[k].flatten()[:8]), k


def test_g1s_fused_projection_holds_the_baselines_query_rows_and_the_unfused_gate_rows() -> None:
    cfg = apply_variant(ModelConfig(preset="tiny", init_rng=PER), "sdpa-elementwise")
    fused = build_model(cfg, seed=5).state_dict()["blocks.0.attn.q_proj.proj.weight"]  # (H*dk + H*dk, d)
    base = build_model(ModelConfig(preset="tiny", init_rng=PER), seed=5).state_dict()
    unfused = build_model(cfg, seed=5, fuse_g1=False).state_dict()
    q_rows = base["blocks.0.attn.q_proj.weight"]
    assert fused.shape == (2 * q_rows.shape[0], q_rows.shape[1])
    assert torch.equal(fused[: q_rows.shape[0]], q_rows)
    assert torch.equal(fused[q_rows.shape[0]:], unfused["blocks.0.attn.gate_sdpa.proj.weight"])
    assert torch.equal(unfused["blocks.0.attn.q_proj.weight"], q_rows)
    assert abs(fused.std().item() - cfg.init_std) < 0.002  # still N(0, init_std)


def test_a_plugin_arm_shares_every_baseline_weight(plugin_dir) -> None:
    arm = {"arm": "myattn:HeadGate", "args": {"position": "G2"}}
    cfg = RunConfig.model_validate({"model": {"preset": "tiny", "init_rng": PER}, "variant": arm}).model
    base = _state("tiny")
    plugged = logical_state(build_model(cfg, seed=3))
    assert set(base) < set(plugged) and "blocks.0.attn.gate_v.proj.weight" in plugged
    assert all(torch.equal(base[k], plugged[k]) for k in base)


def test_a_widened_ffn_and_an_untied_head_draw_their_own_streams() -> None:
    base, wide = _state("tiny"), _state("tiny", ffn_dim=256)
    assert not torch.equal(wide["blocks.0.ffn.up_proj.weight"][:192], base["blocks.0.ffn.up_proj.weight"])
    assert torch.equal(wide["blocks.0.attn.o_proj.weight"], base["blocks.0.attn.o_proj.weight"])
    untied = _state("tiny", tie_embeddings=False)
    assert torch.equal(untied["embed.weight"], base["embed.weight"]) and "lm_head.weight" not in base
    assert not torch.equal(untied["lm_head.weight"], untied["embed.weight"])


def test_seeds_differ_and_one_seed_repeats() -> None:
    a, b = _state("tiny", seed=0), _state("tiny", seed=1)
    assert all(not torch.equal(a[k], b[k]) for k in a if k.endswith("proj.weight"))
    assert all(torch.equal(a[k], v) for k, v in _state("tiny", seed=0).items())
    torch.manual_seed(123)  # the global generator does not enter a per-parameter draw
    cfg = ModelConfig(preset="tiny", init_rng=PER)
    assert torch.equal(build_model(cfg, seed=0).embed.weight, a["embed.weight"])


def test_norms_and_zero_initialised_parameters_keep_their_values() -> None:
    state = _state("tiny", "sdpa-input-independent")
    assert torch.equal(state["blocks.0.attn_norm.weight"], torch.ones(64))
    assert torch.equal(state["blocks.0.attn.gate_sdpa.proj.weight"], torch.zeros(64))
    assert torch.equal(_state("tiny", "sink-learned")["blocks.1.attn.weights.sink"], torch.zeros(4))


# Sequential: today's draw, value for value (these numbers were read before init_rng existed).
@pytest.mark.parametrize(("variant", "embed", "down", "total"), [
    ("baseline", [-0.015814, -0.027805, 0.000848], [0.00183, -0.012939, -0.010702], 370.6701879826876),
    ("sdpa-elementwise", [0.002776, 0.024604, -0.021785], [0.040559, 0.019491, 0.009059], 371.6499743876989),
])
def test_sequential_is_todays_draw(variant: str, embed: list[float], down: list[float], total: float) -> None:
    for over in ({}, {"init_rng": "sequential"}):
        torch.manual_seed(0)
        model = build_model(apply_variant(ModelConfig(preset="tiny", **over), variant))
        state = model.state_dict()
        assert state["embed.weight"][0, :3].tolist() == pytest.approx(embed, abs=1e-6)
        assert state["blocks.1.ffn.down_proj.weight"][0, :3].tolist() == pytest.approx(down, abs=1e-6)
        assert sum(p.double().sum().item() for p in model.parameters()) == pytest.approx(total, rel=1e-12)


def test_the_field_at_its_default_changes_no_run_id_and_per_parameter_is_a_new_run() -> None:
    cfg = {"model": {"preset": "tiny"}, "variant": "sdpa-elementwise", "seed": 4, "train": {"lr": 3e-3}}
    before = run_id(RunConfig.model_validate(cfg))
    assert run_id(RunConfig.model_validate({**cfg, "model": {"preset": "tiny", "init_rng": "sequential"}})) \
        == before
    assert run_id(RunConfig.model_validate({**cfg, "model": {"preset": "tiny", "init_rng": PER}})) != before


def test_the_lite_studys_run_ids_are_unchanged(tmp_path) -> None:
    """Ids read from `ablate plan lite` before init_rng existed (its data is synthetic: the
    ids are the same on every machine)."""
    out = CliRunner().invoke(app, ["plan", "lite", "--format", "json", "--home",
                                   str(tmp_path)])
    assert out.exit_code == 0, out.output
    ids = [(r["variant"], r["seed"], r["run_id"]) for r in json.loads(out.output)["runs"]]
    assert ids[:4] == [("baseline", 0, "43948ec0b16b"), ("baseline", 1, "8382b578f289"),
                       ("baseline", 2, "0647a0d3170a"), ("baseline", 0, "c08a80362ba1")]


def test_an_unknown_init_rng_is_one_line_and_exit_2(tmp_path) -> None:
    out = CliRunner().invoke(app, ["plan", "quickstart", "--set", "model.init_rng=shuffled",
                                   "--home", str(tmp_path)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert out.output.startswith("error: ") and out.output.count("\n") == 1
    assert out.output.strip().endswith("quickstart.yaml: --set: model.init_rng: Input should be "
                                       "'sequential' or 'per-parameter', got 'shuffled'")


def test_a_per_parameter_g1_model_exports_to_qwen3_next_with_equal_logits(tmp_path, monkeypatch) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = apply_variant(ModelConfig(preset="tiny", init_rng=PER), "sdpa-elementwise")
    model = build_model(cfg, seed=2)
    export_hf(model, cfg, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx).logits).abs().max().item() < 1e-5
    assert type(hf).__name__ == "Qwen3NextForCausalLM"


# ------------------------------------------------------------ two arms that are the same function train alike
# An arm that holds a projection it never uses: the same function as the baseline. Sequential shifts every
# draw after the unused projection; per-parameter leaves the baseline's weights where they were.
SAME = '''
import torch
from pydantic import BaseModel, ConfigDict
from torch import nn


class Unused(nn.Module):
    slot = "gate"
    position = "G1"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def __init__(self, args, cfg):
        super().__init__()
        self.spare = nn.Linear(cfg.d_model, cfg.d_model, bias=False)  # never called

    def forward(self, y, x):
        return y, None
'''


def _config(variant, init_rng: str) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": "tiny", "init_rng": init_rng}, "variant": variant, "seed": 7,
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}}, "seq_len": 32,
                 "stream_tokens": 20_000},
        "train": {"steps": 8, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 8},
        "eval": {"heldout_tokens": 128, "probes": False},
    })


def _losses(tmp_path, name: str, variant, init_rng: str) -> list[float]:
    return run_one(_config(variant, init_rng), tmp_path / name, run_id=name).metrics["loss"]


@pytest.mark.usefixtures("module_cache")
def test_two_arms_that_are_the_same_function_give_the_same_runs(tmp_path, plugin_dir) -> None:
    (plugin_dir / "sameness.py").write_text(SAME)
    arm = {"arm": "sameness:Unused"}
    per = [_losses(tmp_path, f"per-{i}", v, PER) for i, v in enumerate(("baseline", arm))]
    assert len(per[0]) == 8 and per[0] == per[1]  # exactly
    seq = [_losses(tmp_path, f"seq-{i}", v, "sequential") for i, v in enumerate(("baseline", arm))]
    assert seq[0][0] != seq[1][0]


# Read from main before a plugin arm's modules kept their own init (issue 41): the catalogue's arms keep their
# run ids and train to the same losses, under both draws (the fused G1 projection under sequential).
@pytest.mark.usefixtures("module_cache")
@pytest.mark.parametrize(("variant", "init_rng", "rid", "losses"), [
    ("baseline", "sequential", "48e5a7422c1d",
     [5.714118003845215, 4.887898921966553, 3.945436716079712, 3.4182560443878174, 3.148477554321289,
      2.9809048175811768, 2.907573938369751, 2.852123498916626]),
    ("sdpa-elementwise", "sequential", "fa40a4d662cd",
     [5.769364833831787, 5.08346700668335, 4.0248613357543945, 3.490633487701416, 3.1732900142669678,
      3.016918659210205, 2.934473991394043, 2.866964101791382]),
    ("sdpa-headwise", PER, "0bbad006eb09",
     [5.785185813903809, 4.942110538482666, 4.085546016693115, 3.4847545623779297, 3.164402484893799,
      3.016289710998535, 2.934950351715088, 2.864814043045044]),
])
def test_the_catalogues_arms_keep_their_run_ids_and_losses(tmp_path, variant: str, init_rng: str, rid: str,
                                                           losses: list[float]) -> None:
    assert run_id(_config(variant, init_rng)) == rid
    assert _losses(tmp_path, variant, variant, init_rng) == pytest.approx(losses, rel=1e-5)
