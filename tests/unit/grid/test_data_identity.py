"""A run is what it trained on (issue 26): its id covers the resolved path and a fingerprint of every file it
reads, through ``ablate run``, ``plan`` and ``show``; the fingerprints are cached by size and mtime; ``db
rehash`` carries a store from before; and the identity fields are one mechanism (filled at load time, never by
a grid, left out of the stem id)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig, SourceConfig
from ablate.errors import RunError
from ablate.grid import expand, identity, parse_grid, run_id
from ablate.grid.ids import minimal
from ablate.grid.stems import stem_id
from ablate.runner.fingerprints import CACHE_FILE, Fingerprints, fill_source, fill_tokenizer

runner = CliRunner()

GRID = """
name: rel
base:
  model: {preset: tiny}
  data:
    seq_len: 32
    train: [{kind: jsonl, path: data/train.jsonl}]
    heldout: {own: {kind: jsonl, path: data/held.jsonl}}
  train: {steps: 2, batch_size: 4, checkpoint_every: 10}
  eval: {heldout_tokens: 64, probe_tokens: 32, probes: false}
"""


def _jsonl(path: Path, words: str, n: int = 40) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": f"{words} {i} " * 8}) + "\n" for i in range(n)))


def _folder(root: Path, words: str) -> Path:
    _jsonl(root / "data" / "train.jsonl", words)
    _jsonl(root / "data" / "held.jsonl", f"held {words}", n=10)
    (root / "rel.yaml").write_text(GRID)
    return root


def ablate(*args: str, home: Path):  # noqa: ANN201
    return runner.invoke(app, [*args, "--home", str(home)])


def _plan(home: Path) -> list[dict]:
    out = ablate("plan", "rel.yaml", "--format", "json", home=home)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["runs"]


# ---------------------------------------------------------------------------------------------------- through
# the CLI
def test_relative_data_resolves_per_folder_and_an_edited_file_makes_its_runs_stale(tmp_path,
                                                                                   monkeypatch) -> None:
    home = tmp_path / "home"
    one, two = _folder(tmp_path / "rel", "alpha beta"), _folder(tmp_path / "rel2", "gamma delta")
    monkeypatch.chdir(one)
    out = ablate("run", "rel.yaml", "--no-mlflow", home=home)
    assert out.exit_code == 0, out.output
    (first,) = _plan(home)
    assert first["status"] == "done"
    # the same grid file in another folder reads other data: another run, trained
    monkeypatch.chdir(two)
    (second,) = _plan(home)
    assert second["run_id"] != first["run_id"] and second["status"] == "new"
    out = ablate("run", "rel.yaml", "--no-mlflow", home=home)
    assert out.exit_code == 0 and "1 to run" in out.output, out.output
    shown = ablate("show", second["run_id"], "--format", "json", home=home)
    config = json.loads(shown.stdout)["config"]
    train = json.loads(config["data.train"])[0]  # the path as it resolved, and the fingerprint of the file
    assert train["path"] == str(two / "data" / "train.jsonl")
    assert train["fingerprint"] == hashlib.sha256(
        f"train.jsonl\t{hashlib.sha256((two / 'data' / 'train.jsonl').read_bytes()).hexdigest()}".encode()
    ).hexdigest()[:16]
    assert config["data.heldout.own.path"] == str(two / "data" / "held.jsonl")
    # an edited data file: its run is stale in plan, and a rerun trains it anew
    _jsonl(Path("data/train.jsonl"), "gamma delta, edited")
    (after,) = _plan(home)
    assert after["run_id"] != second["run_id"]
    assert after["status"] == f"stale: data.train.0.fingerprint changed since run {second['run_id']}"
    out = ablate("run", "rel.yaml", "--no-mlflow", home=home)
    assert out.exit_code == 0 and "1 to run" in out.output, out.output
    assert _plan(home)[0]["status"] == "done"
    # the grid's current configuration is the edited one: status counts it, and says what it left out
    status = ablate("status", "--format", "json", home=home)
    (grid,) = json.loads(status.stdout)["grids"]
    assert (grid["total"], grid["done"], grid["older"]) == (1, 1, 2)
    assert "grid rel: 2 run(s) of older configurations left out" in ablate("status", home=home).stderr
    (grid,) = json.loads(ablate("status", "--format", "json", "--older", home=home).stdout)["grids"]
    assert (grid["total"], grid["done"]) == (3, 3)
    report = ablate("report", "table1", home=home)
    assert report.exit_code == 0, report.output
    assert "report of grid rel: 2 run(s) of older configurations of the grid left out" in report.stderr
    # touching the file (same bytes, a new mtime) is no change: the fingerprint is of the content
    os.utime("data/train.jsonl", (1, 1))
    assert _plan(home)[0]["status"] == "done"


def test_a_held_out_set_that_is_the_training_file_is_warned_about(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(_folder(tmp_path / "rel", "alpha beta"))
    Path("rel.yaml").write_text(GRID.replace("data/held.jsonl", "data/train.jsonl"))
    out = ablate("plan", "rel.yaml", home=tmp_path / "home")
    assert out.exit_code == 0, out.output
    assert ("rel.yaml: data.heldout.own reads the training data of data.train.0 (1 file, e.g. "
            f"{tmp_path / 'rel' / 'data' / 'train.jsonl'}): only built-in corpora are split") in " ".join(
        out.stderr.split())
    Path("rel.yaml").write_text(GRID)
    assert "reads the training data" not in ablate("plan", "rel.yaml", home=tmp_path / "home").stderr


# ----------------------------------------------------------------------------------------------------
# fingerprints
def test_a_fingerprint_is_of_the_content_and_read_again_only_when_size_or_mtime_change(tmp_path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("one")
    os.utime(path, (1000, 1000))  # settled: cached on disk
    first = Fingerprints(tmp_path / "cache")
    assert first.file(path) == hashlib.sha256(b"one").hexdigest()
    first.save()
    assert str(path) in json.loads((tmp_path / "cache" / CACHE_FILE).read_text())["files"]
    from ablate.runner import fingerprints

    fingerprints._MEMORY.clear()  # a new process: only the disk cache
    path.write_text("two")
    os.utime(path, (1000, 1000))  # same size, same mtime: the cache answers (what size + mtime promise)
    assert Fingerprints(tmp_path / "cache").file(path) == hashlib.sha256(b"one").hexdigest()
    os.utime(path, (2000, 2000))
    assert Fingerprints(tmp_path / "cache").file(path) == hashlib.sha256(b"two").hexdigest()
    path.write_text("three")  # just modified: hashed, not cached on disk
    again = Fingerprints(tmp_path / "cache")
    assert again.file(path) == hashlib.sha256(b"three").hexdigest()
    again.save()
    assert json.loads((tmp_path / "cache" / CACHE_FILE).read_text())["files"][str(path)][2] != \
        hashlib.sha256(b"three").hexdigest()


@pytest.mark.parametrize("kind", ["text", "jsonl", "tokens", "hf"])
def test_every_user_source_kind_is_fingerprinted_by_its_files(kind: str, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "part-0").write_bytes(b"\x01\x00" * 64)
    (folder / "part-1").write_bytes(b"\x02\x00" * 64)
    monkeypatch.chdir(tmp_path)
    src = SourceConfig(kind=kind, path="src")
    filled = fill_source(src, Fingerprints())
    assert filled["path"] == str(folder)
    (folder / "part-1").write_bytes(b"\x03\x00" * 64)
    changed = fill_source(src, Fingerprints())
    assert changed["fingerprint"] != filled["fingerprint"]
    (folder / "part-1").rename(folder / "part-2")  # a file renamed: another dataset
    assert fill_source(src, Fingerprints())["fingerprint"] not in (filled["fingerprint"],
                                                                   changed["fingerprint"])


def test_built_in_corpora_are_fingerprinted_by_the_python_version_and_their_files(monkeypatch) -> None:
    here = fill_source(SourceConfig(kind="builtin", name="python-code"), Fingerprints())["fingerprint"]
    assert fill_source(SourceConfig(kind="builtin", name="python-docs"),
                       Fingerprints())["fingerprint"] == here
    assert fill_source(SourceConfig(kind="builtin", name="arithmetic"), Fingerprints()) == {}  # ablate's code
    assert fill_source(SourceConfig(kind="task", name="mqar"), Fingerprints()) == {}
    monkeypatch.setattr(sys, "version", "3.99.0 (another Python)")
    assert fill_source(SourceConfig(kind="builtin", name="python-code"),
                       Fingerprints())["fingerprint"] != here


def test_an_hf_tokenizer_folder_is_fingerprinted_by_its_tokenizer_files(tmp_path, monkeypatch) -> None:
    from ablate.config import DataConfig

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (folder / "model.safetensors").write_bytes(b"weights")
    monkeypatch.chdir(tmp_path)
    first = fill_tokenizer(DataConfig(tokenizer="hf:tok"), Fingerprints())
    assert first["tokenizer"] == f"hf:{folder}"
    (folder / "model.safetensors").write_bytes(b"other weights")  # weights are no part of a tokenizer
    assert fill_tokenizer(DataConfig(tokenizer="hf:tok"), Fingerprints()) == first
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    assert fill_tokenizer(DataConfig(tokenizer="hf:tok"), Fingerprints())["tokenizer_fingerprint"] != \
        first["tokenizer_fingerprint"]
    assert fill_tokenizer(DataConfig(tokenizer="byte"), Fingerprints()) == {}


# ----------------------------------------------------------------------------------------------------
# identity fields
def _planned(tmp_path: Path, *, write: bool = True):  # noqa: ANN202
    """The one run of a grid reading a.txt (training), b.txt (held out) and c.txt (a later stage's
    training)."""
    for name in ("a.txt", "b.txt", "c.txt") if write else ():
        (tmp_path / name).write_text(f"text of {name} " * 20)
    (run,) = expand(parse_grid(f"""
