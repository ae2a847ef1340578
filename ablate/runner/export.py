"""``ablate export``: a run directory's checkpoint as a Hugging Face folder, with its tokenizer where it has one."""

from __future__ import annotations

import os
from pathlib import Path

from ablate import layout
from ablate.errors import UserInputError, did_you_mean, one_of


def export_run(home: str | os.PathLike[str], run_id: str, out: str | os.PathLike[str], *, fmt: str = "hf") -> str:
    """Export run ``run_id`` of ``home`` into ``out`` (``fmt``: hf); return a note on what was written beside
    the weights."""
    from ablate.ablations import apply_variant
    from ablate.ablations.export import export_hf
    from ablate.runner.checkpoints import load_run_model

    if fmt != "hf":
        raise UserInputError(one_of(fmt, ["hf"], what="export format"))
    run_dir = layout.run_dir(home, run_id)
    if not run_dir.is_dir():
        parent = run_dir.parent
        known = [p.name for p in parent.glob("*") if p.is_dir()] if parent.is_dir() else []
        raise UserInputError(f"no run {run_id!r} in {parent}{did_you_mean(run_id, known)}")
    model, tokenizer, config = load_run_model(run_dir)
    export_hf(model, apply_variant(config.model, config.variant), Path(out))
    save = getattr(tokenizer, "save_pretrained", None)
    if save is None:
        return f"no tokenizer written: '{config.data.tokenizer}' is not a Hugging Face tokenizer"
    save(Path(out))
    return "with its tokenizer"
