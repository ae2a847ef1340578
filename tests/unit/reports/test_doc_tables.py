"""docs/results.md's measured tables are generated (``bench/doc_tables.py``) from stored results
(``docs/measured/<grid>.json``): the docs hold what the JSON renders to, the JSON's runs are the shipped
study's runs (the same content-addressed ids), and one stored run trained again here reproduces its stored
number."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _doc_tables():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "bench" / "doc_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_tables"] = module
    spec.loader.exec_module(module)
    return module


doc_tables = _doc_tables()
GRIDS = sorted(p.stem for p in (ROOT / "docs" / "measured").glob("*.json"))


def test_every_measured_table_of_the_docs_is_its_json_rendered():
    shown = doc_tables.blocks(doc_tables.DOC.read_text())
    assert sorted(shown) == GRIDS and GRIDS  # a table for each JSON, a JSON for each table
    for grid in GRIDS:
        assert shown[grid] == doc_tables.render(doc_tables.load(grid)), (
            f"docs/results.md's {grid} table is not docs/measured/{grid}.json's: bench/doc_tables.py write")
    assert doc_tables.main(["check"]) == 0


def test_a_changed_number_is_caught():
    data = doc_tables.load("quickstart")
    data["runs"][0]["val_ppl"] += 0.01
    text = doc_tables.DOC.read_text()
    assert doc_tables.blocks(text)["quickstart"] != doc_tables.render(data)


@pytest.mark.parametrize("grid", GRIDS)
def test_the_stored_runs_are_the_shipped_studys(grid):
    """Each stored run is a run of the study as it ships today (its id is its content: a changed default, data
    or arm would give it another id, and its number would no longer be the study's)."""
    from ablate.grid import expand, load_grid
    from ablate.studies import resolve

    planned = {p.run_id: p for p in expand(load_grid(resolve(grid)))}
    runs = doc_tables.load(grid)["runs"]
    assert sorted(r["run_id"] for r in runs) == sorted(planned)
    for r in runs:
        config = planned[r["run_id"]].config
        assert (r["variant"], r["seed"]) == (config.variant, config.seed)


@pytest.mark.slow
def test_one_stored_run_trained_again_reproduces_its_number(tmp_path, monkeypatch):
    """The quick start's G1 at seed 0 (300 steps of the tiny model, about a minute on one thread), trained
    again from its stored config. Its first losses equal the stored ones on any machine (to 1e-5: another
    CPU's kernels round differently, which steps 0-20 leave below 1e-6 and a changed data, init, model or
    optimizer would not); on a machine like the one that measured it (the same CPU and torch kernels), its
    perplexity is the stored one exactly: training is deterministic there, so a number that moved is a change
    to explain (a fused projection's backward rounding differently moved this one by 0.1 PPL)."""
    import torch

    from ablate.config import RunConfig
    from ablate.runner import run_one

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    data = doc_tables.load("quickstart")
    (stored,) = [r for r in data["runs"] if (r["variant"], r["seed"]) == ("sdpa-elementwise", 0)]
    config = RunConfig.model_validate(stored["config"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a worker of `ablate run --jobs 2` on 2 cores trained it
    try:
        result = run_one(config, tmp_path / "run", run_id=stored["run_id"])
    finally:
        torch.set_num_threads(threads)
    assert result.status == "done"
    head = result.metrics["loss"][:len(stored["loss_head"])]
    assert head == pytest.approx(stored["loss_head"], rel=1e-5)
    here, there = doc_tables.machine(), data["measured"]["machine"]
    if (here["cpu"], here["kernels"]) != (there["cpu"], there["kernels"]):
        pytest.skip(f"perplexity not compared: measured on {there['cpu']} with torch's {there['kernels']} "
                    f"kernels, this is {here['cpu']} with {here['kernels']} (its first losses matched)")
    assert result.summary["val_ppl"] == stored["val_ppl"]
