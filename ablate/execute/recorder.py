"""The one owner of "the store went away": what a command writes to the store goes through a ``Recorder``.

The store raises one ``StoreUnavailable`` when its database cannot be reached or written
(``ablate.store.faults``); nothing else decides what that means for a command. A ``Recorder(store, home=,
mirror=, patience_s=)``:

- ``write(what, fn)``: one store write (``fn(store)``); while the store is away it is kept, in order, and
  replayed with backoff by ``tick`` (up to ``RETRY_MAX_S`` between two tries). The live writer's heartbeats
  and step rows (``ablate.execute.live``) are skipped meanwhile: each run's ``result.json`` holds every step
  anyway.
- ``attempt(fn)``: a read, or a look, that a command can do without (None while the store is away).
- ``watch(say, wording)``: says once that the store went away, once that it is back, and once that it stayed
  away past ``patience_s`` (``gave_up`` then holds that line, and the executor stops cleanly). ``Wording``
  holds what an executor says: a pool that records its workers' runs (``LOCAL``), a task that records its own
  run, in its log (``TASK``: a Slurm or Ray task); an executor words its own waits (Slurm's ``--wait``).
- the background writers: the live writer (``live``) and MLflow's mirror thread (``mirror``,
  ``ablate.execute.mirror.MirrorThread``), closed by ``close``.

Between the pool's rounds (tune asks and tells Optuna, whose storage is the same database) ``stops_when_away``
turns the store going away into one error line; inside a training worker ``unless_away`` lets training go on.
A ``Lifecycle`` owns one recorder; ``ablate run --executor slurm --wait`` has its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from operator import methodcaller
from pathlib import Path
from typing import Literal, TypeVar

from ablate import layout
from ablate.errors import AblateError, StoreError, StoreUnavailable
from ablate.execute.live import LiveWriter
from ablate.execute.messages import StepRow
from ablate.execute.mirror import MirrorThread
from ablate.store.api import Store
from ablate.store.engine import display_url
from ablate.store.faults import first_line, unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_MAX_S = 30.0  # the longest wait between two attempts to reach a store that went away
STORE_PATIENCE_S = 300.0  # how long an executor waits for a store that went away before it stops cleanly

News = Literal["away", "back", "gave_up"]


@dataclass(frozen=True)
class Wording:
    """What an executor says when the store goes away, when it is back, and when it stayed away past the
    patience: ``str.format`` templates of ``where`` (the URL), ``away`` (why, in the user's words),
    ``patience`` and ``down`` (seconds). An empty template says nothing."""

    away: str
    back: str
    gave_up: str = ""

    def filled(self, **fields: str) -> Wording:
        """These templates with ``fields`` (e.g. ``array``) written in."""
        def fill(text: str) -> str:
            for key, value in fields.items():
                text = text.replace("{" + key + "}", value)
            return text
        return replace(self, away=fill(self.away), back=fill(self.back), gave_up=fill(self.gave_up))


LOCAL = Wording(
    away="the store {where} is {away}: training goes on, results are kept and recorded when it is back "
         "(stopping after {patience:.0f} s)",
    back="the store {where} is back",
    gave_up="the store {where} has been {away} for {down:.0f} s: stopping (running jobs save a checkpoint)")
TASK = Wording(
    away="the store {where} is {away}: training goes on, the result is kept in the run directory",
    back="the store {where} is back")


class Recorder:
    """Writes to one store that may go away; see the module docstring."""

    def __init__(self, store: Store, *, home: Path, mirror: MirrorThread | None = None,
                 live_every_s: float | None = None, patience_s: float | None = STORE_PATIENCE_S):
        self.store, self.home, self.mirror, self.patience_s = store, Path(home), mirror, patience_s
        self.where = display_url(store.url)
        self.gave_up: str | None = None  # the line ``watch`` said when the patience ran out
        self._lock = threading.RLock()  # reentrant: a Slurm task's signal handler may record while it is held
        # writes the store could not take, in order
        self._outbox: list[tuple[str, Callable[[Store], object]]] = []
        self._down_since: float | None = None
        self._away = StoreUnavailable.UNREACHABLE
        self._next_try = 0.0
        self._backoff = 1.0
        self._said_away = False  # what ``watch`` last said
        self._back_after = 0.0  # how long the store was away, when it came back
        kw = {} if live_every_s is None else {"every_s": live_every_s}
        self.live = LiveWriter(self._write_progress, **kw)

    # ------------------------------------------------------------ writes and reads
    def write(self, what: str, fn: Callable[[Store], object], *,
              on_bad: Callable[[Exception], object] | None = None
              ) -> None:
        """One store write, ``fn(store)``; while the store is away it is kept (in order) and replayed by
        ``tick``.

        ``on_bad``: what to do when the store refuses the write itself (e.g. a malformed result): else it
        raises.
        """
        with self._lock:
            if self._outbox:  # the store is away: keep the order of the writes
                self._outbox.append((what, fn))
                return
        try:
            fn(self.store)
        except StoreUnavailable as exc:
            self._went_away(exc)
            with self._lock:
                self._outbox.append((what, fn))
        except StoreError as exc:
            if on_bad is None:
                raise
            on_bad(exc)

    def attempt(self, fn: Callable[[], T]) -> T | None:
        """``fn()``, which reads (or writes) the store; None while the store is away."""
        try:
            out = fn()
        except StoreUnavailable as exc:
            self._went_away(exc)
            return None
        with self._lock:
            if not self._outbox:
                self._came_back()
        return out

    def tick(self) -> None:
        """Replay the writes kept while the store was away (with backoff), and record MLflow run ids."""
        with self._lock:
            due = self._outbox and time.monotonic() >= self._next_try
        if due:
            self._replay()
        if self.mirror is not None:
            for rid, mlflow_id in self.mirror.logged():
                self.write(f"record {rid}'s MLflow run",
                           methodcaller("set_mlflow_run_id", run_id=rid, mlflow_run_id=mlflow_id))

    def _replay(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    break
                what, fn = self._outbox[0]
            try:
                fn(self.store)
            except StoreUnavailable as exc:  # away again
                with self._lock:
                    self._away = exc.away
                    self._backoff = min(RETRY_MAX_S, self._backoff * 2)
                    self._next_try = time.monotonic() + self._backoff
                return
            except Exception as exc:  # noqa: BLE001 - a write it now refuses
                log.warning("could not %s in the store: %s", what, first_line(exc))
            with self._lock:
                self._outbox.pop(0)
        self._came_back()

    def _write_progress(self, batch: Mapping[str, list[StepRow]]) -> bool:
        """The live writer's flush: heartbeats and step rows of running runs (skipped while the store is
        away)."""
        with self._lock:
            if self._outbox:
                return False
        try:
            self.store.record_progress(batch)
        except StoreUnavailable as exc:
            self._went_away(exc)
            return False
        self._came_back()
        return True

    # ------------------------------------------------------------ away and back
    def _went_away(self, exc: StoreUnavailable) -> None:
        with self._lock:
            self._away = exc.away
            if self._down_since is None:
                self._down_since = time.monotonic()
                self._next_try = self._down_since + self._backoff
                # info: the executor says it (``watch``), a Slurm task in its log
                log.info("the store %s is %s (%s); training goes on, the results are kept in %s and "
                         "recorded when it is back", self.where, self._away, exc.reason,
                         self.home / layout.RUNS_DIR)

    def _came_back(self) -> None:
        with self._lock:
            if self._down_since is not None:
                self._back_after = time.monotonic() - self._down_since
                log.info("the store %s is back after %.0f s", self.where, self._back_after)
            self._down_since, self._backoff = None, 1.0

    def away(self) -> str:
        """Why the store is away, in the user's words (``StoreUnavailable.away``)."""
        return self._away

    def down_s(self) -> float | None:
        """Seconds since the store went away (None while it answers)."""
        with self._lock:
            return None if self._down_since is None else time.monotonic() - self._down_since

    def pending(self) -> int:
        """Writes still kept for a store that went away."""
        with self._lock:
            return len(self._outbox)

    def watch(self, say: Callable[[News, str], None], wording: Wording = LOCAL) -> bool:
        """Tell ``say`` once that the store went away, once that it is back, and once that it has been away
        longer than the patience (that line is kept in ``gave_up``); True when it just said the last."""
        down = self.down_s()
        fields = {"where": self.where, "away": self._away, "patience": self.patience_s or 0.0,
                  "down": down if down is not None else self._back_after}
        if (down is not None) != self._said_away:
            self._said_away = down is not None
            text = wording.away if self._said_away else wording.back
            if text:
                say("away" if self._said_away else "back", text.format(**fields))
        if (down is not None and self.patience_s is not None and down > self.patience_s
                and self.gave_up is None):
            self.gave_up = wording.gave_up.format(**fields)
            say("gave_up", self.gave_up)
            return True
        return False

    def still_away(self) -> str | None:
        """At the end, with writes still kept: how long the store has been away, in one line."""
        if not self.pending():
            return None
        return f"the store {self.where} has been {self._away} for {self.down_s() or 0:.0f} s"

    # ------------------------------------------------------------ the end
    def warnings(self) -> list[str]:
        """What the user should hear about at the end (MLflow trouble)."""
        return list(self.mirror.errors) if self.mirror is not None else []

    def close(self, *, flush_s: float = 10.0, mirror_s: float = 300.0) -> None:
        """Stop the live writer, let the mirror finish (up to ``mirror_s`` seconds), and try, for up to
        ``flush_s`` seconds, to write what was kept for a store that went away."""
        self.live.close()
        if self.mirror is not None:
            self.mirror.close(timeout=mirror_s)
        deadline = time.monotonic() + flush_s
        while self.pending() and time.monotonic() < deadline:
            self._replay()
            if self.pending():
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        self.tick()


@contextmanager
def stops_when_away(where: str, *, doing: str, then: str) -> Iterator[None]:
    """The store (or Optuna's storage in its database) going away inside the block, as one ``StoreError``
    line: ``the store W became <away> <doing> (<reason>); <then>``. Any other error is raised as it is."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, AblateError) and not isinstance(exc, StoreUnavailable):
            raise
        away = unavailable(exc, where)
        if away is None:
            raise
        raise StoreError(f"the store {where} became {away.away} {doing} ({away.reason}); {then}") from None


def unless_away(fn: Callable[[], T], *, then: str) -> T | None:
    """``fn()``, or None when the store (or Optuna's storage in its database) is away: a warning says so, and
    ``then`` (what goes on meanwhile)."""
    try:
        return fn()
    except Exception as exc:
        away = unavailable(exc, "")
        if away is None:
            raise
        log.warning("the store is %s (%s): %s", away.away, away.reason, then)
        return None
