"""How a run's last attempt ended, as its run directory says: a complete ``result.json`` (it finished) or an
``error.txt`` (it crashed). Read by the opening (a run that ended while the store was away is recorded from
them), by ``ablate status``, and by the Slurm and Ray executors for a task that ended unheard.
"""

from __future__ import annotations

from pathlib import Path

from ablate.result import RESULT_FILE, RunResult, read_result

ERROR_FILE = "error.txt"  # a crashed run's traceback, in its run directory


def crashed(run_dir: Path) -> str | None:
    """How a run's last attempt crashed (its ``error.txt``: the error's line, then its traceback; written as
    it fails, removed when the run starts again), else None. A run whose crash the store never heard of (the
    store was away) is recorded failed from it."""
    try:
        return (run_dir / ERROR_FILE).read_text() or None
    except OSError:
        return None


def finished_result(run_dir: Path) -> RunResult | None:
    """The complete ``result.json`` of a finished (``done``/``diverged``) run already in ``run_dir``, else
    None."""
    if not (run_dir / RESULT_FILE).is_file():
        return None
    try:
        result = read_result(run_dir)
    except Exception:  # noqa: BLE001 - a cut-off file is not a result: train again
        return None
    return result if result.status in ("done", "diverged") else None
