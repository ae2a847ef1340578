"""Plugin arms from the user's code (examples/plugin): explicit loading, typed arguments, identity, and a grid
with one trained, probed and stored through ``ablate run``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.ablations import ModelConfig, count_params
from ablate.ablations.config import PluginArm
from ablate.cli import app

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugin"
ARM = {"arm": "myattn:CappedSoftmax", "args": {"cap": 5}}


def grid_file(tmp_path: Path, *, plugins: str = "[myattn]", arm: str = json.dumps(ARM),
              steps: int = 10) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(f"""
name: plug
plugins: {plugins}
base:
  model: {{preset: tiny}}
  data: {{seq_len: 32, stream_tokens: 20000, train: [{{kind: builtin, name: arithmetic}}],
          heldout: {{arith: {{kind: builtin, name: arithmetic}}}}}}
  train: {{steps: {steps}, batch_size: 4, checkpoint_every: 10}}
  eval: {{heldout_tokens: 256, probe_tokens: 128}}
grid:
  variant: [baseline, {arm}]
""")
    return path


def plan(path: Path, home: Path):
    return CliRunner().invoke(app, ["plan", str(path), "--format", "json", "--home", str(home)])


@pytest.mark.parametrize(("plugins", "arm", "message"), [
    ("[]", json.dumps(ARM), r"plugin arm 'myattn:CappedSoftmax' is from module 'myattn', which the grid does "
                            r"not list: add `plugins: \[myattn\]`"),
    ("[nothere]", '{arm: "nothere:X"}', r"cannot import plugin module 'nothere': ModuleNotFoundError: No "
                                        r"module named 'nothere' \(looked on PYTHONPATH and beside the grid "
                                        r"file \(/.*\): put the module beside the grid file, or add its "
                                        r"folder to PYTHONPATH\)"),
    ("[myattn]", '{arm: "myattn:Missing"}', r"plugin module 'myattn' has no 'Missing'; its arms: "
                                            r"CappedSoftmax, HeadGate, LayerScale$"),
    ("[myattn]", '{arm: "myattn:CapedSoftmax"}',
     r"plugin module 'myattn' has no 'CapedSoftmax' \(did you mean 'CappedSoftmax'\?\); its arms: "
     r"CappedSoftmax, HeadGate"),
    ("[myattn]", '{arm: "myatn:CappedSoftmax"}',
     r"is from module 'myatn' \(did you mean 'myattn'\?\), which the grid does not list"),
    # the typo is the listed name, beside a folder myattn/: name the arm's module, not the typo back
    ("[myatn]", '{arm: "myattn:CappedSoftmax"}',
     r"plugins: the grid lists `plugins: \[myatn\]`, but no module 'myatn' is beside the grid or on the "
     r"import path; plugin arm 'myattn:CappedSoftmax' is from module 'myattn': did you mean "
     r"`plugins: \[myattn\]`\?"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: -1}}',
     r"model.plugin.args.cap: myattn:CappedSoftmax: Input should be greater than 0 \(got -1\)"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: 5, width: 2}}',
     r"model.plugin.args.width: .*Extra inputs"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: 5}, version: "1"}',
     r"model.plugin.version is filled by"),
])
def test_a_bad_plugin_arm_is_one_line_and_exit_2(plugin_dir, tmp_path, plugins, arm, message) -> None:
    result = plan(grid_file(tmp_path, plugins=plugins, arm=arm), tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert re.search(message, result.output), result.output


def test_an_unlisted_module_is_never_imported(plugin_dir, tmp_path) -> None:
    import sys

    (plugin_dir / "boom.py").write_text("raise SystemExit('imported!')\n")
    result = plan(grid_file(tmp_path, plugins="[]", arm='{arm: "boom:X"}'), tmp_path / "home")
    assert result.exit_code == 2 and "which the grid does not list" in result.output, result.output
    assert "boom" not in sys.modules


def test_the_arms_version_is_its_source_hash_and_in_the_run_id(plugin_dir, tmp_path) -> None:
    from ablate.ablations.plugins import version_of

    first = version_of("myattn")
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 16
    result = plan(grid_file(tmp_path), tmp_path / "home")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["imports"] == ["myattn"]
    runs = {r["variant"]: r for r in out["runs"]}
    plugged = runs["myattn:CappedSoftmax(cap=5)"]
    # the version names the init too: runs from when plugins were redrawn by the decoder's init keep their ids
    assert plugged["config"]["model"]["plugin"] == {**ARM, "version": f"{first};init=own"}
    assert plugged["added_params"] == 2 * 4  # a temperature per query head, in each of the 2 layers
    assert plugged["params"] == runs["baseline"]["params"] + 8
    with (plugin_dir / "myattn" / "__init__.py").open("a") as f:
        f.write("\n# an edit\n")
    assert version_of("myattn") != first
    again = {r["variant"]: r for r in json.loads(plan(grid_file(tmp_path), tmp_path / "home").output)["runs"]}
    assert again["myattn:CappedSoftmax(cap=5)"]["run_id"] != plugged["run_id"]
    assert again["baseline"]["run_id"] == runs["baseline"]["run_id"]


def test_a_plugin_arm_counts_its_parameters_fresh(plugin_dir) -> None:
    cfg = ModelConfig(preset="tiny", plugin=PluginArm(**ARM))
    assert count_params(cfg).total == count_params(ModelConfig(preset="tiny")).total + 8


@pytest.mark.slow
def test_a_plugin_grid_trains_is_probed_stored_and_goes_stale(plugin_dir, tmp_path, module_cache) -> None:
    from ablate.store import Store

    path, home = grid_file(tmp_path), tmp_path / "home"
    result = CliRunner().invoke(app, ["run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow"])
    assert result.exit_code == 0, result.output
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="plug").set_index("run_id")
        probes = store.probes(run_ids=list(runs.index))
    assert set(runs["status"]) == {"done"} and len(runs) == 2
    by_variant = runs.reset_index().set_index("variant")
    plugged = by_variant.loc["myattn:CappedSoftmax(cap=5)"]
    assert plugged["added_params"] == 8
    assert plugged["params"] == by_variant.loc["baseline", "params"] + 8
    mine = probes[probes["run_id"] == plugged["run_id"]].set_index(["name", "layer"])["value"]
    f_attn = [mine[("f_attn", layer)] for layer in range(2)]
    assert all(0 < f <= 1 for f in f_attn)  # from the plugin's own probe-path weights
    assert plugged["f_attn"] == pytest.approx(sum(f_attn) / 2) and mine[("m_act", 1)] > 0
    # the plugin's code changes: its run is stale, the baseline still done
    with (plugin_dir / "myattn" / "__init__.py").open("a") as f:
        f.write("\n# an edit\n")
    out = CliRunner().invoke(app, ["plan", str(path), "--home", str(home)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "stale" in out.output and "model.plugin.version" in out.output, out.output
    assert "done" in out.output


def test_export_refuses_a_plugin_arm_in_one_line(plugin_dir) -> None:
    from ablate.ablations.export import hf_target, hf_unsupported
    from ablate.errors import ConfigError

    cfg = ModelConfig(preset="tiny", plugin=PluginArm(**ARM))
    with pytest.raises(ConfigError,
                       match=r"^model.plugin: cannot export plugin=.* a plugin arm is the user's code"):
        hf_target(cfg)
    assert list(hf_unsupported(cfg)) == ["plugin"]


def test_an_entry_point_arm_is_listed_and_usable_without_plugins(plugin_dir, tmp_path, monkeypatch) -> None:
    from ablate.ablations import plugins

    # as a package would
    monkeypatch.setattr(plugins, "registered", lambda: {"capped": "myattn:CappedSoftmax"})
    rows = json.loads(CliRunner().invoke(app, ["variants", "--format", "json"]).output)
    assert rows[-1]["name"] == "capped" and rows[-1]["source"] == "plugin: myattn:CappedSoftmax"
    result = plan(grid_file(tmp_path, plugins="[]", arm='{arm: capped, args: {cap: 2}}'), tmp_path / "home")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["imports"] == ["myattn"]
    assert [r["variant"] for r in out["runs"]] == ["baseline", "capped(cap=2)"]


def _beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int = 10) -> Path:
    """A grid file with the example's module beside it, neither on the import path, from another folder."""
    import shutil
    import sys

    folder = tmp_path / "study"
    shutil.copytree(EXAMPLE / "myattn", folder / "myattn")
    path = grid_file(folder, steps=steps)
    monkeypatch.delitem(sys.modules, "myattn", raising=False)
    monkeypatch.chdir(tmp_path)
    assert not any(Path(p, "myattn").exists() for p in sys.path if p)
    return path


