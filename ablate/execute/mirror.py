"""MLflow's mirror thread: ``MlflowMirror`` (``ablate.store.mlflow_mirror``) driven from a background thread,
so neither training nor the executor ever waits for MLflow, and a failing MLflow never fails a grid. A run's
lifecycle (``ablate.execute.lifecycle``) hands it each run's start, step rows and end; its recorder
(``ablate.execute.recorder``) records the MLflow run ids it reports back, and closes it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ablate import layout
from ablate.result import RunResult, read_result
from ablate.store.faults import first_line
from ablate.store.mlflow_mirror import STEPS_EVERY_S, MlflowMirror, tracking_uri

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 60.0  # how long a run about to be dealt waits for its MLflow run (open_now)


class MirrorThread:
    """``MlflowMirror`` in a background thread: ``start``, ``steps``, ``submit`` (a finished or failed run's
    result), ``end`` (a run that leaves no result), ``logged()`` -> ``(run_id, mlflow_run_id)`` pairs,
    ``close()``.

    Commands about a run keep their order; its start and step rows wait for the next flush, every
    ``STEPS_EVERY_S`` seconds (a run that ends sooner is made once, complete, from its result). Errors become
    warnings (``errors`` keeps their text, each once): MLflow being down never fails a grid, and the store and
    ``result.json`` still hold everything, which the next mirror of the run fills in.
    """

    def __init__(self, *, home: Path, grid: str, uri: str | None = None, experiment: str | None = None):
        self._home, self._grid, self._uri = home, grid, uri
        self.experiment = experiment  # the MLflow experiment the user named; None: the grid's own
        self._inbox: queue.Queue[tuple[str, str, tuple[Any, ...], dict[str, Any]] | None] = queue.Queue()
        self._done: queue.Queue[tuple[str, str]] = queue.Queue()
        self.errors: list[str] = []
        self._keys: set[str] = set()
        self._thread: threading.Thread | None = None  # started by the first command: no command, no MLflow

    def _put(self, cmd: tuple[str, str, tuple[Any, ...], dict[str, Any]]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mlflow-mirror", daemon=True)
            self._thread.start()
        self._inbox.put(cmd)

    def warm(self) -> None:
        """Open MLflow now (import, tracking store, experiment) rather than at the first run: a pool calls
        this while its workers import torch, so none of it lands between two jobs."""
        self._put(("tick", "", (), {}))

    def start(self, run_id: str, config: Mapping[str, Any], *, parent: str | None = None,
              tags: Mapping[str, str] | None = None, name: str | None = None) -> None:
        """A run started (or resumed): open its nested run (named ``name``, else ``<variant>-s<seed>``)."""
        self._put(("start", run_id, (dict(config),), {"parent": parent, "tags": dict(tags or {}),
                                                      "name": name}))

    def open_now(self, run_id: str, config: Mapping[str, Any], *, parent: str | None = None,
                 tags: Mapping[str, str] | None = None, name: str | None = None,
                 timeout_s: float = OPEN_TIMEOUT_S) -> tuple[str, str] | None:
        """Open the run's nested MLflow run now and wait for it: ``(tracking URI, MLflow run id)``, for a
        process that logs into it itself; None when MLflow fails or does not answer within ``timeout_s``
        (the run goes on, mirrored as any other)."""
        reply: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._put(("open", run_id, (dict(config),), {"parent": parent, "tags": dict(tags or {}),
                                                     "name": name, "reply": reply}))
        try:
            return reply.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def steps(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Step metrics of a running run."""
        self._put(("steps", run_id, ([dict(r) for r in rows],), {}))

    def submit(self, result: RunResult, *, parent: str | None = None,
               tags: Mapping[str, str] | None = None, name: str | None = None) -> None:
        """A run ended with a result (``done``, ``diverged``, or ``failed`` with its error): complete and end
        it."""
        self._put(("result", result.run_id, (result,), {"parent": parent, "tags": dict(tags or {}),
                                                        "name": name}))

    def end(self, run_id: str, status: str, *, tags: Mapping[str, Any] | None = None) -> None:
        """A run ended without a result (``interrupted``, ``pruned``)."""
        self._put(("end", run_id, (status,), {"tags": dict(tags or {})}))

    def backfill(self, stored: Mapping[str, str | None]) -> None:
        """Finished runs (``{run id: the MLflow run id the store records, or None}``): each one the
        experiment does not hold as that MLflow run (never mirrored, mirrored halfway, or into another
        experiment) is logged from its ``result.json``; one it holds is left as it is."""
        self._put(("backfill", "", (dict(stored),), {}))

    def logged(self) -> list[tuple[str, str]]:
        """``(run_id, mlflow_run_id)`` of every nested run completed since the last call."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float | None = 120.0) -> None:
        """Finish what was submitted (up to ``timeout`` seconds) and stop the thread."""
        if self._thread is None:
            return
        self._inbox.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"MLflow mirroring did not finish within {timeout:.0f} s")

    def _loop(self) -> None:
        try:
            mirror = MlflowMirror(home=self._home, grid=self._grid, uri=self._uri, experiment=self.experiment)
        except Exception as exc:  # noqa: BLE001 - reported, the grid goes on
            self._fail(f"MLflow at {self._uri or tracking_uri(self._home)}: {first_line(exc)}")
            while self._inbox.get() is not None:
                pass  # nothing to mirror to: each command is dropped, until close()
            return
        # per run, what waits for the next flush: its start (a run shorter than STEPS_EVERY_S is then made
        # once, complete, from its result) and its step rows
        pending: dict[str, dict[str, Any]] = {}

        def flush(rid: str) -> None:
            waiting = pending.pop(rid, None)
            if waiting is not None and waiting["start"] is not None:
                self._call(mirror, "start", rid, *waiting["start"])
            if waiting is not None and waiting["steps"]:
                self._call(mirror, "steps", rid, (waiting["steps"],), {})

        flushed = time.monotonic()
        while True:
            try:
                cmd = self._inbox.get(timeout=STEPS_EVERY_S)
            except queue.Empty:
                cmd = ("tick", "", (), {})
            if cmd is None or time.monotonic() - flushed >= STEPS_EVERY_S:
                for rid in list(pending):
                    flush(rid)
                flushed = time.monotonic()
            if cmd is None:
                break
            kind, rid, args, kwargs = cmd
            if kind == "start":
                pending[rid] = {"start": (args, kwargs), "steps": []}
            elif kind == "steps":
                pending.setdefault(rid, {"start": None, "steps": []})["steps"].extend(args[0])
            elif kind == "open":
                pending.pop(rid, None)  # made now, not at the next flush
                reply = kwargs.pop("reply")
                try:
                    reply.put((mirror.uri, mirror.open_run(rid, *args, **kwargs)))
                except Exception as exc:  # noqa: BLE001 - the run goes on without it
                    self._fail(f"MLflow mirror of run {rid}: {first_line(exc)}", key=first_line(exc))
                    reply.put(None)
            elif kind == "result":
                pending.pop(rid, None)  # the result holds every point, and makes the run if it was never made
                self._call(mirror, kind, rid, args, kwargs)
            elif kind == "end":
                flush(rid)  # commands about a run keep their order
                self._call(mirror, kind, rid, args, kwargs)
            elif kind == "backfill":
                self._backfill(mirror, args[0])
        try:
            mirror.close()
        except Exception as exc:  # noqa: BLE001
            self._fail(f"MLflow: {first_line(exc)}")

    def _backfill(self, mirror: MlflowMirror, stored: Mapping[str, str | None]) -> None:
        try:
            held = mirror.nested()
        except Exception as exc:  # noqa: BLE001
            self._fail(f"MLflow: {first_line(exc)}")
            return
        for run_id, mlflow_id in stored.items():
            if mlflow_id is not None and held.get(run_id) == mlflow_id:
                continue  # complete there: the store records it once its mirror is
            try:
                result = read_result(layout.run_dir(self._home, run_id))
            except Exception:  # noqa: BLE001 - not a result: nothing to mirror
                continue
            self._call(mirror, "result", run_id, (result,), {})

    def _call(self, mirror: MlflowMirror, kind: str, run_id: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]
              ) -> None:
        methods: dict[str, Callable[..., Any]] = {"start": mirror.start, "steps": mirror.log_steps,
                                                  "result": mirror.log_result, "end": mirror.end}
        fn = methods[kind]
        try:
            out = fn(run_id, *args, **kwargs) if kind != "result" else fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            reason = first_line(exc)
            self._fail(f"MLflow mirror of run {run_id}: {reason}", key=reason)
            return
        if kind == "result":  # recorded in the store once complete: a run mirrored halfway is mirrored again
            self._done.put((run_id, out))

    def _fail(self, message: str, *, key: str | None = None) -> None:
        """Report ``message`` once per ``key`` (MLflow down: one warning at the end, not one per run and
        batch)."""
        key = key or message
        if key not in self._keys:
            self._keys.add(key)
            log.info("%s", message)  # the executor's summary says it, as one warning line
            self.errors.append(message)