name: i
base:
  data:
    train: [{{kind: text, path: '{tmp_path / "a.txt"}'}}]
    heldout: {{b: {{kind: text, path: '{tmp_path / "b.txt"}'}}}}
  stages: [{{data.train: [{{kind: text, path: '{tmp_path / "c.txt"}'}}], train.steps: 5}}]
"""))
    return run


def _filled(tmp_path: Path) -> RunConfig:
    return _planned(tmp_path).config


def test_stages_are_filled_and_every_identity_field_moves_the_id_but_not_the_stem(tmp_path) -> None:
    config = _filled(tmp_path)
    found = identity.values(config)
    assert set(found) == {"variant_revision", "data.tokenizer_fingerprint", "data.train.0.fingerprint",
                          "data.heldout.b.fingerprint", "stages.0.data.train.0.fingerprint"}
    # the baseline is at its first revision
    assert [p for p, v in found.items() if v is None] == ["variant_revision", "data.tokenizer_fingerprint"]
    assert config.stages[0]["data.train"] == [{"kind": "text", "path": str(tmp_path / "c.txt"),
                                               "fingerprint": found["stages.0.data.train.0.fingerprint"]}]
    stem = stem_id(config)
    assert stem == run_id(identity.strip(config)) != run_id(config)
    (tmp_path / "c.txt").write_text("the second stage's data, edited")
    again = _planned(tmp_path, write=False)
    assert again.run_id != run_id(config) and again.stem_id == stem
    assert identity.changed(again.config,
                            config.model_dump(mode="json")) == ["stages.0.data.train.0.fingerprint"]


@pytest.mark.parametrize("base", [
    "{}",  # the built-in corpora: their fingerprints make data.train differ from its default
    "{data: {train: [{kind: builtin, name: arithmetic}], heldout: {}}}",  # no identity values: its own stem
    "{data: {train: [{kind: text, path: A}, {kind: builtin, name: python-code, weight: 2}], tokenizer: "
    "'hf:TOK'}}",
    "{data: {heldout: {x: {kind: text, path: A}}}, stages: [{data.train: [{kind: text, path: A}], "
    "data.seq_len: 64}]}",
], ids=["builtin", "stream", "text-and-hf", "stage"])
def test_the_stem_is_the_id_of_the_config_without_its_identity_fields(base: str, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("some text " * 50)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    text = base.replace("A", str(tmp_path / "a.txt")).replace("TOK", str(tmp_path / "tok"))
    (run,) = expand(parse_grid(f"name: s\nbase: {text}"))
    assert run.stem_id == run_id(identity.strip(run.config)) == stem_id(run.config)
    assert (run.stem_id == run.run_id) == (base == ids_free), identity.values(run.config)


ids_free = "{data: {train: [{kind: builtin, name: arithmetic}], heldout: {}}}"


def test_a_grid_never_sets_an_identity_field(tmp_path) -> None:
    from ablate.errors import ConfigError

    text = (
        f"name: g\nbase: {{stages: [{{data.train: [{{kind: text, path: '{tmp_path}', fingerprint: x}}]}}]}}"
    )
    with pytest.raises(ConfigError, match=r"base: stages.0.data.train.0.fingerprint is filled by ablate"):
        expand(parse_grid(text))
    with pytest.raises(ConfigError, match=r"grid: data.tokenizer_fingerprint is filled by ablate"):
        expand(parse_grid("name: g\ngrid: {data.tokenizer_fingerprint: [abc]}"))


def test_a_run_whose_data_changed_after_it_was_planned_does_not_train(tmp_path) -> None:
    config = _filled(tmp_path)
    identity.check_current(config, Fingerprints())  # nothing changed
    (tmp_path / "a.txt").write_text("edited after planning")
    with pytest.raises(RunError, match=r"data.train.0.fingerprint is \w+ now, \w+ when this run was planned"):
        identity.check_current(config, Fingerprints())


def test_the_runner_checks_the_data_with_the_check_its_caller_gives(tmp_path) -> None:
    # the executors hand run_one grid.identity.check_current (the grid sits above the runner): it refuses the
    # run before anything trains, with the check's own error
    from ablate.execute import training
    from ablate.execute.slurm import task
    from ablate.runner import run_one

    config = _filled(tmp_path)
    (tmp_path / "a.txt").write_text("edited after planning")
    with pytest.raises(RunError, match=r"data.train.0.fingerprint is \w+ now, \w+ when this run was planned"):
        run_one(config, tmp_path / "run", run_id="x", check_inputs=identity.check_current)
    assert not (tmp_path / "run" / "result.json").exists()
    assert training.check_current is task.check_current is identity.check_current


# ---------------------------------------------------------------------------------------------------- a store
# from before
def v1_id(config: RunConfig) -> str:
    """Run ids at CONFIG_VERSION 1 (before data fingerprints): a frozen copy of that rule."""
    text = json.dumps({"config_version": 1, "config": minimal(config)}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_a_store_trained_before_is_carried_over_by_rehash_and_its_runs_are_skipped(tmp_path,
                                                                                   monkeypatch) -> None:
    from store_data import Planned

    from ablate.result import RunResult, write_result
    from ablate.store import Store

    home = tmp_path / "home"
    monkeypatch.chdir(_folder(tmp_path / "rel", "alpha beta"))
    text = GRID + "grid: {variant: [baseline, sdpa-elementwise]}\n"
    Path("rel.yaml").write_text(text)
    old = []  # the runs as an ablate from before this change stored them: relative paths, no fingerprints
    for variant in ("baseline", "sdpa-elementwise"):
        raw = parse_grid(text).base | {"variant": variant}
        config = RunConfig.model_validate(raw)
        old.append(Planned(v1_id(config), config, 1000, 0, {"variant": variant}))
    with Store.open(f"sqlite:///{home / 'ablate.db'}") as store:
        store.register_grid(name="rel", text=text, runs=old)
        for p in old:
            result = RunResult(run_id=p.run_id, config=p.config.model_dump(mode="json"), status="done",
                               summary={"steps": 2, "ppl/own": 9.0, "val_ppl": 9.0, "train_loss": 2.0},
                               metrics={"step": [0, 1], "loss": [3.0, 2.0]})
            write_result(result, home / "runs" / p.run_id)
            store.ingest(result)
        with store.engine.begin() as conn:
            from sqlalchemy import text as sql

            conn.execute(sql("UPDATE runs SET config_version = 1, stem_id = NULL"))
    refused = ablate("run", "rel.yaml", "--no-mlflow", home=home)
    assert refused.exit_code == 2 and "`ablate db rehash`" in refused.stderr
    monkeypatch.chdir(tmp_path)  # elsewhere, the relative paths find no data: nothing is carried
    out = ablate("db", "rehash", home=home)
    assert out.exit_code == 0 and out.stdout.startswith("0 run(s) carried over"), out.output
    assert "cannot carry" in out.stderr and "data/train.jsonl" in out.stderr
    monkeypatch.chdir(tmp_path / "rel")
    out = ablate("db", "rehash", home=home)
    assert out.exit_code == 0 and out.stdout.startswith("2 run(s) carried over"), out.output
    assert {r["status"] for r in _plan(home)} == {"done"}
    again = ablate("run", "rel.yaml", "--no-mlflow", home=home)
    assert again.exit_code == 0 and "skipped │        2" in again.output, again.output
    report = ablate("report", "table1", home=home)
    assert report.exit_code == 0 and "9.00" in report.stdout, report.output
