"""The training job a pool worker runs: one run of a grid, from its config to its ``result.json``.

Imported once per worker (``prepare`` pays for torch and Lightning up front, then job after job reuses them).
The job never touches the store or MLflow: it reports to the pool (``started``, throttled ``step``s, its outcome)
and the pool's process records. What it leaves is its run directory: checkpoints, ``result.json``, ``train.log``
and, when it crashes, ``error.txt``.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ablate.execute.devices import Slot
from ablate.execute.locks import RunLock
from ablate.execute.worker import JobContext, JobInterrupted
from ablate.layout import CHECKPOINT
from ablate.result import RESULT_FILE, read_result

STEP_EVERY_S = 0.5  # how often a step is reported to the pool's process (display, heartbeat)



def prepare(slot: Slot) -> None:
    """Once per worker: import torch and Lightning and give torch this worker's share of the cores."""
    import torch

    import ablate.runner.run  # noqa: F401 - the runner, Lightning and the model, imported once per worker

    torch.set_num_threads(slot.threads)


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``path`` for the job (Lightning and C code print there), then back."""
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _finished_before(run_dir: Path) -> str | None:
    """The status of a complete ``result.json`` already there (``done``/``diverged``), else None."""
    if not (run_dir / RESULT_FILE).is_file():
        return None
    try:
        status = read_result(run_dir).status
    except Exception:  # noqa: BLE001 - a cut-off file is not a result: train again
        return None
    return status if status in ("done", "diverged") else None


def train(job: dict[str, Any], ctx: JobContext, *, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Train ``job["config"]`` into ``job["run_dir"]`` (resuming from its checkpoint); return its outcome.

    Outcomes: ``{"outcome": "trained", "status": ...}``, ``{"outcome": "reused", ...}`` (a finished
    ``result.json`` was already there: nothing to train), ``{"outcome": "busy"}`` (another process holds the run).
    """
    from ablate.config import RunConfig
    from ablate.runner import RunInterrupted, run_one

    run_id, run_dir = job["run_id"], Path(job["run_dir"])
    lock = RunLock(run_dir)
    if not lock.acquire():
        return {"outcome": "busy"}
    try:
        if (status := _finished_before(run_dir)) is not None:
            return {"outcome": "reused", "status": status}
        ctx.emit("started", {"pid": os.getpid(), "checkpoint": (run_dir / CHECKPOINT).is_file()})
        last = [0.0]

        def on_step(m: dict[str, Any]) -> None:
            now = time.monotonic()
            if now - last[0] >= STEP_EVERY_S:
                last[0] = now
                ctx.emit("step", {k: m.get(k) for k in ("step", "loss", "tokens_per_s")})

        config = RunConfig.model_validate(job["config"])
        t0 = time.perf_counter()
        try:
            with _output_to(run_dir / "train.log"):
                result = run_one(config, run_dir, run_id=run_id, on_step=on_step, stop=ctx.stop,
                                 callbacks=callbacks)
        except RunInterrupted as exc:
            raise JobInterrupted(str(exc)) from None
        except BaseException:
            (run_dir / "error.txt").write_text(traceback.format_exc())
            raise
        return {"outcome": "trained", "status": result.status, "resumed_from": result.resumed_from,
                "run_one_s": time.perf_counter() - t0}
    finally:
        lock.release()
