"""The cost of the hot paths, guarded by counting their work (tests/work_counts.py), never by timing it: a
count is the same on every machine at any load. bench/grid_overhead.py prints the times.

- ``ablate plan`` of 1,000 and of 10,000 runs of one grid: each run is validated once and dumped twice (its
  id, the table or the JSON); every other validation, dump, parameter count, identity fill, ``match_params``
  and per-model cost happens once per distinct section, so it is the same for both grids.
- ``ablate status`` and ``ablate runs`` (every format) on a store of 1,000 and of 10,000 runs send the same
  number of SQL statements; ``ablate plan`` against that store sends a few per ``IN_CHUNK`` run ids.
- Reopening a finished grid (``ablate run`` with nothing to train) sends a few statements per ``IN_CHUNK``
  runs, not some per run.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner
from work_counts import Work, counting

from ablate.cli import app
from ablate.config import RunConfig
from ablate.grid import expand, load_grid
from ablate.result import RunResult
from ablate.store import Store
from ablate.store.chunks import IN_CHUNK

EXTRA = """  train.lr: [0.001, 0.002]
  train.batch_size: [4, 8]
  data.seq_len: [32, 64]
  eval.probes: [true, false]
exclude:
  - {variant: baseline, train.lr: 0.002}
match_params: baseline
"""


def grid_text(name: str, seeds: int) -> str:
    """A grid of 24 runs a seed, with the parts of a grid that cost per run: axes, an exclude, match_params, a
    held-out set that ablate fingerprints (python-docs)."""
    return tiny_grid(name, seeds=range(seeds), extra=EXTRA).replace(
        "heldout: {arith: {kind: builtin, name: arithmetic}}",
        "heldout: {arith: {kind: builtin, name: arithmetic}, docs: {kind: builtin, name: python-docs}}")


PER_SEED = 24  # 2 variants x 2 lrs x 2 batches x 2 lengths x 2 probes = 32, less the 8 the exclude drops


def _grid(tmp_path: Path, runs: int) -> Path:
    path = tmp_path / f"g{runs}.yaml"
    path.write_text(grid_text(f"g{runs}", math.ceil(runs / PER_SEED)))
    return path


def _plan(tmp_path: Path, path: Path, *args: str) -> Work:
    import importlib

    from ablate.grid import identity, ids, view

    expand_module = importlib.import_module("ablate.grid.expand")  # the package exports the function

    with counting() as work:
        for module, name in ((ids, "_revalidated"), (identity, "fill"), (expand_module, "_match"),
                             (view, "compute"), (view, "memory")):
            work.spy(module, name)
        out = CliRunner().invoke(app, ["plan", str(path), "--home", str(tmp_path / "home"), *args])
    assert out.exit_code == 0, out.output
    return work


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_planning_ten_times_the_runs_does_each_sections_work_once(tmp_path, fmt):
    small, large = _grid(tmp_path, 1_000), _grid(tmp_path, 10_000)
    first = _plan(tmp_path, small, "--format", fmt)  # and what a process does once (its caches)
    one = _plan(tmp_path, small, "--format", fmt)
    ten = _plan(tmp_path, large, "--format", fmt)
    runs = len(expand(load_grid(large))) - len(expand(load_grid(small)))  # the runs added
    product = runs * 32 // PER_SEED  # each run of the product is validated, the ones exclude drops too
    grown = ten.grown(one)
    assert grown == {**dict.fromkeys(grown, 0), "validate RunConfig": product,
                     "dump RunConfig": product + runs}
    assert one["count params"] >= 2 and one["fill"] >= 2 and one["compute"] >= 4  # counted: the spies work
    assert first["validate ModelConfig"] > 0


def _store(root: Path, runs: int) -> tuple[str, Path]:
    """A store of ``runs`` runs of one grid (the plan of ``_grid``): a tenth done with curves, scores and
    probes, a hundredth running, the rest queued."""
    grid = _grid(root, runs)
    planned = expand(load_grid(grid))
    home = root / f"home{runs}"
    url = f"sqlite:///{home / 'ablate.db'}"
    with Store.open(url) as store:
        store.register_grid(name=f"g{runs}", text=grid.read_text(), runs=planned)
        for i, run in enumerate(planned):
            if i % 10 == 0:
                store.ingest(RunResult(
                    run_id=run.run_id, config=run.config.model_dump(mode="json"), status="done",
                    summary={"steps": 5, "train_loss": 2.0 + i / 1e4, "ppl/arith": 3.0, "gate_score": 0.2},
                    metrics={"step": list(range(5)), "loss": [3.0, 2.8, 2.5, 2.2, 2.0]},
                    probes={"gate_score": [0.2, 0.3]}))
            elif i % 100 == 1:
                store.mark_running(run_id=run.run_id, host="elsewhere", device="cpu")
                store.record_progress({run.run_id: [{"step": 1, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.0,
                                                     "tokens_per_s": 1000.0}]})
    return url, grid


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    return {runs: _store(root, runs) for runs in (1_000, 10_000)}


READS = [
    ["status"], ["status", "--format", "json"], ["status", "--older"],
    ["runs"], ["runs", "--format", "csv"], ["runs", "--format", "json"], ["runs", "--format", "markdown"],
    ["runs", "--where", "train.lr >= 0.002"], ["runs", "--all"],
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a) for a in READS])
def test_reading_ten_times_the_runs_sends_the_same_statements(stores, tmp_path, args):
    counts = {}
    for runs, (url, _) in stores.items():
        with counting() as work:
            out = CliRunner().invoke(app, [*args, "--store", url, "--home", str(tmp_path)])
        assert out.exit_code == 0, out.output
        counts[runs] = work["sql"]
    assert counts[1_000] == counts[10_000] and 0 < counts[1_000] <= 30, counts


def test_planning_against_a_store_sends_a_few_statements_per_chunk(stores, tmp_path):
    for runs, (url, grid) in stores.items():
        with counting() as work:
            out = CliRunner().invoke(app, ["plan", str(grid), "--store", url, "--home", str(tmp_path),
                                           "--format", "json"])
        assert out.exit_code == 0, out.output
        assert '"status": "done"' in out.stdout and '"status": "running"' in out.stdout
        chunks = math.ceil(runs / IN_CHUNK)
        assert work["sql"] <= 3 * chunks + 10, (runs, work["sql"])


def test_a_grid_with_nothing_to_train_opens_with_a_few_statements_per_chunk(tmp_path):
    from ablate.execute.opening import open_grid

    counts = {}
    for n in (PER_SEED * 5, PER_SEED * 50):
        home = tmp_path / f"home{n}"
        path = tmp_path / f"g{n}.yaml"
        path.write_text(grid_text(f"g{n}", n // PER_SEED))
        runs = expand(load_grid(path))
        with Store.open(home=home) as store:
            store.register_grid(name=f"g{n}", text=path.read_text(), runs=runs)
            for run in runs:
                config = run.config.model_dump(mode="json")
                store.ingest(RunResult(run_id=run.run_id, config=config, status="done",
                                       summary={"steps": 5, "train_loss": 2.0}))
        with counting() as work:
            opened = open_grid(path, [], home=home, store=None, retry_failed=False, stale_after_s=300)
            opened.store.close()
        assert not opened.todo and len(opened.skipped) == n
        counts[n] = (work["sql"], math.ceil(n / IN_CHUNK))
    (small, small_chunks), (large, large_chunks) = counts.values()
    assert large - small <= 6 * (large_chunks - small_chunks), counts


def test_the_counts_see_a_run_config_validated_per_run():  # the guard itself: it would see a regression
    with counting() as work:
        for seed in range(5):
            RunConfig.model_validate({"seed": seed}).model_dump(mode="json")
    assert work["validate RunConfig"] == 5 and work["dump RunConfig"] == 5


def test_a_long_runs_table_prints_plain_columns(stores, tmp_path):
    url, grid = stores[1_000]
    runs = len(expand(load_grid(grid)))
    out = CliRunner().invoke(app, ["runs", "--store", url, "--home", str(tmp_path)])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == f"runs: {runs}" and len(lines) == 3 + runs and "│" not in out.stdout
    assert lines[1].split()[:3] == ["run_id", "grid", "variant"]
    done = [line for line in lines[3:] if " done " in line]
    assert len(done) == math.ceil(runs / 10)  # every tenth run is done


def test_registering_a_grid_again_reads_only_the_seeds_it_grew(tmp_path):
    """A grid's file registered again keeps its grown seeds current (records.other_seeds); the runs of its
    older configurations (here 10 seeds at other steps) are told apart by their columns, with no config
    validated: only the grown seeds and the file's runs in their cells are."""

    def planned(seeds: range, steps: int = 60) -> list:
        path = tmp_path / f"g{steps}-{len(seeds)}.yaml"
        path.write_text(tiny_grid("g", seeds=seeds, steps=steps, extra=EXTRA))
        return expand(load_grid(path))

    runs, older = planned(range(2)), planned(range(10), steps=30)
    grown = [r for r in planned(range(4)) if r.config.seed >= 2]
    assert len(runs) == len(grown) == 2 * PER_SEED and len(older) == 10 * PER_SEED
    with Store.open(home=tmp_path / "home") as store:
        store.register_grid(name="g", text="g", runs=older)
        store.register_grid(name="g", text="g", runs=runs)
        store.register_grid(name="g", text="g", runs=grown, whole=False)  # what --until-resolved adds
        with counting() as work:
            store.register_grid(name="g", text="g", runs=runs)  # the file again
        current = store.runs_frame(grid="g", current=True)
        assert store.older_runs("g") == len(older) and len(current) == len(runs) + len(grown)
    assert work["validate RunConfig"] == len(grown) + len(runs)