def test_a_plugin_module_beside_its_grid_file_is_found(tmp_path, monkeypatch) -> None:
    out = plan(_beside(tmp_path, monkeypatch), tmp_path / "home")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["imports"] == ["myattn"]
    import myattn  # found where the grid is: at the end of the import path

    assert Path(myattn.__file__).parent == tmp_path / "study" / "myattn"


@pytest.mark.slow
def test_a_plugin_module_beside_its_grid_file_trains_in_the_workers(tmp_path, monkeypatch,
                                                                    module_cache) -> None:
    path = _beside(tmp_path, monkeypatch, steps=2)
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["run", str(path), "--home", str(home), "--no-mlflow"])
    assert out.exit_code == 0, out.output
    from ablate.store import Store

    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="plug")
    assert sorted(runs["status"]) == ["done", "done"]
    assert "myattn:CappedSoftmax(cap=5)" in set(runs["variant"])
    plugged = runs.loc[runs["variant"] == "myattn:CappedSoftmax(cap=5)", "run_id"].item()

    # probed later, with no grid file at hand (another shell, another folder): its module is found where it
    # was when the run trained (the checkpoint says), as long as its code is the code it trained with
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ABLATE_PLUGIN_PATH"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def probe() -> subprocess.CompletedProcess:
        ablate = str(Path(sys.executable).parent / "ablate")
        return subprocess.run([ablate, "probe", "--grid", "plug", "--home", str(home), "--format", "json"],
                              env=env, cwd=elsewhere, capture_output=True, text=True, timeout=600)

    out = probe()
    assert out.returncode == 0, out.stderr
    assert {r["run_id"]: r["error"] for r in json.loads(out.stdout)} == dict.fromkeys(runs["run_id"])
    source = tmp_path / "study" / "myattn" / "__init__.py"
    source.write_text(source.read_text() + "\n# edited after the run trained\n")
    out = probe()
    assert out.returncode == 1
    assert re.search(rf"{plugged}: failed: .*: the plugin arm 'myattn:CappedSoftmax' has other code than it "
                     r"trained with \(model.plugin.version sha256:\w+;init=own then, sha256:\w+;init=own "
                     r"now\): restore that code, or train the run again", out.stderr), out.stderr


