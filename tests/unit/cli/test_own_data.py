"""docs/data.md's example, run as a user runs it: ``cd examples && ablate run own-data.yaml`` (JSON lines, a
BPE trained on them, a held-out file of its own), shortened to a few steps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_own_data_example_trains_on_jsonl_with_a_bpe_and_scores_its_heldout_file(tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES)  # its data paths are relative to examples/
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["run", "own-data.yaml", "--home", str(home), "--no-mlflow", "--jobs", "2",
                                   "--set", "train.steps=4", "--set", "eval.heldout_tokens=256",
                                   "--set", "eval.probe_tokens=64"])
    assert out.exit_code == 0, out.output
    runs = json.loads(CliRunner().invoke(app, ["runs", "--home", str(home), "--format", "json",
                                               "--grid", "own-data"]).stdout)
    assert len(runs) == 4 and {r["status"] for r in runs} == {"done"}
    assert {(r["variant"], r["seed"]) for r in runs} == {(v, s) for v in ("baseline", "sdpa-elementwise")
                                                          for s in (0, 1)}
    for r in runs:
        assert r["steps"] == 4 and r["data.tokenizer"] == "bpe" and math.isfinite(r["ppl/notes"]), r
        (source,) = json.loads(r["data.train"])
        assert source["kind"] == "jsonl" and source["path"].endswith("data/notes-train.jsonl"), source
    (bpe,) = (tmp_path / "cache" / "tokenizers").glob("bpe-*.json")  # one BPE, trained once for the 4 runs
    assert len(json.loads(bpe.read_text())["model"]["vocab"]) == 320
