"""`ablate show RUN_ID` (one run: config that differs from the defaults, results, events, loss curve; live
while it trains) and `ablate diff RUN_A RUN_B` (config fields that differ, results side by side), on both
backends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from store_data import planned, result
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import UserInputError
from ablate.provenance import NOT_MODEL, code_hash, model_code
from ablate.store import Store
from ablate.store.inspect import diff, show

runner = CliRunner()


@pytest.fixture
def filled(store: Store) -> Store:
    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(3)] + [planned(7, lr=4e-3)])
    store.ingest(result(0))
    store.ingest(result(7, lr=4e-3))
    return store


def test_show_a_finished_run(filled: Store) -> None:
    view = show(filled, "run000")
    assert (view["run_id"], view["status"], view["variant"], view["grid"]) == ("run000", "done", "baseline",
                                                                               "g")
    assert view["config"] == {"train.steps": 40}  # only what differs from the defaults (baseline, seed 0 are)
    assert view["results"]["val_ppl"] == 10.0 and view["results"]["ppl/code"] == 8.0
    assert list(view["results"])[:4] == ["params", "added_params", "steps", "tokens"]  # the declared order
    assert view["events"] == [{"kind": "loss_spike", "step": 7, "data": {"loss": 3.5, "trend": 2.1}}]
    assert [s for s, _ in view["curve"]["points"]] == list(range(40)) and "progress" not in view
    assert show(filled, "run007")["config"] == {"train.steps": 40, "train.lr": 0.004,
                                                 "variant": "sdpa-elementwise", "seed": 2}


def test_show_a_running_run_from_its_live_metrics(filled: Store) -> None:
    filled.mark_running(run_id="run001", host="node1", device="cpu")
    filled.record_progress({"run001": [{"step": s, "loss": 5.0 - 0.1 * s, "lr": 3e-3,
                                        "tokens_per_s": 1000.0 if s else 10.0} for s in range(12)]})
    view = show(filled, "run001")
    assert view["status"] == "running" and view["host"] == "node1"
    assert view["progress"]["step"] == 12 and view["progress"]["total"] == 40
    train, data = (filled.run_config("run001")[k] for k in ("train", "data"))
    # at the last step's pace (the first step's start-up is not the run's pace), as `ablate status` says
    tokens = train["batch_size"] * data["seq_len"]
    assert view["progress"]["eta_s"] == pytest.approx(28 * tokens / 1000, abs=0.1)
    assert len(view["curve"]["points"]) == 12 and view["curve"]["points"][-1] == (11, pytest.approx(3.9))
    out = runner.invoke(app, ["show", "run001", "--store", filled.url])
    assert out.exit_code == 0, out.output
    assert "step 12 / 40" in out.stdout and "loss by step" in out.stdout
    assert any(ch in out.stdout for ch in "▀▄▖▗▘▝▚▞▌▐")  # the curve, drawn


def test_show_table_and_json(filled: Store) -> None:
    out = runner.invoke(app, ["show", "run007", "--store", filled.url])
    assert out.exit_code == 0, out.output
    for text in ("run run007", "train.lr", "0.004", "val_ppl", "loss_spike", "loss by step"):
        assert text in out.stdout, text
    data = json.loads(runner.invoke(app,
                                    ["show", "run007", "--store", filled.url, "--format", "json"]).stdout)
    assert data["run_id"] == "run007" and data["results"]["bench/arith"] == pytest.approx(0.32)


def test_run_ids_by_prefix(filled: Store) -> None:
    assert filled.resolve_run("run007") == "run007" and filled.resolve_run(" run007 ") == "run007"
    filled.register_grid(name="h", text="h", runs=[planned(42)])
    assert filled.resolve_run("run04") == "run042"  # a unique beginning is enough
    with pytest.raises(UserInputError,
                       match=r"run 'run00' is ambiguous: it begins run000, run001, run002, run007"):
        filled.resolve_run("run00")
    with pytest.raises(UserInputError, match=r"no run 'nope' in the store .*ablate runs"):
        filled.resolve_run("nope")
    out = runner.invoke(app, ["show", "zz%", "--store", filled.url])  # LIKE wildcards are plain characters
    assert out.exit_code == 2 and out.stderr.startswith("error: no run 'zz%'")


def test_diff_two_runs(filled: Store) -> None:
    d = diff(filled, "run000", "run007")
    assert {r["field"]: (r["a"], r["b"]) for r in d["config"]} == {
        "seed": (0, 2), "train.lr": (0.003, 0.004), "variant": ("baseline", "sdpa-elementwise")}
    results = {r["metric"]: r for r in d["results"]}
    assert (
        results["val_ppl"]["a"] == 10.0
        and results["val_ppl"]["b"] == 17.0
        and results["val_ppl"]["b_minus_a"] == 7
    )
    assert [r["metric"] for r in d["results"]][:3] == ["params", "added_params", "steps"]
    out = runner.invoke(app, ["diff", "run000", "run007", "--store", filled.url])
    assert out.exit_code == 0, out.output
    assert "config fields that differ" in out.stdout and "train.lr" in out.stdout and "+7" in out.stdout
    same = diff(filled, "run001", "run001")
    assert same["config"] == [] and all(r["b_minus_a"] in (0, None) for r in same["results"])
    bad = runner.invoke(app, ["diff", "run000", "nope", "--store", filled.url])
    assert bad.exit_code == 2 and "no run 'nope'" in bad.stderr


PROVENANCE = {"ablate": "0.1.0", "torch": "2.13.0", "lightning": "2.6.6", "cuda": None, "python": "3.11.9",
              "model_code": "0123456789ab", "config_version": 2, "device": "cpu", "git_commit": "f" * 40,
              "git_dirty": False}


def test_show_prints_provenance_and_diff_a_changed_torch_version(store: Store) -> None:
    store.register_grid(name="g", text="g", runs=[planned(0), planned(3)])
    store.ingest(result(0).model_copy(update={"provenance": PROVENANCE}))
    store.ingest(result(3).model_copy(update={"provenance": {**PROVENANCE, "torch": "2.14.0"}}))
    assert show(store, "run000")["provenance"] == PROVENANCE
    out = runner.invoke(app, ["show", "run000", "--store", store.url])
    assert out.exit_code == 0 and "provenance" in out.stdout and "f" * 40 in out.stdout, out.output
    assert diff(store, "run000", "run003")["provenance"] == [{"field": "torch", "a": "2.13.0", "b": "2.14.0"}]
    out = runner.invoke(app, ["diff", "run000", "run003", "--store", store.url])
    assert out.exit_code == 0 and "provenance that differs" in out.stdout, out.output
    assert re.search(r"torch\s*│\s*2\.13\.0\s*│\s*2\.14\.0", out.stdout), out.stdout


def test_a_run_recorded_before_provenance_shows_none(filled: Store) -> None:
    assert show(filled, "run000")["provenance"] == {} and diff(filled, "run000", "run007")["provenance"] == []
    out = runner.invoke(app, ["show", "run000", "--store", filled.url])
    assert out.exit_code == 0 and "provenance" not in out.stdout


def test_a_report_across_model_code_warns_once(store: Store) -> None:
    from ablate.reports.data import current_runs

    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(3)])
    for i, code in enumerate(["aaa", "aaa", "bbb"]):
        store.ingest(result(i).model_copy(update={"provenance": {**PROVENANCE, "model_code": code}}))
    lines: list[str] = []
    current_runs(store, "g", warn=lines.append)
    assert lines == ["the report of grid g compares runs trained by different model code (aaa, bbb): their "
                     "differences may be the code, not the arms"]
    lines.clear()
    store.ingest(result(2).model_copy(update={"provenance": {**PROVENANCE, "model_code": "aaa"}}))
    current_runs(store, "g", warn=lines.append)
    assert lines == []


@pytest.mark.parametrize(("module", "counts"), [
    *[(name, False) for name in NOT_MODEL],  # what ablate counts, plans, exports and imports
    ("gates.py", True), ("model.py", True), ("layers.py", True), ("variants.py", True), ("init_rng.py", True),
])
def test_model_code_changes_with_what_a_model_computes_only(tmp_path, module: str, counts: bool) -> None:
    """A change to a module that counts, plans, exports or imports arms (a better error line in the plugin
    loader) leaves model_code as it was, so runs trained before and after still compare without a warning; a
    change to what a model computes changes it."""
    import shutil

    import ablate.ablations

    folder = tmp_path / "ablations"
    shutil.copytree(Path(ablate.ablations.__file__).parent, folder)
    before = code_hash(folder)
    assert before == model_code()
    path = folder / module
    path.write_text(path.read_text() + "\n\ndef _added(x):\n    return 2 * x\n")
    assert (code_hash(folder) != before) is counts