BAD_INIT = """
import torch
from pydantic import BaseModel
from torch import nn


class ItemScale(nn.Module):
    slot = "attn_out"

    class Args(BaseModel):
        pass

    def __init__(self, args, cfg):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(cfg.d_model))
        self.start = float(self.scale.mean().item())  # reads a value: not on the meta device

    def forward(self, a, x):
        return a * self.scale, None


class Broken(ItemScale):
    def __init__(self, args, cfg):
        raise KeyError("oops")
"""


@pytest.mark.parametrize(("arm", "message"), [
    ("badinit:ItemScale", r"plugin arm 'badinit:ItemScale' cannot be built on the meta device, where "
                          r"ablate counts a model's parameters without allocating them \(RuntimeError: "
                          r".*meta.*\): its __init__ must not read a tensor's values "
                          r"\(.item\(\), .tolist\(\),"),
    ("badinit:Broken", r"plugin arm 'badinit:Broken' failed while the model was built to count its "
                       r"parameters \(KeyError: 'oops'\)"),
])
def test_a_plugin_that_cannot_be_built_on_the_meta_device_is_one_line_naming_it(tmp_path, monkeypatch, arm,
                                                                                 message) -> None:
    import sys

    (tmp_path / "badinit.py").write_text(BAD_INIT)
    monkeypatch.delitem(sys.modules, "badinit", raising=False)
    result = plan(grid_file(tmp_path, plugins="[badinit]", arm=f'{{arm: "{arm}"}}'), tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert re.search(message, result.output), result.output


def test_the_example_grid_plans_with_the_example_on_the_path(plugin_dir, tmp_path) -> None:
    out = json.loads(plan(EXAMPLE / "grid.yaml", tmp_path / "home").output)
    assert out["imports"] == ["myattn"]
    assert [r["variant"] for r in out["runs"]] == ["baseline", "myattn:CappedSoftmax(cap=5)",
                                                   "myattn:HeadGate(position=G2)",
                                                   "myattn:LayerScale(init=0.5)"]


# ------------------------------------------------------------------------- gate slots and the block's
# attention output
GATES = {"G1": "gate_sdpa", "G2": "gate_v", "G3": "gate_k", "G4": "gate_q", "G5": "gate_out"}
# the tiny preset's query heads, kv heads, one flat "head"
HEADS = {"G1": 4, "G2": 2, "G3": 2, "G4": 4, "G5": 1}


def gate_arm(position: str) -> PluginArm:
    return PluginArm(arm="myattn:HeadGate", args={"position": position})


@pytest.mark.parametrize("position", GATES)
def test_a_plugin_gate_fills_its_position_and_reports_its_scores(plugin_dir, position) -> None:
    """The plugin's module sits in the gate slot the grid chose, every other slot as without it; its zeroed
    projection scores sigmoid(0) = 1/2 everywhere, which the probe reports as the gate score."""
    import torch

    from ablate.ablations import build_model
    from ablate.ablations.gates import NoGate
    from ablate.runner.evaluate import probe

    cfg = ModelConfig(preset="tiny", plugin=gate_arm(position))
    assert (
        count_params(cfg).total == count_params(ModelConfig(preset="tiny")).total + 2 * HEADS[position] * 64
    )
    model = build_model(cfg)
    for block in model.blocks:
        assert type(getattr(block.attn, GATES[position])).__name__ == "HeadGate"
        assert all(isinstance(getattr(block.attn, g), NoGate) for p, g in GATES.items() if p != position)
        assert isinstance(block.attn_out, NoGate)
        torch.nn.init.zeros_(getattr(block.attn, GATES[position]).proj.weight)
    idx = torch.randint(0, 256, (2, 16))
    model(idx).logits.sum().backward()  # trains: the gate's projection gets a gradient
    assert getattr(model.blocks[0].attn, GATES[position]).proj.weight.grad.abs().sum() > 0
    p = probe(model, torch.randint(0, 256, (3, 17)).numpy(), hist_bins=10, device=torch.device("cpu"))
    assert p.layers["gate_score"] == [0.5, 0.5] and p.summary()["gate_score"] == 0.5


def test_the_block_output_slot_scales_the_attention_before_the_residual(plugin_dir) -> None:
    """LayerScale at 1 is the baseline exactly (same init: it draws nothing), at 0 the attention adds
    nothing."""
    import torch

    from ablate.ablations import build_model

    idx = torch.randint(0, 256, (2, 16))

    def logits(plugin: PluginArm | None, *, no_attention: bool = False) -> torch.Tensor:
        torch.manual_seed(0)
        model = build_model(ModelConfig(preset="tiny", plugin=plugin))
        if no_attention:
            for block in model.blocks:
                torch.nn.init.zeros_(block.attn.o_proj.weight)
        return model(idx).logits

    scale = {"arm": "myattn:LayerScale"}
    assert torch.equal(logits(PluginArm(**scale, args={"init": 1.0})), logits(None))
    assert torch.equal(logits(PluginArm(**scale, args={"init": 0.0})), logits(None, no_attention=True))
    cfg = ModelConfig(preset="tiny", plugin=PluginArm(**scale))
    assert count_params(cfg).total == count_params(ModelConfig(preset="tiny")).total + 2 * 64
    assert type(build_model(cfg).blocks[1].attn_out).__name__ == "LayerScale"


def test_an_output_plugins_scores_are_the_layers_gate_statistics(plugin_dir) -> None:
    """A plugin in the block's output slot that returns scores (sigmoid(0) = 1/2 from a zeroed projection):
    the probe reports them as the gate score, as a gate's."""
    import torch

    from ablate.ablations import build_model
    from ablate.runner.evaluate import probe

    (plugin_dir / "outgate.py").write_text(
        "import torch\nfrom pydantic import BaseModel\nfrom torch import nn\n\n\nclass Gate(nn.Module):\n"
        "    slot = 'attn_out'\n\n    class Args(BaseModel):\n        pass\n\n"
        "    def __init__(self, args, cfg):\n        super().__init__()\n"
        "        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)\n\n"
        "    def forward(self, a, x):\n        s = torch.sigmoid(self.proj(x))\n        return a * s, s\n")
    cfg = ModelConfig(preset="tiny", plugin=PluginArm(arm="outgate:Gate"))
    assert count_params(cfg).total == count_params(ModelConfig(preset="tiny")).total + 2 * 64 * 64
    model = build_model(cfg)
    for block in model.blocks:
        torch.nn.init.zeros_(block.attn_out.proj.weight)
    p = probe(model, torch.randint(0, 256, (3, 17)).numpy(), hist_bins=10, device=torch.device("cpu"))
    # all in bin [0.5, 0.6)
    assert p.layers["gate_score"] == [0.5, 0.5] and p.histograms["gate_score"][0][5] == 1.0


def test_match_params_rewidens_the_ffn_around_a_plugin_gate(plugin_dir, tmp_path) -> None:
    path = grid_file(tmp_path, arm='{arm: "myattn:HeadGate", args: {position: G3}}')
    path.write_text(path.read_text() + "match_params: baseline\n")
    result = plan(path, tmp_path / "home")
    assert result.exit_code == 0, result.output
    runs = {r["variant"]: r for r in json.loads(result.output)["runs"]}
    gated, base = runs["myattn:HeadGate(position=G3)"], runs["baseline"]
    # +256 gate parameters; one FFN unit is 3 x 64 x 2 layers = 384: 192 -> 191 leaves 128 under the baseline
    assert gated["config"]["model"]["ffn_dim"] == 191 and gated["params"] == base["params"] - 128


@pytest.mark.parametrize(("base", "arm", "message"), [
    ("{preset: tiny, gate: {position: G3}}", '{arm: "myattn:HeadGate", args: {position: G3}}',
     r"plugin arm 'myattn:HeadGate' is a gate at G3, where model.gate already sits"),
    ("{preset: tiny}", '{arm: "nopos:Gate"}',
     r"plugin arm 'nopos:Gate' fills slot 'gate' and must say where: position = one of \['G1', 'G2', 'G3', "
     r"'G4', 'G5'\] \(has None\)"),
])
def test_a_gate_plugin_without_a_free_position_is_one_line_and_exit_2(plugin_dir, tmp_path, base, arm,
                                                                      message):
    (plugin_dir / "nopos.py").write_text(
        "from pydantic import BaseModel\nfrom torch import nn\n\n\nclass Gate(nn.Module):\n    slot = "
        "'gate'\n\n    class Args(BaseModel):\n        pass\n")
    path = grid_file(tmp_path, plugins="[myattn, nopos]", arm=arm)
    path.write_text(path.read_text().replace("model: {preset: tiny}", f"model: {base}"))
    result = plan(path, tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert re.search(message, result.output), result.output


@pytest.mark.slow
def test_a_gate_plugin_and_an_output_plugin_train_are_probed_and_stored(plugin_dir, tmp_path,
                                                                        module_cache) -> None:
    import pandas as pd

    from ablate.store import Store

    arms = '{arm: "myattn:HeadGate", args: {position: G3}}, {arm: "myattn:LayerScale", args: {init: 0.5}}'
    path, home = grid_file(tmp_path, arm=arms), tmp_path / "home"
    result = CliRunner().invoke(app, ["run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow"])
    assert result.exit_code == 0, result.output
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="plug")
        probes = store.probes(run_ids=list(runs["run_id"]))
    assert set(runs["status"]) == {"done"} and len(runs) == 3
    by_variant = runs.set_index("variant")
    gated, scaled = (
        by_variant.loc["myattn:HeadGate(position=G3)"],
        by_variant.loc["myattn:LayerScale(init=0.5)"],
    )
    assert (gated["added_params"], scaled["added_params"]) == (2 * 2 * 64, 2 * 64)
    mine = probes[probes["run_id"] == gated["run_id"]].set_index(["name", "layer"])["value"]
    scores = [mine[("gate_score", layer)] for layer in range(2)]
    assert all(0 < g < 1 for g in scores) and gated["gate_score"] == pytest.approx(sum(scores) / 2)
    assert pd.isna(scaled["gate_score"])  # no scores: null
    assert gated["massive_ratio"] > 1 and 0 <= scaled["massive_first"] <= 1


# --------------------------------------------------------------------------- a plugin's own init is kept
# The example (#41): a headwise G1 gate whose __init__ starts it at sigmoid(bias_init), weight zero.
# Before, the decoder's init redrew its weight and zeroed its bias: bias_init 0 and 3 trained alike.
BIASED = '''
import torch
from pydantic import BaseModel, ConfigDict
from torch import nn


class Gate(nn.Module):
    slot = "gate"
    position = "G1"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        bias_init: float = 0.0

    def __init__(self, args, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.n_heads)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.fill_(args.bias_init)

    def forward(self, y, x):
        s = torch.sigmoid(self.proj(x))  # (B, T, q)
        return y * s.unsqueeze(-1).to(y.dtype), s
'''
BLOCKS = ("blocks.0.attn.gate_sdpa", "blocks.1.attn.gate_sdpa")


def biased(plugin_dir: Path, bias_init: float, *, declared: str = "") -> PluginArm:
    (plugin_dir / "biased.py").write_text(BIASED + (f"\n\nGate.init = {declared!r}\n" if declared else ""))
    __import__("sys").modules.pop("biased", None)
    return PluginArm(arm="biased:Gate", args={"bias_init": bias_init})


@pytest.mark.parametrize("init_rng", ["sequential", "per-parameter"])
def test_a_plugins_own_init_is_kept(plugin_dir, init_rng) -> None:
    import torch

    from ablate.ablations import build_model

    for bias_init in (0.0, 3.0):
        torch.manual_seed(0)
        cfg = ModelConfig(preset="tiny", init_rng=init_rng, plugin=biased(plugin_dir, bias_init))
        model = build_model(cfg, seed=0)
        assert model.plugin_init == {name: "own" for name in BLOCKS}
        for name in BLOCKS:
            proj = model.get_submodule(name).proj
            assert torch.equal(proj.weight, torch.zeros(4, 64))
            assert torch.equal(proj.bias, torch.full((4,), bias_init))
        assert model.blocks[0].attn.o_proj.weight.std().item() == pytest.approx(0.02, rel=0.1)  # still drawn


def test_a_plugin_that_asks_for_ablates_init_gets_it(plugin_dir) -> None:
    import torch

    from ablate.ablations import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(preset="tiny", plugin=biased(plugin_dir, 3.0, declared="ablate")))
    assert model.plugin_init == {name: "ablate" for name in BLOCKS}
    proj = model.blocks[0].attn.gate_sdpa.proj
    assert proj.weight.std().item() == pytest.approx(0.02, rel=0.2) and torch.equal(proj.bias, torch.zeros(4))


