"""Bad input never crashes (issue 14): broken grids, data that cannot work, bad homes and stores through
`ablate run` (not only `plan`) get exit status 2, one to three lines on stderr, no traceback, and nothing
recorded; silent no-ops (--set on an axis, a bare non-boolean --where, an exclude that removes everything) are
errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store import Store

runner = CliRunner()
GOOD = tiny_grid("bad-input", steps=2)


def run(*args: str, home: Path, store: str | None = None, env: dict[str, str | None] | None = None):  # noqa: ANN201
    extra = ["--store", store] if store else []
    return runner.invoke(app, ["run", *args, "--home", str(home), "--no-mlflow", *extra],
                         env=env)


def assert_refused(result, pattern: str) -> None:  # noqa: ANN001
    """Exit 2; one to three lines on stderr, the first an error matching ``pattern``; no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 3 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    assert re.search(pattern, lines[0]), lines[0]


def assert_nothing_recorded(home: Path) -> None:
    assert (
        not (home / "ablate.db").exists()
        and not (home / "runs").exists()
        and not (home / "mlflow.db").exists()
    )


# ---------------------------------------------------------------------------------------------------- the
# corpus
def _grid(base: str = "", rest: str = "") -> str:
    return GOOD.replace("base:\n", f"base:\n{base}", 1) + rest


