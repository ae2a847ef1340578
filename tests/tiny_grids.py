"""Grid files for the end-to-end tests: the tiny preset on the synthetic arithmetic stream, a few seconds a
run."""

from __future__ import annotations

from collections.abc import Sequence


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