# ------------------------------------------------------------ a grid of many seeds (issue 42: 100,000)
def _seeds_grid(tmp_path: Path, seeds: int) -> Path:
    path = tmp_path / f"s{seeds}.yaml"
    path.write_text(tiny_grid(f"s{seeds}", variants=["baseline"], seeds=range(seeds)))
    return path


def _run_until_asked(tmp_path: Path, seeds: int) -> Work:
    """``ablate run`` of a grid of ``seeds`` seeds up to its large-grid question, refused without a terminal:
    the planning of ``ablate run`` (expansion, the memory check, the estimate), nothing written."""
    with counting() as work:
        out = CliRunner().invoke(app, ["run", str(_seeds_grid(tmp_path, seeds)), "--home",
                                       str(tmp_path / "h"), "--no-mlflow"])
    assert out.exit_code == 2 and "only with --yes" in out.stderr, out.output
    assert not (tmp_path / "h").exists()
    return work


def test_planning_ten_times_the_seeds_does_ten_times_the_work_of_a_run(tmp_path):
    """A grid of 100,000 seeds plans in time linear in its runs: from 1,200 to 12,000 seeds, each added run is
    validated once and dumped once (its id, its sections' keys); its memory check and estimate are worked out
    per distinct model, and nothing else grows."""
    _run_until_asked(tmp_path, 1_200)  # what a process does once (its caches)
    small = _run_until_asked(tmp_path, 1_200)
    large = _run_until_asked(tmp_path, 12_000)
    added = 12_000 - 1_200
    grown = large.grown(small)
    assert grown == {**dict.fromkeys(grown, 0), "validate RunConfig": added, "dump RunConfig": added}, grown
    assert small["validate RunConfig"] == 1_200 and small["sql"] == 0  # no store yet: none read or made


