"""``ablate eval``: lm-evaluation-harness scores of finished runs, offline, stored as ``bench/<task>`` columns
of a real store; a rerun scores only what is missing; bad input is one line with exit 2. The expected accuracy
is computed here from the model's own forward pass, not from lm-eval."""

from __future__ import annotations

import json

import pytest
import torch
from export_runs import make_run
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import StoreError

SUMMARY = {"steps": 300, "train_loss": 1.5, "val_ppl": 4.5}
TOY = [{"q": "1 + 1 =", "choices": [" 2", " 3"], "label": 0},
       {"q": "2 + 2 =", "choices": [" 5", " 4"], "label": 1}]


def _logprob(model, tok, context: str, continuation: str) -> float:
    ids = tok.encode(context + continuation)  # byte tokenizer: the ids of the parts, joined
    with torch.no_grad():
        logp = model(torch.tensor([ids[:-1]])).logits[0].log_softmax(-1)
    return sum(float(logp[i - 1, ids[i]]) for i in range(len(tok.encode(context)), len(ids)))


def _accuracy(model, docs) -> float:
    """Multiple-choice accuracy in %: the choice of highest loglikelihood after the prompt."""
    from ablate.runner.tokenizers import ByteTokenizer

    tok = ByteTokenizer()
    hits = [max(range(len(d["choices"])), key=lambda j: _logprob(model, tok, d["prompt"], d["choices"][j]))
            == d["label"] for d in docs]
    return 100.0 * sum(hits) / len(hits)


@pytest.fixture
def home_with_grid(tmp_path):
    """Two finished runs of grid 'g' (baseline, sdpa-elementwise) in a fresh home and its SQLite store."""
    from ablate.store import Store

    home = tmp_path / "home"
    url = f"sqlite:///{tmp_path / 'ablate.db'}"
    runs = [make_run(home, variant=v, summary=SUMMARY, data={"seq_len": 256}) for v in ("baseline",
                                                                                         "sdpa-elementwise")]
    with Store.open(url) as store:
        store.register_grid(name="g", text="name: g\n", runs=[
            {"run_id": rid, "config": cfg, "params": 1, "added_params": 0} for rid, _, cfg in runs])
        for rid, _, _ in runs:
            store.ingest(home / "runs" / rid)
    return home, url, {rid: model for rid, model, _ in runs}


def _eval(home, url, *args: str):
    res = CliRunner().invoke(app, ["eval", *args, "--home", str(home), "--store", url, "--format", "json"])
    return res, (json.loads(res.stdout) if res.exit_code in (0, 1) and res.stdout.strip() else None)


def _runs(home, url) -> dict[str, dict]:
    res = CliRunner().invoke(app, ["runs", "--home", str(home), "--store", url, "--format", "json"])
    assert res.exit_code == 0, res.output
    return {r["run_id"]: r for r in json.loads(res.stdout)}


def test_eval_stores_lm_eval_scores_and_resumes(home_with_grid, tmp_path, monkeypatch):
    home, url, models = home_with_grid
    from ablate.runner.lm_eval_tasks import utils

    res, out = _eval(home, url, "--grid", "g", "--tasks", "ablate_mqar,ablate_niah_single", "--limit", "4")
    assert res.exit_code == 0, res.output
    assert {r["run_id"] for r in out} == set(models) and all(r["error"] is None for r in out)
    docs = list(utils.mqar(n=4)["test"])
    rows = _runs(home, url)
    for r in out:
        assert r["scored"] == ["ablate_mqar", "ablate_niah_single"]
        assert r["scores"]["bench/ablate_mqar"] == pytest.approx(_accuracy(models[r["run_id"]], docs))
        assert 0.0 <= r["scores"]["bench/ablate_niah_single"] <= 100.0
        for key, value in r["scores"].items():  # the store's runs table shows them as columns
            assert rows[r["run_id"]][key] == pytest.approx(value)
        summary = json.loads((home / "runs" / r["run_id"] / "result.json").read_text())["summary"]
        assert summary["bench/ablate_mqar"] == pytest.approx(r["scores"]["bench/ablate_mqar"])
        held = json.loads((home / "runs" / r["run_id"] / "lm_eval.json").read_text())["tasks"]
        assert (
            held["ablate_mqar"]["limit"] == 4
            and held["ablate_mqar"]["n-samples"]["ablate_mqar"]["effective"] == 4
        )

    # a rerun scores nothing; a new task (a user's YAML) is the only one scored
    (tmp_path / "mine" / "toy.jsonl").parent.mkdir()
    (tmp_path / "mine" / "toy.jsonl").write_text("".join(json.dumps({**d,
                                                                     "prompt": d["q"]}) + "\n" for d in TOY))
    (tmp_path / "mine" / "toy.yaml").write_text(
        "task: my_toy\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{tmp_path / 'mine' / 'toy.jsonl'}\n  cache_dir: {tmp_path / 'hf'}\ntest_split: test\noutput_type: "
        f"multiple_choice\ndoc_to_text: '{{{{q}}}}'\ndoc_to_target: label\ndoc_to_choice: "
        "choices\ntarget_delimiter: ''\nmetric_list:\n  - metric: acc\n")
    res, again = _eval(home, url, "--grid", "g", "--tasks", "ablate_mqar,ablate_niah_single,my_toy",
                       "--limit", "4", "--include-path", str(tmp_path / "mine"))
    assert res.exit_code == 0, res.output
    for before, now in zip(out, again, strict=True):
        assert now["scored"] == ["my_toy"]
        assert {k: v for k, v in now["scores"].items() if k != "bench/my_toy"} == before["scores"]
        assert now["scores"]["bench/my_toy"] == pytest.approx(_accuracy(models[now["run_id"]], [
            {**d, "prompt": d["q"]} for d in TOY]))

    # a re-ingest of the run directories keeps the scores (they are in result.json)
    res = CliRunner().invoke(app, ["ingest", *[str(home / "runs" / r) for r in models], "--store", url])
    assert res.exit_code == 0, res.output
    rows = _runs(home, url)
    assert all(rows[r["run_id"]]["bench/my_toy"] == pytest.approx(r["scores"]["bench/my_toy"]) for r in again)


