"""`ablate plan`: every shipped grid plans; every broken grid gets one line and exit status 2; random YAML
never gives a traceback; statuses come from the store when there is one, and planning never creates one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.grid import expand, load_grid
from ablate.studies import FOLDER, shipped

SHIPPED = shipped()
runner = CliRunner()


def plan(*args: str, home: Path):
    return runner.invoke(app, ["plan", *args, "--home", str(home)])


def write(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------------- shipped
# grids
def test_the_shipped_grids_are_there():
    files = {n: p.relative_to(FOLDER).as_posix() for n, p in SHIPPED.items()}
    assert list(files)[0] == "quickstart" and files["quickstart"] == "quickstart.yaml"
    assert {"lite", "sinks", "ladder-lite", "ladder-paper"} <= set(files)
    for n in range(1, 7):
        assert files[f"table{n}"] == f"paper/table{n}.yaml"
        assert files[f"table{n}-paper-scale"] == f"paper/table{n}-paper-scale.yaml"
    names = [p.stem for p in FOLDER.rglob("*.yaml")]
    assert sorted(names) == sorted(files)  # every file has a name of its own, and is listed


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_grid_plans_by_name(name, tmp_path, monkeypatch):
    path = SHIPPED[name]
    monkeypatch.chdir(tmp_path)  # by name, from a folder that holds no grid file
    result = plan(name, "--format", "json", home=tmp_path)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    grid = load_grid(path)
    assert out["grid"] == grid.name
    assert len(out["runs"]) == len(expand(grid)) >= 2
    assert len({r["run_id"] for r in out["runs"]}) == len(out["runs"])
    lines = result.stdout.splitlines()  # a run a line, between the grid's lines
    runs = lines[3:3 + len(out["runs"])]
    assert [json.loads(line.strip().rstrip(",")) for line in runs] == out["runs"]
    assert out["imports"] == []  # no plugin arms in a shipped grid
    for run in out["runs"]:
        assert {"run_id", "variant", "seed", "params", "added_params", "status", "config"} <= set(run)
        assert run["status"] == "new" and run["params"] > 0
        assert run["config"]["variant"] == run["variant"] and run["config"]["seed"] == run["seed"]
    if path.name.endswith("-paper-scale.yaml"):
        assert {r["config"]["model"]["preset"] for r in out["runs"]} <= {
            "paper-moe-15a2b", "paper-dense-1.7b", "paper-dense-1.7b-48l"}
    assert not (tmp_path / "ablate.db").exists()


def test_paper_scale_table1_reproduces_the_added_parameters(tmp_path):
    out = json.loads(plan("table1-paper-scale", "--format", "json", home=tmp_path).stdout)
    added = {r["variant"]: r["added_params"] for r in out["runs"]}
    # paper Table 1's "Added Param" column, in millions
    for variant, millions in {"sdpa-elementwise": 201, "v-elementwise": 25, "k-elementwise": 25,
                              "q-elementwise": 201, "dense-output": 100, "sdpa-headwise": 1.6,
                              "v-headwise": 0.2, "kv-heads-x2": 50, "q-heads-x1.5": 201}.items():
        assert added[variant] / 1e6 == pytest.approx(millions, rel=0.03, abs=0.05), variant


def test_paper_scale_table2_matches_every_model_to_the_baseline(tmp_path):
    out = json.loads(plan("table2-paper-scale", "--format", "json", home=tmp_path).stdout)
    assert len(out["runs"]) == 14
    for run in out["runs"]:
        assert abs(run["match_residual"]) < 1e-4
    lrs = sorted({(r["config"]["train"]["batch_size"], r["config"]["train"]["lr"]) for r in out["runs"]})
    assert lrs == [(1024, 0.004), (1024, 0.008), (2048, 0.0045), (4096, 0.0053), (4096, 0.008)]


def test_table_output_shows_the_varying_axes_and_statuses(tmp_path):
    grid = write(tmp_path, "name: t\ngrid: {variant: [baseline, sdpa-headwise], train.lr: [1.0e-3, 2.0e-3]}\n"
                           "match_params: baseline")
    result = plan(str(grid), home=tmp_path)
    assert result.exit_code == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "run id" in line)
    for column in ("run id", "variant", "seed", "train.lr", "params", "added", "vs baseline", "status"):
        assert column in header
    assert "seed " in header and "model.preset" not in header
    assert result.stdout.count(" new ") == 4
    assert "grid t: 4 runs" in result.stdout


def test_plan_shows_the_workers_and_threads_ablate_run_would_start(tmp_path, monkeypatch):
    from ablate.execute import devices

    monkeypatch.setattr(devices, "usable_cpus", lambda **_: 4)
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    grid = write(tmp_path, "name: t\ngrid: {variant: [baseline, sdpa-headwise, sdpa-elementwise]}\n")
    assert "ablate run here: 1 worker on cpu, 4 threads (4 CPUs usable" in plan(str(grid),
                                                                                home=tmp_path).stdout
    two = plan(str(grid), "--jobs", "2", "--format", "json", home=tmp_path)
    assert json.loads(two.stdout)["workers"] == [{"device": "cpu", "threads": 2}] * 2
    many = plan(str(grid), "--jobs", "8", "--threads", "3", home=tmp_path)  # never more workers than runs
    assert "3 workers on cpu, 3 threads each" in many.stdout


def test_a_grid_runs_the_same_with_either_spelling_of_its_numbers(tmp_path):
    home = tmp_path / "home"
    grid = write(tmp_path, tiny_grid("spelled", variants=["baseline"], steps=2,
                                     train_extra=", lr: 1.0e-2").replace("batch_size: 4", "batch_size: 2"))
    first = runner.invoke(app, ["run", str(grid), "--home", str(home), "--no-mlflow"])
    assert first.exit_code == 0, first.output
    grid.write_text(grid.read_text().replace("lr: 1.0e-2", "lr: 1e-2"))  # YAML 1.1 would read a string
    again = runner.invoke(app, ["run", str(grid), "--home", str(home), "--no-mlflow"])
    assert again.exit_code == 0, again.output  # the same study: the same base, the same run, done
    assert re.search(r"skipped\W+1\b", again.output), again.output
    out = json.loads(plan(str(grid), "--set", "train.steps=2.0e0", "--format", "json", home=home).stdout)
    assert [r["status"] for r in out["runs"]] == ["done"] and out["runs"][0]["config"]["train"]["lr"] == 0.01


def test_plan_says_what_ablate_run_would_start_when_every_run_is_done(tmp_path):
    from ablate.result import RunResult
    from ablate.store import Store

    grid = write(tmp_path, "name: s\ngrid: {seed: [0, 1]}")
    runs = expand(load_grid(grid))
    with Store.open(f"sqlite:///{tmp_path / 'ablate.db'}") as store:
        store.register_grid(name="s", text=grid.read_text(), runs=runs)
        for run in runs:
            store.ingest(RunResult(run_id=run.run_id, config=run.config.model_dump(mode="json"),
                                   status="done", summary={"steps": 5}))
    out = plan(str(grid), home=tmp_path)
    assert out.exit_code == 0, out.output
    *table, last = out.stdout.splitlines()
    assert sum(" done" in line for line in table) == 2
    assert last.startswith(
        "ablate run here: no workers: nothing to train (every run done or diverged) (")
    assert json.loads(plan(str(grid), "--format", "json", home=tmp_path).stdout)["workers"] == []


def test_statuses_come_from_an_existing_store(tmp_path):
    from ablate.store import Store

    grid = write(tmp_path, "name: s\ngrid: {seed: [0, 1, 2]}")
    runs = expand(load_grid(grid))
    with Store.open(f"sqlite:///{tmp_path / 'ablate.db'}") as store:
        store.register_grid(name="s", text=grid.read_text(), runs=runs[:2])
        store.mark_running(run_id=runs[1].run_id, host="here", device="cpu")
    out = json.loads(plan(str(grid), "--format", "json", home=tmp_path).stdout)
    assert [r["status"] for r in out["runs"]] == ["queued", "running", "new"]
    # the same store named by URL, from elsewhere
    url = f"sqlite:///{tmp_path / 'ablate.db'}"
    out = json.loads(plan(str(grid), "--format", "json", "--store", url, home=tmp_path / "other").stdout)
    assert [r["status"] for r in out["runs"]] == ["queued", "running", "new"]


def test_plan_never_creates_a_store(tmp_path):
    grid = write(tmp_path, "name: n\ngrid: {seed: [0, 1]}")
    home = tmp_path / "home"
    assert plan(str(grid), home=home).exit_code == 0
    assert plan(str(grid), "--store", f"sqlite:///{tmp_path / 'x.db'}", home=home).exit_code == 0
    assert not home.exists() and not (tmp_path / "x.db").exists()


# ---------------------------------------------------------------------------------------------------- errors
ERRORS = {
    "malformed-yaml": ("name: x\ngrid: {seed: [0, 1}\n", (), r"grid.yaml: line 2: malformed YAML"),
    "duplicate-key": ("name: x\nname: y\n", (), r"line 2: malformed YAML: key 'name' appears twice"),
    "not-a-mapping": ("- a\n- b\n", (), r"a grid file is a mapping"),
    "no-name": ("grid: {seed: [0]}\n", (), r"grid.yaml: name: Field required"),
    "unknown-top-key": ("name: x\ngird: {seed: [0]}\n", (), r"unknown key 'gird' \(did you mean 'grid'\?\)"),
    "unknown-deep-key": ("name: x\nbase: {train: {stpes: 5}}\n", (),
                         r"grid.yaml: base: unknown key 'train.stpes' \(did you mean 'train.steps'\?\)"),
    "unknown-deeper-key": ("name: x\nbase: {model: {gate: {positon: G1}}}\n", (),
                           r"unknown key 'model.gate.positon' \(did you mean 'model.gate.position'\?\)"),
    "unknown-list-item-key": ("name: x\nbase: {data: {train: [{kind: builtin, nam: x}]}}\n", (),
                              r"unknown key 'data.train.0.nam' \(did you mean 'data.train.0.name'\?\)"),
    "unknown-axis-path": ("name: x\ngrid: {train.lrr: [1.0]}\n", (),
                          r"grid.yaml: grid: unknown key 'train.lrr' \(did you mean 'train.lr'\?\)"),
    "unknown-include-path": ("name: x\ninclude: [{modle.n_layers: 3}]\n", (),
                             r"include\[0\]: unknown key 'modle' \(did you mean 'model'\?\)"),
    "unknown-exclude-path": ("name: x\nexclude: [{sed: 1}]\n", (),
                             r"exclude\[0\]: unknown key 'sed' \(did you mean 'seed'\?\)"),
    "unknown-set-path": ("name: x\n", ("--set", "train.stepz=4"), r"--set: unknown key 'train.stepz'"),
    "set-without-equals": ("name: x\n", ("--set", "train.steps"), r"--set: expected K=V"),
    "wrong-type": ("name: x\nbase: {train: {steps: many}}\n", (),
                   r"base: train.steps: Input should be a valid integer.*got 'many'"),
    "wrong-type-from-set": ("name: x\n", ("--set", "train.lr=fast"),
                            r"--set: train.lr: Input should be a valid number"),
    "axis-not-a-list": ("name: x\ngrid: {seed: 0}\n", (), r"grid.seed: Input should be a valid list, got 0"),
    "empty-axis": ("name: x\ngrid: {seed: []}\n", (), r"grid.seed: List should have at least 1 item"),
    "negative-steps": ("name: x\ngrid: {train.steps: [10, -5]}\n", (),
                       r"grid: train.steps: Input should be greater than or equal to 1, got -5"),
    "heads-do-not-divide": ("name: x\ngrid: {model.n_kv_heads: [2, 3]}\n", (),
                            r"grid: model: n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    "odd-head-dim": ("name: x\nbase: {model: {head_dim: 15}}\n", (),
                     r"base: model: head_dim \(15\) must be even"),
    "unknown-preset": ("name: x\nbase: {model: {preset: tiy}}\n", (),
                       r"unknown preset 'tiy' \(did you mean 'tiny'\?\)"),
    "bad-literal": ("name: x\nbase: {model: {gate: {position: G7}}}\n", (),
                    r"model.gate.position: Input should be 'G1', 'G2', 'G3', 'G4' or 'G5', got 'G7'"),
    "zip-unequal": ("name: x\nzip: [{train.lr: [1.0e-3, 2.0e-3], train.steps: [5]}]\n", (),
                    r"zip\[0\]: the lists of a zip group must have equal length: train.lr has 2, train.steps "
                    r"has 1"),
    "seed-twice": ("name: x\ngrid: {seed: [0, 1, 1]}\n", (),
                   r"grid.yaml: grid: seed lists 1 twice \(\[0, 1, 1\]\): each value once"),
    "value-twice-by-value": ("name: x\ngrid: {train.lr: [1e-3, 0.001]}\n", (),
                             r"grid: train.lr lists 0.001 twice"),
    "zip-row-twice": ("name: x\nzip: [{seed: [0, 0], train.lr: [1.0e-3, 1.0e-3]}]\n", (),
                      r"zip\[0\]: \(seed, train.lr\) lists \(0, 0.001\) twice"),
    "axis-twice": ("name: x\ngrid: {seed: [0]}\nzip: [{seed: [1]}]\n", (),
                   r"'seed' is varied twice, in grid and in zip\[0\]"),
    "unknown-variant": ("name: x\ngrid: {variant: [baseline, sdpa-elementwize]}\n", (),
                        r"grid: variant: unknown variant 'sdpa-elementwize' \(did you mean "
                        r"'sdpa-elementwise'\?\)"),
    "unknown-variant-in-include": ("name: x\ninclude: [{variant: sandwhich-norm}]\n", (),
                                   r"include\[0\]: variant: unknown variant 'sandwhich-norm' \(did you mean "
                                   r"'sandwich-norm'\?\)"),
    "moe-variant-on-dense": ("name: x\ngrid: {variant: [add-4-experts]}\n", (),
                             r"grid: variant: variant 'add-4-experts' needs a mixture-of-experts model"),
    "unknown-match-params": ("name: x\nmatch_params: basline\n", (),
                             r"match_params: unknown variant 'basline'"),
    "bad-exclude-value": ("name: x\nexclude: [{train.lr: abc}]\n", (),
                          r"exclude\[0\]: train.lr: Input should be a valid number"),
    "bad-format": ("name: x\n", ("--format", "xml"), r"--format: unknown format 'xml'; allowed: json, table"),
}


@pytest.mark.parametrize("case", ERRORS, ids=list(ERRORS))
def test_a_broken_grid_gets_one_line_and_exit_status_2(case, tmp_path):
    text, extra, expected = ERRORS[case]
    result = plan(str(write(tmp_path, text)), *extra, home=tmp_path)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    import re

    assert re.search(expected, lines[0]), lines[0]


@pytest.mark.parametrize(("args", "expected"), [
    (["run", "--store-patience", "-5"],
     "error: --store-patience: Input should be greater than or equal to 0, got '-5'"),
    (["tune", "--store-patience", "-1"],
     "error: --store-patience: Input should be greater than or equal to 0, got '-1'"),
    (["run", "--jobs", "two"], "error: --jobs: Input should be a valid integer, unable to parse string as an "
                               "integer, got 'two'"),
])
def test_a_bad_option_value_is_one_line_naming_it_and_the_value(args, expected, tmp_path):
    path = write(tmp_path, "name: x\n")
    result = CliRunner().invoke(app, [args[0], str(path), *args[1:], "--home", str(tmp_path / "home")])
    assert result.exit_code == 2 and result.stderr.splitlines() == [expected], result.output
    assert not (tmp_path / "home").exists()  # nothing was written


def test_a_missing_file_gets_one_line_and_exit_status_2(tmp_path):
    result = plan(str(tmp_path / "nope.yaml"), home=tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'nope.yaml'}: no such grid file"]


# ---------------------------------------------------------------------------------------------------- fuzzing
PATHS = st.sampled_from([
    "variant", "seed", "train.lr", "train.steps", "train.batch_size", "model.preset", "model.n_kv_heads",
    "model.n_heads", "model.gate", "model.gate.position", "model.switch", "data.seq_len", "eval.benchmarks",
    "data.heldout.code.kind", "train", "model", "x.y", "", "train.lr.x",
])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 64), st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(["baseline", "sdpa-elementwise", "sdpa-elementwize", "add-4-experts", "tiny", "tiny-moe",
                     "G2", "3e-3", "builtin", "x", ""]),
    st.text(max_size=6),
)
TREES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(PATHS, inner, max_size=3)),
    max_leaves=8,
)
SECTION = {
    "name": st.sampled_from(["fuzz", "fuzz", "fuzz", "fuzz", "fuzz", "fuzz", " ", 5, None, True]),
    "base": st.one_of(st.dictionaries(PATHS, TREES, max_size=4), TREES),
    "grid": st.one_of(st.dictionaries(PATHS, st.lists(SCALARS, max_size=3), max_size=3), TREES),
    "zip": st.lists(st.dictionaries(PATHS, st.lists(SCALARS, min_size=1, max_size=2), max_size=2),
                    max_size=2),
    "include": st.lists(st.dictionaries(PATHS, SCALARS, max_size=3), max_size=2),
    "exclude": st.lists(st.dictionaries(PATHS, SCALARS, max_size=2), max_size=2),
    "match_params": st.one_of(st.sampled_from(["baseline", "sdpa-headwise", "basline"]), SCALARS),
    "extra": TREES,  # stands in for an unknown top-level key
}


@st.composite
def grid_docs(draw):
    """Grid-shaped documents: each section present or not, holding plausible or random content."""
    doc = {k: draw(SECTION[k]) for k in SECTION if k == "name" or draw(st.integers(0, 9)) < 4}
    if draw(st.integers(0, 9)) == 9:  # now and then, a key that is not a section
        doc["gird"] = doc.pop("extra", None)
    doc.pop("extra", None)
    return doc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_docs())
def test_random_nested_yaml_never_gives_a_traceback(doc, tmp_path):
    result = plan(str(write(tmp_path, yaml.safe_dump(doc))), "--format", "json", home=tmp_path)
    assert result.exit_code in (0, 2), result.exception
    if result.exit_code == 2:
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    else:
        assert json.loads(result.stdout)["runs"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from("name:grid{}[],-\n #&*!|>'\"%@`x0.e"), max_size=60))
def test_random_text_never_gives_a_traceback(text, tmp_path):
    result = plan(str(write(tmp_path, text)), home=tmp_path)
    assert result.exit_code in (0, 2), result.exception
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------------- ablate
# schema
def test_schema_lists_every_field_with_its_recorded_default():
    """``ablate schema`` is read from the models: every field defaults.yaml records is there, at that
    default."""
    from ablate.grid.defaults import recorded

    out = runner.invoke(app, ["schema", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    _, record = recorded()
    for path, value in record.items():
        if "=" in path:  # a preset's values, not a field
            continue
        assert path in rows, path
        if isinstance(value, bool | int | float | str) or value is None:
            got = json.loads(rows[path]["default"])
            same = got == value or (isinstance(value, float | int) and float(got) == float(value))
            assert same, (path, got, value)
    assert {"name", "base", "grid", "zip", "include", "exclude", "match_params", "ladder.sizes"} <= set(rows)
    assert rows["name"]["default"] == "(required)"
    assert rows["train.lr"] == {"path": "train.lr", "type": "float", "default": "0.003", "allowed": "> 0",
                                "description": ""}
    assert rows["data.row_start"]["allowed"] == '"random", "bos", "document"'
    assert rows["data.heldout_fraction"]["allowed"] == "> 0, < 1"
    assert rows["data.train[].kind"]["allowed"] == '"builtin", "text", "jsonl", "tokens", "hf", "task"'
    assert "python-docs" in rows["data.heldout{}.name"]["allowed"].split(", ")
    assert "sdpa-elementwise" in rows["variant"]["allowed"].split(", ")
    assert "tiny" in rows["model.preset"]["allowed"].split(", ")
    assert rows["eval.yarn_factor"]["type"] == 'float (> 1) | "auto" | null'


def test_schema_of_one_section_and_a_field_that_is_not_there():
    out = runner.invoke(app, ["schema", "data.train"])  # no terminal: whole cells, markup shown as written
    assert out.exit_code == 0 and "…" not in out.stdout
    assert "[eos] + prompt + answer" in out.stdout
    paths = [line.split("│")[1].strip() for line in out.stdout.splitlines() if line.startswith("│ data")]
    assert paths == ["data.train", "data.train[].kind", "data.train[].name", "data.train[].path",
                     "data.train[].field", "data.train[].dtype", "data.train[].weight",
                     "data.train[].fingerprint", "data.train[].loss"]
    bad = runner.invoke(app, ["schema", "data.tokenizr"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: FIELD: no field 'data.tokenizr' (did you mean 'data.tokenizer'?)")