def test_an_unknown_init_declaration_is_one_line_and_exit_2(plugin_dir, tmp_path) -> None:
    biased(plugin_dir, 0.0, declared="kaiming")
    path = grid_file(tmp_path, plugins="[biased]", arm='{arm: "biased:Gate"}')
    result = plan(path, tmp_path / "home")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert re.search(r"plugin arm 'biased:Gate' declares init = 'kaiming': one of \['own', 'ablate'\]",
                     result.output), result.output


def test_declaring_an_init_changes_the_run_id_through_the_version(plugin_dir, tmp_path) -> None:
    """``init`` is a line of the plugin's source, which its ``version`` hashes: no field of its own."""
    ids = []
    for declared in ("", "ablate"):
        biased(plugin_dir, 0.0, declared=declared)
        out = plan(grid_file(tmp_path, plugins="[biased]", arm='{arm: "biased:Gate"}'), tmp_path / "home")
        assert out.exit_code == 0, out.output
        ids.append({r["variant"]: r["run_id"] for r in json.loads(out.output)["runs"]})
    assert ids[0]["biased:Gate"] != ids[1]["biased:Gate"] and ids[0]["baseline"] == ids[1]["baseline"]


def test_a_plugin_with_ablates_init_shares_the_catalogues_draws_where_shapes_match(plugin_dir) -> None:
    """Per-parameter: every baseline weight as the baseline's, and the example's G1 HeadGate (init =
    "ablate", a (heads, d) projection at gate_sdpa.proj) as the catalogue's sdpa-headwise gate rows."""
    import torch

    from ablate.ablations import apply_variant, build_model
    from ablate.ablations.init_rng import logical_state

    def state(cfg: ModelConfig) -> dict[str, torch.Tensor]:
        torch.manual_seed(3)
        return logical_state(build_model(cfg, seed=3))

    per = ModelConfig(preset="tiny", init_rng="per-parameter")
    base, catalogue = state(per), state(apply_variant(per, "sdpa-headwise"))
    plugged = state(per.model_copy(update={"plugin": gate_arm("G1")}))
    assert [k for k in base if not torch.equal(base[k], plugged[k])] == []
    for name in BLOCKS:
        key = f"{name}.proj.weight"
        assert plugged[key].shape == (4, 64) and torch.equal(plugged[key], catalogue[key])


