"""Probing a finished run again from its final checkpoint (``ablate probe``): a probe added to ablate after
the run trained (``massive_ratio``, ...) is measured without training it again.

The windows are the ones the run probed (its final stage's held-out sets, ``eval.probe_tokens`` of them, rows
started as it trained them), so the probes it had come out as they were, and the new ones beside them.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ablate.ablations.memory import resolved_precision
from ablate.errors import RunError
from ablate.result import RunResult, read_result, write_result
from ablate.runner.checkpoints import load_run_model
from ablate.runner.data import cache_dir_for, heldout_windows, row_bos, token_array
from ablate.runner.evaluate import probe, probe_windows


def probe_again(run_dir: str | os.PathLike[str], *, device: str = "cpu") -> RunResult:
    """The run's ``result.json`` with its probes measured again on its last checkpoint: the per-layer probes,
    the histograms and the probe summary (``Probes.summary``) replaced, everything else kept; written back and
    returned. A run that is not ``done``, or whose config turns probes off, is a RunError."""
    run_dir = Path(run_dir)
    result = read_result(run_dir)
    if result.status != "done":
        raise RunError(
            f"run {result.run_id} is {result.status}; only a done run is probed (a diverged one never was)"
        )
    model, tokenizer, cfg = load_run_model(run_dir, device=device)
    if not cfg.eval.probes or not cfg.data.heldout:
        raise RunError(f"run {result.run_id} does not probe (eval.probes off or no held-out set)")
    dc, cache = cfg.data, cache_dir_for(run_dir)
    bos = row_bos(dc, tokenizer)
    heldout = {name: heldout_windows(token_array(src, "heldout", tokenizer, dc, cache),
                                     cfg.eval.heldout_tokens, dc.seq_len,
                                     bos=bos) for name, src in dc.heldout.items()}
    where = torch.device(device)
    probes = probe(model, probe_windows(heldout, cfg.eval.probe_tokens, dc.seq_len),
                   hist_bins=cfg.eval.hist_bins, device=where,
                   precision=resolved_precision(cfg.train.precision, where.type == "cuda"))
    again = result.model_copy(update={"summary": {**result.summary, **probes.summary()},
                                      "probes": probes.layers, "histograms": probes.histograms,
                                      "histogram_edges": probes.edges})
    write_result(again, run_dir)
    return again
