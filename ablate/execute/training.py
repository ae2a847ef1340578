"""The training job: one run of a grid, from its config to its ``result.json``, wherever it runs (a local
pool worker, a Ray task).

``train(job, ctx)`` is ``ablate run``'s job function (``ablate.execute.job_function``; tune's ``train_trial``
adds its pruning). Only the processes that train import this module: it imports torch, Lightning and the
model once, so that a pool worker pays for them up front (``prepare`` then gives torch the worker's share of
the cores) and job after job reuses them. The job never touches the store or MLflow: it reports through its
``JobContext`` (``Started``, its step metrics in batches) and returns its ``JobOutcome``; whoever runs it
records them through the run lifecycle (the pool's process, or the Ray task itself). What it leaves is its
run directory: checkpoints, ``result.json``, ``train.log`` and, when it crashes, ``error.txt``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

import ablate.runner.run  # noqa: F401 - the runner, Lightning and the model, imported once per worker
from ablate import layout
from ablate.config import RunConfig, total_steps
from ablate.execute.devices import Slot
from ablate.execute.job_function import JobContext, JobInterrupted, held
from ablate.execute.last_attempt import ERROR_FILE
from ablate.execute.messages import Job, JobOutcome, StepRow
from ablate.grid.identity import check_current
from ablate.layout import CHECKPOINT
from ablate.runner import RunInterrupted, run_one

log = logging.getLogger(__name__)

STEP_EVERY_S = 0.5  # how often a batch of step metrics goes to the pool's process (display, store, MLflow)


def prepare(slot: Slot) -> None:
    """Once per worker: give torch this worker's share of the cores."""
    torch.set_num_threads(slot.threads)
    log.info("worker %d: %d torch threads, OMP_WAIT_POLICY=%s", slot.index, torch.get_num_threads(),
             os.environ.get("OMP_WAIT_POLICY", "(OpenMP's default)"))


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``path`` for the job (Lightning and C code print there), then
    back."""
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


@contextlib.contextmanager
def _run_log(path: Path, run_id: str, *, quiet: type[BaseException]) -> Iterator[None]:
    """The job's output on ``path`` (``_output_to``), and how it ended written there: a crash's traceback, or
    one line for a ``quiet`` exception (an interrupt)."""
    with _output_to(path):
        try:
            yield
        except quiet as exc:
            log.info("run %s: %s", run_id, exc)
            raise
        except BaseException:
            log.exception("run %s failed", run_id)
            raise


class StepBatcher:
    """``on_step`` for ``run_one``: keeps each step's metrics and hands them to ``send`` every ``every_s``
    seconds (and at ``flush``), so a report costs the training step one list append most of the time."""

    def __init__(self, send: Callable[[list[StepRow]], None], every_s: float = STEP_EVERY_S):
        self.send, self.every_s = send, every_s
        self.rows: list[StepRow] = []
        self.last = 0.0
        self._lock = threading.Lock()

    def __call__(self, row: StepRow) -> None:
        with self._lock:
            self.rows.append(dict(row))
        if time.monotonic() - self.last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Send what is waiting now."""
        with self._lock:
            rows, self.rows = self.rows, []
        self.last = time.monotonic()
        if rows:
            self.send(rows)


def _logging(on_step: Callable[[StepRow], None], total: int, lines: int = 10) -> Callable[[StepRow], None]:
    """``on_step``, also writing one line to the run's log at each tenth of its ``total`` steps."""
    every = max(1, total // lines)

    def step(row: StepRow) -> None:
        on_step(row)
        n = int(row.get("step", -1) or 0) + 1
        if n % every == 0 or n == total:
            extra = "".join(f", {k} {row[k]:.4g}" for k in ("loss", "lr", "tokens_per_s", "val_ppl")
                            if isinstance(row.get(k), float | int))
            log.info("step %d/%d%s", n, total, extra)

    return step


def train(job: Job, ctx: JobContext, *, callbacks: Sequence[object] = ()) -> JobOutcome:
    """Train ``job.config`` into ``job.run_dir`` (resuming from its checkpoint); return how it ended.

    ``reused``: a finished ``result.json`` was already there (nothing to train); ``busy``: another process
    holds the run directory.
    """
    run_dir = Path(job.run_dir)
    with held(run_dir) as ended:
        if ended is not None:
            return ended
        resuming = (run_dir / CHECKPOINT).is_file()
        (run_dir / ERROR_FILE).unlink(missing_ok=True)  # an earlier attempt's crash is not how this one ends
        ctx.started(resuming=resuming)
        steps = StepBatcher(ctx.progress)
        config = RunConfig.model_validate(job.config)
        t0 = time.perf_counter()
        try:
            with _run_log(run_dir / "train.log", job.run_id, quiet=RunInterrupted):
                start = f"resuming from {run_dir / CHECKPOINT}" if resuming else "from step 0"
                log.info("run %s: %s seed %d on %s, %s", job.run_id, config.variant, config.seed,
                         ctx.slot.label, start)
                result = run_one(config, run_dir, run_id=job.run_id, stop=ctx.stop, callbacks=callbacks,
                                 on_step=_logging(steps, total_steps(config)), check_inputs=check_current)
                log.info("run %s: %s after %s steps in %.1f s (train_loss %s, val_ppl %s)", job.run_id,
                         result.status, result.summary.get("steps"), time.perf_counter() - t0,
                         result.summary.get("train_loss"), result.summary.get("val_ppl"))
        except RunInterrupted as exc:
            raise JobInterrupted(str(exc)) from None
        except BaseException as exc:
            full = layout.disk_full(exc, getattr(exc, "filename", None) or run_dir)
            shown = full or exc
            with contextlib.suppress(OSError):  # on a full disk this may fail too: the crash is what counts
                text = f"{type(shown).__name__}: {shown}\n\n{traceback.format_exc()}"
                (run_dir / ERROR_FILE).write_text(text)
            if full is not None:  # one line naming the path; the whole trace is in train.log
                raise full from exc
            raise
        finally:
            steps.flush()
        return JobOutcome("trained", status=str(result.status), resumed_from=result.resumed_from,
                          run_one_s=time.perf_counter() - t0)
