"""Grid files for the end-to-end tests: the tiny preset on the synthetic arithmetic stream, a few seconds a
run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def tiny_grid(name: str, *, variants: Sequence[str] = ("baseline", "sdpa-elementwise"),
              seeds: Sequence[int] | None = None, steps: int = 60, checkpoint_every: int = 10,
              train_extra: str = "", extra: str = "") -> str:
    """A grid's YAML text; ``train_extra`` is appended inside ``train: {...}``, ``extra`` after the grid
    section."""
    seed_axis = f"\n  seed: {list(seeds)}" if seeds is not None else ""
    return f"""
name: {name}
base:
  model: {{preset: tiny}}
  data:
    seq_len: 32
    stream_tokens: 20000
    train: [{{kind: builtin, name: arithmetic}}]
    heldout: {{arith: {{kind: builtin, name: arithmetic}}}}
  train: {{steps: {steps}, batch_size: 4, checkpoint_every: {checkpoint_every}{train_extra}}}
  eval: {{heldout_tokens: 256, probe_tokens: 128}}
grid:
  variant: {list(variants)}{seed_axis}
{extra}"""


def train_and_probe(root: Path, name: str, variants: Sequence[str]) -> tuple[Any, Any]:
    """Train ``variants`` (one seed, 10 steps) through ``ablate run`` in a home under ``root``; the grid's
    runs (indexed by run id) and their probes, from the store."""
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.store import Store

    grid = root / f"{name}.yaml"
    grid.write_text(tiny_grid(name, variants=list(variants), steps=10, checkpoint_every=10))
    home = root / "home"
    result = CliRunner().invoke(app, ["run", str(grid), "--jobs", "2", "--home", str(home), "--no-mlflow"])
    assert result.exit_code == 0, result.output
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid=name).set_index("run_id")
        return runs, store.probes(run_ids=list(runs.index))