def test_registering_ten_times_the_seeds_sends_a_few_statements_per_chunk(tmp_path):
    """The registration of a new grid (one transaction) writes its runs in batches: the statements grow with
    the batches of ``IN_CHUNK`` runs, not with the runs."""
    from ablate.execute.opening import open_grid

    counts = {}
    for seeds in (1_200, 12_000):
        with counting() as work:
            opened = open_grid(_seeds_grid(tmp_path, seeds), [], home=tmp_path / f"h{seeds}", store=None,
                               retry_failed=False, stale_after_s=300)
            opened.store.close()
        assert len(opened.todo) == seeds
        counts[seeds] = (work["sql"], math.ceil(seeds / IN_CHUNK))
    (small, small_chunks), (large, large_chunks) = counts.values()
    assert 0 < large - small <= 6 * (large_chunks - small_chunks), counts


def test_registering_a_grid_holds_one_batch_of_rows_at_a_time(tmp_path, monkeypatch):
    """A run's store row (its config and flattened config: ~17 KB) is made when its batch is written, so the
    registration's memory does not grow with the runs: 100,000 rows at once held 1.7 GB. Measured by
    tracemalloc (exact for Python's allocations): four times the runs may add only the run ids it is given."""
    import tracemalloc

    from ablate.store import registration

    monkeypatch.setattr(registration, "CHUNK", 100)
    peaks = {}
    for seeds in (200, 1_000, 4_000):  # the first: what a process does once (SQLAlchemy's caches)
        runs = expand(load_grid(_seeds_grid(tmp_path, seeds)))
        with Store.open(f"sqlite:///{tmp_path / f'r{seeds}.db'}") as store:
            tracemalloc.start()
            try:
                store.register_grid(name="g", text="g", runs=runs)
                peaks[seeds] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert peaks[4_000] - peaks[1_000] < 1_000 * 3_000, peaks  # under 1 KB a run added (a row: ~17 KB)