def _train(tmp_path: Path, name: str, plugin: PluginArm, seen: dict[str, list]) -> list[float | None]:
    """Three steps on the tiny preset; ``seen[name]``: the plugin's gate weights as the first step starts."""
    import lightning as L
    import torch

    from ablate.config import RunConfig
    from ablate.runner import run_one

    class FirstStep(L.Callback):
        def on_train_batch_start(self, trainer, lit, batch, batch_idx) -> None:
            if batch_idx == 0:
                gates = [lit.model.get_submodule(b) for b in BLOCKS]
                seen[name] = [torch.cat([p.detach().flatten() for p in g.parameters()]) for g in gates]

    cfg = RunConfig.model_validate({
        "model": {"preset": "tiny", "plugin": plugin.model_dump()}, "variant": plugin.label, "seed": 7,
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}}, "seq_len": 32,
                 "stream_tokens": 20_000},
        "train": {"steps": 3, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 3},
        "eval": {"heldout_tokens": 128, "probes": False},
    })
    result = run_one(cfg, tmp_path / name, run_id=name, callbacks=[FirstStep()])
    assert result.provenance["plugin_init"] == {b: "own" for b in BLOCKS}
    return result.metrics["loss"]


@pytest.mark.usefixtures("module_cache")
def test_two_gates_that_start_apart_train_apart(plugin_dir, tmp_path) -> None:
    """The issue's two arms: bias_init 0 and 3 start from their own weights (zero, and the bias) and train
    to different losses (before, to the same loss to the last digit)."""
    import torch

    seen: dict[str, list] = {}
    losses = {b: _train(tmp_path, f"bias-{b}", biased(plugin_dir, b), seen) for b in (0.0, 3.0)}
    for b in (0.0, 3.0):  # weight, then bias
        assert all(torch.equal(w, torch.cat([torch.zeros(4 * 64), torch.full((4,), b)]))
                   for w in seen[f"bias-{b}"])
    assert len(losses[0.0]) == 3 and all(a != b for a, b in zip(losses[0.0], losses[3.0], strict=True))


def test_show_says_which_init_each_plugin_module_got(plugin_dir, tmp_path) -> None:
    from store_data import planned, result

    from ablate.ablations import build_model
    from ablate.provenance import collect
    from ablate.store import Store

    model = build_model(ModelConfig(preset="tiny", plugin=biased(plugin_dir, 3.0)))
    with Store.open(f"sqlite:///{tmp_path / 'ablate.db'}") as store:
        store.register_grid(name="g", text="g", runs=[planned(0)])
        store.ingest(result(0).model_copy(update={"provenance": collect("cpu", model.plugin_init)}))
        out = CliRunner().invoke(app, ["show", "run000", "--store", store.url], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    line = next(s for s in out.stdout.splitlines() if "plugin_init" in s)
    assert "{'blocks.0.attn.gate_sdpa': 'own', 'blocks.1.attn.gate_sdpa': 'own'}" in line, out.stdout
    assert "plugin_init" not in collect("cpu", build_model(ModelConfig(preset="tiny")).plugin_init)
