"""The model zoo: ``ablate variants`` and ``ablate export``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ablate.cli.common import HomeOpt, app, echo_json, handles_errors, home_dir, print_wide, print_wrapped


@app.command()
@handles_errors
def variants(
    fmt: Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    preset: Annotated[
        str | None, typer.Option("--preset", help="also show the parameters each variant adds at this preset")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", help="every field (activation, score shape, the source "
                                       "paper in full, the revision and the authors' code file and commit "
                                       "the arm was checked against), one line per variant")] = False,
) -> None:
    """The variant catalogue: names, the paper rows each reproduces, what each changes (wrapped to the
    terminal, or 100 columns off one; --wide: every field)."""
    from ablate.ablations.catalogue import catalogue_rows
    from ablate.cli.views import variants_table

    rows = catalogue_rows(preset)
    if fmt == "json":
        echo_json(rows)
    elif wide:
        print_wide(variants_table(rows, preset, wide=True))
    else:
        print_wrapped(variants_table(rows, preset))


@app.command()
@handles_errors
def export(
    run_id: Annotated[str, typer.Argument(help="the run to export: its id (as in `ablate runs`), or its "
                                               "first characters", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="folder to write", show_default=False)],
    fmt: Annotated[Literal["hf"], typer.Option("--format", help="output format: hf (the only one)")] = "hf",
    home: HomeOpt = None,
) -> None:
    """A trained checkpoint as a Hugging Face folder: config and safetensors weights (Qwen3, Qwen3-MoE, or
    Qwen3-Next for the G1 gate), the run's tokenizer and a model card. Variants no transformers class can
    express are refused with the reason (exit 2)."""
    from ablate.runner.export import export_run

    run_id, note = export_run(home_dir(home), run_id, out, fmt=fmt)
    typer.echo(f"exported {run_id} ({fmt}) to {out}: {note}")