CORPUS: dict[str, tuple[str | bytes | None, str]] = {
    "yaml-error": ("name: x\ngrid: {seed: [0, 1}\n", r"line 2: malformed YAML"),
    "tabs": ("name: x\nbase:\n\ttrain: {steps: 2}\n", r"malformed YAML: found character '\\t'"),
    "variant-typo": (GOOD.replace("sdpa-elementwise", "sdpa-elementwize"),
                     r"unknown variant 'sdpa-elementwize' \(did you mean 'sdpa-elementwise'\?\)"),
    "key-typo": (GOOD.replace("batch_size: 4", "bach_size: 4"),
                 r"unknown key 'train.bach_size' \(did you mean 'train.batch_size'\?\)"),
    "wrong-type": (GOOD.replace("steps: 2", "steps: two"),
                   r"train.steps: Input should be a valid integer.*'two'"),
    "negative-value": (GOOD.replace("batch_size: 4", "batch_size: -4"),
                       r"train.batch_size: Input should be greater than or equal to 1, got -4"),
    "zero-value": (GOOD.replace("seq_len: 32", "seq_len: 0"), r"data.seq_len: Input should be greater than"),
    "unequal-zip": (GOOD + "zip: [{train.lr: [1.0e-3, 2.0e-3], seed: [0]}]\n",
                    r"zip\[0\]: the lists of a zip group must have equal length"),
    "bad-include": (GOOD + "include: [{train.lrr: 0.1}]\n",
                    r"include\[0\]: unknown key 'train.lrr' \(did you mean 'train.lr'\?\)"),
    "missing-data": (GOOD.replace("train: [{kind: builtin, name: arithmetic}]",
                                  "train: [{kind: text, path: /no/such/file}]"),
                     r"data.train.0.path: no files match '/no/such/file'"),
    "impossible-seq_len": (GOOD.replace("seq_len: 32", "seq_len: 1000000000"),
                           r"data.train.0: the 'arithmetic' stream is cut at data.stream_tokens = 20000 "
                           r"tokens, fewer than data.seq_len \+ 1 = 1000000001"),
    "duplicate-keys": (GOOD + "name: again\n", r"malformed YAML: key 'name' appears twice"),
    "non-utf8": (b"name: caf\xe9\ngrid: {seed: [0]}\n", r"cannot read the grid file: 'utf-8' codec"),
    "empty-file": ("", r"a grid file is a mapping with at least 'name', got NoneType"),
    "a-directory": (None, r"cannot read the grid file: \[Errno 21\] Is a directory"),
    "list-top-level": ("- name: x\n- grid: {seed: [0]}\n",
                       r"a grid file is a mapping with at least 'name', got list"),
    "bad-preset": (GOOD.replace("preset: tiny", "preset: tinyy"),
                   r"unknown preset 'tinyy' \(did you mean 'tiny'"),
    "indivisible-heads": (GOOD.replace("preset: tiny}", "preset: tiny, n_kv_heads: 3}"),
                          r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    "axis-not-a-list": (GOOD.replace("variant: ['baseline', 'sdpa-elementwise']", "variant: baseline"),
                        r"grid.variant: Input should be a valid list, got 'baseline'"),
    "unknown-task-source": (GOOD.replace("train: [{kind: builtin, name: arithmetic}]",
                                         "train: [{kind: task, name: mqr}]"),
                            r"data.train.0.name: unknown benchmark task 'mqr' \(did you mean 'mqar'\?\)"),
    "seed-true": (tiny_grid("bad-input", steps=2, seeds=[True]),
                  r"grid: seed: Input should be a valid integer, not a boolean, got True"),
    "a-fingerprint-given": (GOOD.replace("train: [{kind: builtin, name: arithmetic}]",
                                         "train: [{kind: builtin, name: arithmetic, fingerprint: 0123abcd}]"),
                            r"base: data.train.0.fingerprint is filled by ablate from what the run reads"),
    # tokenizers (#25): caught before any worker starts, as a bad data path is
    "tokenizer-wrong-case": (_grid(rest="").replace("seq_len: 32", "seq_len: 32\n    tokenizer: BPE"),
                             r"data.tokenizer: unknown tokenizer 'BPE' \(did you mean 'bpe'\?\); allowed: "
                             r"'byte', 'bpe', 'hf:<name>'"),
    "bpe-beyond-the-models-vocabulary": (
        GOOD.replace("preset: tiny}", "preset: tiny, vocab_size: 320}").replace(
            "seq_len: 32", "seq_len: 32\n    tokenizer: bpe\n    bpe_vocab_size: 1000"),
        r"model.vocab_size: tokenizer 'bpe' has up to 1000 ids but model.vocab_size is 320; set "
        r"model.vocab_size >= 1000 \(1024 is a multiple of 64\)"),
    "hf-tokenizer-not-here": (GOOD.replace("seq_len: 32",
                                           "seq_len: 32\n    tokenizer: 'hf:ablate-tests/not-here'"),
                              r"data.tokenizer: tokenizer 'ablate-tests/not-here' is not available locally "
                              r"\(nothing is downloaded"),
    "task-length-too-short": (GOOD.replace("train: [{kind: builtin, name: arithmetic}]",
                                           "train: [{kind: task, name: 'niah-single@48,256'}]"),
                              r"data.train.0.name: length 48 is too short for task 'niah-single': it needs "
                              r"at least"),
}


@pytest.mark.parametrize("case", CORPUS, ids=list(CORPUS))
def test_a_broken_grid_through_ablate_run(case: str, tmp_path: Path) -> None:
    content, pattern = CORPUS[case]
    path = tmp_path / "grid.yaml"
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    home = tmp_path / "home"
    result = run(str(path), home=home)
    assert_refused(result, pattern)
    assert str(path) in result.stderr
    assert_nothing_recorded(home)


@pytest.mark.parametrize("case", ["tokenizer-wrong-case", "bpe-beyond-the-models-vocabulary",
                                  "hf-tokenizer-not-here"])
def test_a_tokenizer_that_cannot_work_is_refused_by_plan_too(case: str, tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(CORPUS[case][0])
    home = tmp_path / "home"
    result = runner.invoke(app, ["plan", str(path), "--home", str(home)])
    # a cluster's grid plans where its tokenizer is not: the line as a warning
    if case == "hf-tokenizer-not-here":
        assert result.exit_code == 0 and re.search(CORPUS[case][1], result.stderr)
        assert "`ablate run` stops here" in result.stderr
    else:
        assert_refused(result, CORPUS[case][1])
    assert_nothing_recorded(home)


def test_a_grid_without_model_vocab_size_takes_it_from_the_tokenizer(monkeypatch) -> None:  # noqa: ANN001
    from ablate.grid import expand, parse_grid
    expand_module = sys.modules["ablate.grid.expand"]  # the module (the package's name is the function)

    bpe = GOOD.replace("seq_len: 32", "seq_len: 32\n    tokenizer: bpe\n    bpe_vocab_size: 1000")
    (taken,) = {p.config.model.vocab_size for p in expand(parse_grid(bpe))}
    assert taken == 1024  # padded to a multiple of 64, and recorded in the config: the same run as setting it
    given = expand(parse_grid(bpe.replace("preset: tiny}", "preset: tiny, vocab_size: 1024}")))
    assert [p.run_id for p in expand(parse_grid(bpe))] == [p.run_id for p in given]
    # a grid whose model holds its tokenizer (or that sets model.vocab_size) keeps its vocabulary and its ids
    held = [GOOD, GOOD.replace("seq_len: 32", "seq_len: 32\n    tokenizer: bpe\n    bpe_vocab_size: 300"),
            bpe.replace("preset: tiny}", "preset: tiny, vocab_size: 2048}"), "name: paper\nbase: {model: "
            "{preset: paper-dense-1.7b}}\ngrid: {variant: [baseline]}\n"]
    now = [[(p.run_id, p.config.model.vocab_size) for p in expand(parse_grid(text))] for text in held]
    monkeypatch.setattr(expand_module, "vocab_from_tokenizer", lambda raw: raw)  # as before the rule
    assert now == [[(p.run_id, p.config.model.vocab_size) for p in expand(parse_grid(text))] for text in held]


def test_data_too_short_for_seq_len_is_found_before_training(tmp_path: Path) -> None:
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("x" * 20)
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD.replace("train: [{kind: builtin, name: arithmetic}]",
                                 f"train: [{{kind: text, path: '{corpus}'}}]"))
    home = tmp_path / "home"
    assert_refused(run(str(grid), home=home), r"data.train.0: '.*tiny.txt' \(1 file\) holds 21 tokens, fewer "
                                              r"than data.seq_len \+ 1 = 33 .*use a smaller data.seq_len or "
                                              r"more data")
    assert_nothing_recorded(home)
    # plan says the same, as a warning: planning a cluster's grid where its data is not is fine
    out = runner.invoke(app, ["plan", str(grid), "--home", str(home)])
    assert out.exit_code == 0 and "holds 21 tokens" in out.stderr and "`ablate run` stops here" in out.stderr


def test_a_grid_name_the_store_holds_with_another_base_is_refused_unless_appended(tmp_path: Path) -> None:
    from ablate.grid import expand, parse_grid
    from ablate.result import RunResult
    from ablate.store import Store

    home = tmp_path / "home"
    first = tiny_grid("same-name", variants=["baseline"], steps=2)
    with Store.open(f"sqlite:///{home / 'ablate.db'}") as store:  # the grid ran before
        (done,) = expand(parse_grid(first))
        store.register_grid(name="same-name", text=first, runs=[done])
        store.ingest(RunResult(run_id=done.run_id, config=done.config.model_dump(mode="json"), status="done"))
    other = tmp_path / "other.yaml"
    other.write_text(first.replace("batch_size: 4", "batch_size: 2"))  # another study, the same name
    assert_refused(run(str(other), home=home),
                   rf"{other}: the store .* already holds a grid named 'same-name' with another base \("
                   r"train.batch_size: 4 there, 2 here\): give this grid its own name, or pass --append")
    with Store.open(f"sqlite:///{home / 'ablate.db'}") as store:  # nothing written
        assert store.grid_text("same-name") == first and len(store.runs_frame()) == 1
    edited = tmp_path / "edited.yaml"
    edited.write_text(first + "# the same base, written again\n")  # the same study: its run is done
    assert run(str(edited), home=home).exit_code == 0
    appended = run(str(other), "--append", home=home)
    assert appended.exit_code == 0 and "1 to run" in appended.output, appended.output
    # one study: the first run stays in it, older
    with Store.open(f"sqlite:///{home / 'ablate.db'}") as store:
        (grid,) = store.status_summary("same-name")["grids"]
        assert (grid["done"], grid["older"], len(store.runs_frame(grid="same-name"))) == (1, 1, 2)


def test_yaml_merge_keys_and_a_defs_section_are_accepted(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("""
name: merged
defs:
  arith: &arith {kind: builtin, name: arithmetic}
  short: &short {steps: 2, batch_size: 4, checkpoint_every: 10}
base:
  model: {preset: tiny}
  data: {seq_len: 32, stream_tokens: 20000, train: [*arith], heldout: {arith: *arith}}
  train:
    <<: *short
    steps: 3
  eval: {heldout_tokens: 256, probe_tokens: 128}
""")
    out = run(str(grid), home=tmp_path / "home")
    assert out.exit_code == 0, out.output
    plan = runner.invoke(app, ["plan", str(grid), "--format", "json", "--home", str(tmp_path / "home")])
    (only,) = json.loads(plan.stdout)["runs"]
    assert only["status"] == "done" and only["tokens"] == 3 * 4 * 32  # the written steps win over the merged
    twice = grid.read_text().replace("    steps: 3\n", "    steps: 3\n    steps: 4\n")
    grid.write_text(twice)
    assert_refused(run(str(grid), home=tmp_path / "h2"),
                   r"line \d+: malformed YAML: key 'steps' appears twice")


# ---------------------------------------------------------------------------------------------------- homes,
# stores
def test_a_home_that_is_a_file(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    home = tmp_path / "home"
    home.write_text("not a directory")
    assert_refused(run(str(grid), home=home), r"ABLATE_HOME .*home is a file, not a directory")
    out = runner.invoke(app, ["runs", "--home", str(home)])
    assert_refused(out, r"cannot open the store .*: the store's folder .*home is not a directory")
    assert home.read_text() == "not a directory"


@pytest.fixture
def read_only_dir(tmp_path: Path):  # noqa: ANN201
    """A real read-only directory: permissions for a user; for root (whom permissions do not stop), a
    read-only bind mount of it."""
    path = tmp_path / "ro"
    path.mkdir()
    yield from _read_only(path)


def _read_only(path: Path):  # noqa: ANN202
    """Make the directory ``path`` read-only while the generator is suspended (see ``read_only_dir``)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mount = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"root cannot make a read-only directory here (no mount): {mount.stderr.strip()}")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_store_in_a_read_only_folder_is_one_line(read_only_dir: Path, tmp_path: Path) -> None:
    """ABLATE_STORE pointing into a read-only folder: a new store cannot be made there (it was a 50-70-line
    traceback, exit 1, from the lock beside the store); one line, exit 2, nothing written anywhere."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    home = tmp_path / "home"
    url = f"sqlite:///{read_only_dir / 'ablate.db'}"
    assert_refused(run(str(grid), home=home, env={"ABLATE_STORE": url}),
                   rf"cannot open the store {re.escape(url)}: its folder .*ro cannot be written \((Read-only "
                   r"file system|Permission denied)\); point ABLATE_STORE \(or --store\) at a folder ablate "
                   "can write")
    assert not home.exists() and list(read_only_dir.iterdir()) == []


def test_an_existing_store_in_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    """A store made before its folder became read-only: SQLite cannot keep its journal beside it, so it cannot
    be opened to write, nor to read; one line says why (the folder), exit 2."""
    folder = tmp_path / "stores"
    url = f"sqlite:///{folder / 'ablate.db'}"
    Store.open(url).close()
    before = sorted(p.name for p in folder.iterdir())
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    for _ in _read_only(folder):
        why = r"cannot be written: SQLite keeps its journal beside the store\)"
        assert_refused(run(str(grid), home=tmp_path / "home", store=url), why)
        assert_refused(runner.invoke(app, ["status", "--store", url]), why)
    assert sorted(p.name for p in folder.iterdir()) == before and not (tmp_path / "home").exists()


def test_a_read_only_home_with_a_writable_store(read_only_dir: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    store = f"sqlite:///{tmp_path / 'writable' / 'ablate.db'}"
    assert_refused(run(str(grid), home=read_only_dir, store=store),
                   r"ABLATE_HOME .*ro cannot hold run directories \(.*ro/runs: Read-only file "
                   r"system|Permission")
    assert not (tmp_path / "writable").exists() and list(read_only_dir.iterdir()) == []


@pytest.mark.parametrize("url, pattern", [
    ("mysql://user@localhost/ablate", r"unsupported store 'mysql://user@localhost/ablate': ablate's store "
                                      r"runs on sqlite and postgresql"),
    ("postgresql+pg8000://user@localhost/ablate",
     r"needs the database driver pg8000, which is not installed"),
    ("postgresql+nosuch://user@localhost/ablate", r"unknown database driver 'nosuch' in 'postgresql\+nosuch://"),
    ("sqlite+nosuch:///x/ablate.db",
     r"unknown database driver 'nosuch' in 'sqlite\+nosuch:///x/ablate.db \(here /.+/x/ablate.db\)'"),
    ("sqlite://tmp/x/y.db", r"'sqlite://tmp/x/y.db' is not a SQLite file: a SQLite URL has no host, and this "
                            r"one names 'tmp'; for the relative path x/y.db \(here .*/cwd/x/y.db\) write "
                            r"sqlite:///x/y.db, for the absolute path /tmp/x/y.db write sqlite:////tmp/x/y.db"),
    ("postgresql+psycopg://postgres@127.0.0.1:9/ablate", r"cannot open the store "
                                                        r"postgresql\+psycopg://.*:9/ablate: "
                                                        r".*(refused|connect)"),
    ("not a url", r"not a database URL: 'not a url'"),
    ("postgres://me:pw@db.lab/runs", r"unsupported store 'postgres://me:\*\*\*@db.lab/runs': write "
                                     r"postgresql\+psycopg://me:\*\*\*@db.lab/runs \(SQLAlchemy's name for "
                                     r"PostgreSQL"),
], ids=["mysql", "missing-driver", "unknown-driver", "unknown-sqlite-driver", "sqlite-with-a-host",
        "unreachable", "not-a-url", "postgres-scheme"])
def test_a_store_that_cannot_be_opened(url: str, pattern: str, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Every command refuses it in one line; nothing is left behind: no home, no runs folder, no store folder
    (``sqlite://tmp/x/y.db`` once made ./x/, a bad driver name an empty $ABLATE_HOME/runs/)."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    home = tmp_path / "home"
    assert_refused(run(str(grid), home=home, store=url), pattern)
    for cmd in (["runs"], ["status"], ["plan", str(grid)], ["db", "upgrade"]):
        assert_refused(runner.invoke(app, [*cmd, "--store", url, "--home", str(home)]), pattern)
    assert not home.exists() and list(cwd.iterdir()) == []


# ---------------------------------------------------------------------------------------------------- silent
# no-ops
def test_set_on_a_grid_axis_is_an_error(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD)
    for cmd in ("run", "plan"):
        out = runner.invoke(app, [cmd, str(grid), "--set", "variant=baseline", "--home", str(tmp_path / "h")])
        assert_refused(out, r"--set: variant is a grid axis \(in grid of .*grid.yaml\), so --set "
                            r"variant=\.\.\. would change nothing; use --where or edit the grid")
    assert not (tmp_path / "h").exists()


def test_an_exclude_that_removes_every_run_is_an_error(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GOOD + "exclude: [{train.steps: 2}]\n")
    assert_refused(run(str(grid), home=tmp_path / "h"),
                   r"exclude: exclude removes every run of the grid \(all 2\)")
    assert_nothing_recorded(tmp_path / "h")


def test_a_bare_name_in_where_must_be_a_boolean_column(store) -> None:  # noqa: ANN001
    from store_data import planned, result

    from ablate.errors import UserInputError

    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(3)])
    store.ingest(result(0))
    assert len(store.runs_frame(where="model.qk_norm")) == 3  # a true/false field: fine
    assert len(store.runs_frame(where="not model.sandwich_norm")) == 3
    for name in ("variant", "val_ppl", "ppl/code", "model.gate"):
        with pytest.raises(UserInputError,
                           match=rf"{re.escape(name)!s}' alone is not a condition .* compare it"):
            store.runs_frame(where=name)


def test_a_seq_len_beyond_the_builtin_corpora(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    # the default corpora: the stdlib's files
    grid.write_text("name: big\nbase: {data: {seq_len: 100000000}}\n")
    assert_refused(run(str(grid), home=tmp_path / "h"),
                   r"data.train.0: the train split of 'python-docs' holds at most \d+ tokens, fewer than "
                   r"data.seq_len \+ 1 = 100000001")
    assert_nothing_recorded(tmp_path / "h")
