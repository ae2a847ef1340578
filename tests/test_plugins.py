"""Plugin arms from the user's code (examples/plugin): explicit loading, typed arguments, identity, and a grid with
one trained, probed and stored through ``ablate run``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.ablations import ModelConfig, count_params
from ablate.ablations.config import PluginArm
from ablate.cli import app

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"
ARM = {"arm": "myattn:CappedSoftmax", "args": {"cap": 5}}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch) -> Path:
    """The example package copied to a fresh folder on sys.path (the spawned workers inherit it)."""
    root = tmp_path / "src"
    shutil.copytree(EXAMPLE / "myattn", root / "myattn")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(__import__("sys").modules, "myattn", raising=False)
    return root


def grid_file(tmp_path: Path, *, plugins: str = "[myattn]", arm: str = json.dumps(ARM), steps: int = 10) -> Path:
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
    ("[]", json.dumps(ARM), r"plugin arm 'myattn:CappedSoftmax' is from module 'myattn', which the grid does not "
                            r"list: add `plugins: \[myattn\]`"),
    ("[nothere]", '{arm: "nothere:X"}', r"cannot import plugin module 'nothere': ModuleNotFoundError: No module "
                                        r"named 'nothere'"),
    ("[myattn]", '{arm: "myattn:Missing"}', r"plugin module 'myattn' has no 'Missing'"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: -1}}',
     r"model.plugin.args.cap: myattn:CappedSoftmax: Input should be greater than 0 \(got -1\)"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: 5, width: 2}}', r"model.plugin.args.width: .*Extra inputs"),
    ("[myattn]", '{arm: "myattn:CappedSoftmax", args: {cap: 5}, version: "1"}', r"model.plugin.version is filled by"),
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
    assert plugged["config"]["model"]["plugin"] == {**ARM, "version": first}
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
    with pytest.raises(ConfigError, match=r"^model.plugin: cannot export plugin=.* a plugin arm is the user's code"):
        hf_target(cfg)
    assert list(hf_unsupported(cfg)) == ["plugin"]


def test_an_entry_point_arm_is_listed_and_usable_without_plugins(plugin_dir, tmp_path, monkeypatch) -> None:
    from ablate.ablations import plugins

    monkeypatch.setattr(plugins, "registered", lambda: {"capped": "myattn:CappedSoftmax"})  # as a package would
    rows = json.loads(CliRunner().invoke(app, ["variants", "--format", "json"]).output)
    assert rows[-1]["name"] == "capped" and rows[-1]["source"] == "plugin: myattn:CappedSoftmax"
    result = plan(grid_file(tmp_path, plugins="[]", arm='{arm: capped, args: {cap: 2}}'), tmp_path / "home")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["imports"] == ["myattn"]
    assert [r["variant"] for r in out["runs"]] == ["baseline", "capped(cap=2)"]


def test_the_example_grid_plans_with_the_example_on_the_path(plugin_dir, tmp_path) -> None:
    out = json.loads(plan(EXAMPLE / "grid.yaml", tmp_path / "home").output)
    assert out["imports"] == ["myattn"]
    assert [r["variant"] for r in out["runs"]] == ["baseline", "myattn:CappedSoftmax(cap=5)"]