def test_a_run_that_cannot_be_scored_is_its_own_failure(home_with_grid, tmp_path, monkeypatch, capfd):
    """Also: runs named by their first characters; outside a git repository no stray ``fatal:`` line of git's
    (lm-eval asks git for the working directory's commit), and none of lm-eval's progress bars."""
    home, url, models = home_with_grid
    broken, fine = sorted(models)
    (home / "runs" / broken / "checkpoints" / "last.ckpt").unlink()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above it either
    res, out = _eval(home, url, broken[:6], fine[:6], "--tasks", "ablate_mqar", "--limit", "2")
    leaked = capfd.readouterr().err + res.stderr
    assert "fatal" not in leaked
    assert "%|" not in leaked and "it/s]" not in leaked, leaked  # no lm-eval progress bar: a line per run
    assert res.exit_code == 1
    by_id = {r["run_id"]: r for r in out}
    assert "no checkpoint" in by_id[broken]["error"] and by_id[fine]["error"] is None
    assert f"{broken}: failed: " in res.stderr and f"{fine}: scored ablate_mqar" in res.stderr
    assert _runs(home, url)[broken].get("bench/ablate_mqar") is None


@pytest.mark.parametrize("args,match", [
    (["--grid", "g", "--tasks", "ablate_mqr"],
     "unknown lm-eval task 'ablate_mqr' (did you mean 'ablate_mqar'?)"),
    (["RUN", "--tasks", "ablate_mqar", "--include-path", "/nonexistent"],
     "--include-path /nonexistent: not a dir"),
    (["zzz", "--tasks", "ablate_mqar"], "no run 'zzz' in the store"),
    (["--grid", "nope", "--tasks", "ablate_mqar"], "no grid 'nope' in the store"),
    (["--tasks", "ablate_mqar"], "give run ids or --grid NAME"),
    (["RUN"], "Missing option '--tasks'"),
], ids=["unknown-task", "missing-include-path", "unknown-run", "unknown-grid", "nothing-chosen", "no-tasks"])
def test_bad_input_is_one_line_and_exit_2(home_with_grid, args, match):
    home, url, models = home_with_grid
    args = [next(iter(models)) if a == "RUN" else a for a in args]
    res, _ = _eval(home, url, *args)
    assert res.exit_code == 2, res.output
    assert match in " ".join(res.output.split()) and "Traceback" not in res.output


def test_eval_refuses_unfinished_runs(home_with_grid):
    from ablate.store import Store

    home, url, models = home_with_grid
    rid = next(iter(models))
    with Store.open(url) as store:
        store.mark_running(run_id=rid, host="h", device="cpu")
    res, _ = _eval(home, url, rid, "--tasks", "ablate_mqar")
    assert res.exit_code == 2 and f"run {rid} is running; `ablate eval` scores finished runs" in res.output


def test_set_scores_upserts_and_keeps_the_others(store):
    from store_data import planned, result

    store.register_grid(name="g", text="name: g\n", runs=[planned(0)])
    store.ingest(result(0))
    store.set_scores(run_id="run000", scores={"bench/x": 50.0, "bench/arith": 0.9})
    store.set_scores(run_id="run000", scores={"bench/x": 75.0})
    row = store.runs_frame().iloc[0]
    assert row["bench/x"] == 75.0 and row["bench/arith"] == 0.9 and row["ppl/code"] == 8.0
    with pytest.raises(StoreError, match="no run 'nope' in the store"):
        store.set_scores(run_id="nope", scores={"bench/x": 1.0})
