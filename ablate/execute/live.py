"""Live records of running runs: heartbeats and step metrics, written from a background thread.

``LiveWriter(write)`` keeps, per running run, the step rows reported since the last flush; every ``every_s``
seconds (and at once for a run's first step) its thread hands them to ``write({run_id: rows})`` (one store
transaction: each run's heartbeat, its latest step, loss and tokens/s on its row, its new points of the step
table). A run with no new rows still gets its heartbeat (it may be evaluating). ``add`` only appends under a
lock, so the training step never waits for the store; when ``write`` fails (returns False) the rows are kept
for the next flush, up to ``MAX_KEPT`` per run (the run's ``result.json`` holds every step anyway, and its
ingest replaces the step table as a whole).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from ablate.execute.messages import StepRow

log = logging.getLogger(__name__)

EVERY_S = 2.0
MAX_KEPT = 20_000


class LiveWriter:
    """Batches running runs' heartbeats and step rows into ``write`` every ``every_s`` seconds (a thread)."""

    def __init__(self, write: Callable[[Mapping[str, list[StepRow]]], bool], *,
                 every_s: float = EVERY_S):
        self._write, self.every_s = write, every_s
        self._rows: dict[str, list[StepRow]] = {}
        self._fresh: set[str] = set()  # begun, no step written yet: its first rows are written at once
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def begin(self, run_id: str) -> None:
        """A run started: heartbeats from now on (the first one at the next flush)."""
        with self._lock:
            self._rows.setdefault(run_id, [])
            self._fresh.add(run_id)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="live-writer", daemon=True)
                self._thread.start()

    def add(self, run_id: str, rows: Iterable[StepRow]) -> None:
        """Step rows of a running run (dicts with ``step``); ignored for a run not begun or already ended."""
        with self._lock:
            kept = self._rows.get(run_id)
            if kept is not None:
                kept.extend(dict(r) for r in rows)
                del kept[:-MAX_KEPT]
                if kept and run_id in self._fresh:  # the first step of a run: show it now, not in 2 s
                    self._fresh.discard(run_id)
                    self._wake.set()

    def end(self, run_id: str, *, write_rest: bool = False) -> None:
        """The run ended: no more heartbeats. Its unwritten rows are dropped (a finished run's ingest records
        every step), or, with ``write_rest``, written now in the caller's thread (a run that failed, was
        pruned or stopped leaves no result to ingest: its curve is what the live rows hold). Call it before
        the run's end is recorded: the store takes live rows of running runs only."""
        with self._lock:
            rows = self._rows.pop(run_id, None)
            self._fresh.discard(run_id)
        if write_rest and rows:
            try:
                self._write({run_id: rows})
            except Exception as exc:  # noqa: BLE001 - a live record must never stop a run
                log.warning("live metrics of %s not written: %s", run_id, exc)

    def flush(self) -> bool:
        """Write what is waiting now (in the caller's thread); False when the write failed (kept for
        later)."""
        with self._lock:
            batch = {rid: list(rows) for rid, rows in self._rows.items()}
        if not batch:
            return True
        try:
            ok = self._write(batch)
        except Exception as exc:  # noqa: BLE001 - a live record must never stop a run; the ingest has it all
            log.warning("live metrics not written: %s", exc)
            ok = False
        if ok:
            with self._lock:
                for rid, rows in batch.items():
                    kept = self._rows.get(rid)
                    if kept is not None:
                        del kept[:len(rows)]  # what came in meanwhile stays
        return ok

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.every_s)
            self._wake.clear()
            if self._closed:
                return
            self.flush()

    def close(self) -> None:
        """Stop the thread (after a last flush of what is waiting)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join()
            self.flush()
