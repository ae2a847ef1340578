"""``Store``: the results store's public face. Each method is one transaction around a function of
``records`` (writes) or ``queries`` (reads), retried when the database reports a lock timeout or deadlock. A
database that went away (a lost connection, a server that is down, a full or read-only disk) is raised as one
``StoreUnavailable`` (``ablate.store.faults``); what to do then is the caller's (``ablate.execute.recorder``).

>>> store = Store.open("sqlite:///:memory:")   # doctest: +SKIP
>>> store.register_grid(name="g", text="...", runs=planned)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ablate.errors import StoreUnavailableError, UserInputError
from ablate.layout import pick_run
from ablate.result import RunResult, read_result
from ablate.stats import Decision
from ablate.store import decisions as stored
from ablate.store import ingest, queries, records, registration, rehash
from ablate.store.engine import display_url, make_engine, resolve_url
from ablate.store.faults import translated
from ablate.store.migrate import upgrade
from ablate.store.opening import folder_reason, making, reason, require_store, retry
from ablate.store.rehash import Move, RehashPlan
from ablate.store.where import Where

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy import Engine

    from ablate.runner.fingerprints import Fingerprints

log = logging.getLogger(__name__)
T = TypeVar("T")
TUNE_SUFFIX = "/tune"  # the grid `ablate tune` registers its trials under


class Store:
    """The results store at one URL. Open with ``Store.open``; usable as a context manager (closes the
    engine)."""

    def __init__(self, engine: Engine, *, url: str, warnings: Sequence[str] = ()):
        self.engine = engine
        self.url = url
        self.warnings = list(warnings)  # things the CLI shows the user (e.g. SQLite on NFS)

    @classmethod
    def open(cls, url: str | None = None, *, home: str | os.PathLike[str] | None = None,
             migrate: bool = True, create: bool = True) -> Store:
        """Open (creating if needed) the store at ``url`` (default: ``ABLATE_STORE``, else
        ``sqlite:///$ABLATE_HOME/ablate.db``) and bring its schema up to date. A store that cannot be opened
        (bad URL, missing driver, no answer, read-only file) is a StoreUnavailableError (exit 2). Without
        ``create`` (a command that only reads) a store that is not there, or a database that holds none, is
        a NoStoreError naming it, and nothing is made."""
        given = url or os.environ.get("ABLATE_STORE")
        url = resolve_url(url, home=home)
        engine, warnings = make_engine(url, create=create)
        if not create:
            require_store(engine, url, home=None if given else home)
        if migrate:
            try:
                with making(url, create=create):
                    retry(lambda: upgrade(engine))
            except DBAPIError as exc:
                engine.dispose()
                raise StoreUnavailableError(f"cannot open the store {display_url(url)}: "
                                            f"{reason(exc)}{folder_reason(url)}") from None
        return cls(engine, url=url, warnings=warnings)

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({display_url(self.url)!r})"

    # transactions
    @property
    def where(self) -> str:
        """The store's URL as the user is shown it (without its password)."""
        return display_url(self.url)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """A Session inside one transaction, committed on success (the caller's ``Session.begin()``); a
        database that went away is a ``StoreUnavailable``."""
        with translated(self.where), self._session(write=write) as s:
            yield s

    @contextmanager
    def _session(self, *, write: bool = True) -> Iterator[Session]:
        bind = self.engine if write else self.engine.execution_options(ablate_read_only=True)
        with Session(bind, expire_on_commit=False) as s, s.begin():
            yield s

    def _write(self, fn: Callable[[Session], T]) -> T:
        def once() -> T:
            with self._session() as s:
                return fn(s)
        with translated(self.where):
            return retry(once)

    def _read(self, fn: Callable[[Session], T]) -> T:
        with self.session(write=False) as s:
            return fn(s)

    # writes
    def register_grid(self, *, name: str, text: str, runs: Iterable[Any], whole: bool = True) -> int:
        """Record a grid and its runs (PlannedRun objects or mappings); runs already stored keep their state.
        ``whole``: the runs are the grid's current configuration (its other runs become older ones); else they
        join it (``registration.register_grid``)."""
        planned = list(runs)
        return self._write(lambda s: registration.register_grid(s, name=name, text=text, runs=planned,
                                                                whole=whole))

    def grid_text(self, name: str) -> str | None:
        """The text a grid was last registered with; None for a grid the store does not hold."""
        return self._read(lambda s: queries.grid_text(s, name))

    def mark_running(self, *, run_id: str, host: str | None = None, device: str | None = None,
                     executor: str | None = None, job_id: str | None = None) -> None:
        """The run started on ``host``/``device``, in ``executor``'s job ``job_id`` (None: no job)."""
        self._write(lambda s: records.mark_running(s, run_id=run_id, host=host, device=device,
                                                   executor=executor, job_id=job_id))

    def heartbeat(self, *, run_id: str, step: int | None = None) -> None:
        """The run is alive at ``step``."""
        self._write(lambda s: records.heartbeat(s, run_id=run_id, step=step))

    def record_progress(self, progress: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Running runs' heartbeats and their step rows since the last call (``{run_id: [{"step",
        "loss", ...}]}``), in one transaction: see ``records.record_progress``."""
        self._write(lambda s: records.record_progress(s, progress))

    def mark_queued(self, *, run_id: str) -> None:
        """Put the run back in the queue."""
        self._write(lambda s: records.mark_queued(s, run_id=run_id))

    def mark_failed(self, *, run_id: str, error: str) -> None:
        """The run failed with ``error``."""
        self._write(lambda s: records.mark_failed(s, run_id=run_id, error=error))

    def mark_pruned(self, *, run_id: str, step: int | None, value: float | None,
                    metric: str | None = None) -> None:
        """A pruner stopped the run on purpose at ``step`` after it reported ``value`` (of ``metric``): status
        ``pruned``, not an error; ``ablate runs`` shows the steps it trained, ``events`` what the pruner
        saw."""
        self._write(lambda s: records.mark_pruned(s, run_id=run_id, step=step, value=value, metric=metric))

    def set_mlflow_run_id(self, *, run_id: str, mlflow_run_id: str) -> None:
        """Remember the MLflow run mirroring this run."""
        self._write(lambda s: records.set_mlflow_run_id(s, run_id=run_id, mlflow_run_id=mlflow_run_id))

    def set_job(self, *, run_id: str, executor: str | None, job_id: str | None) -> None:
        """Remember the job (of ``executor``) that trains this run; a ``job_id`` of None forgets it."""
        self._write(lambda s: records.set_job(s, run_id=run_id, executor=executor, job_id=job_id))

    def set_scores(self, *, run_id: str, scores: Mapping[str, float | None]) -> None:
        """Set named scores of a run (``bench/<task>`` from ``ablate eval``); its other scores are kept."""
        values = dict(scores)
        self._write(lambda s: records.set_scores(s, run_id=run_id, scores=values))

    def ingest(self, result: RunResult | str | os.PathLike[str]) -> str:
        """Record a RunResult, a ``result.json`` or a run directory (idempotent); return the run id.

        A half-written or malformed file is a StoreError saying so.
        """
        if not isinstance(result, RunResult):
            result = read_result(Path(result))
        res = result
        return self._write(lambda s: ingest.ingest(s, res))

    def move_run(self, move: Move) -> str | None:
        """Re-key one run to today's id (``ablate.store.rehash.Move``); None when done, else why it was
        left."""
        return self._write(lambda s: rehash.move_rows(s, move))

    def record_decisions(self, *, grid: str, decisions: Sequence[Decision]) -> int:
        """Keep what ``ablate run --until-resolved`` decided for grid ``grid``'s comparisons, with their looks
        (each replaces an earlier decision of the same comparison); returns how many."""
        rows = list(decisions)
        return self._write(lambda s: stored.record_decisions(s, grid=grid, decisions=rows))

    def mark_ids_current(self, stems: Mapping[str, str]) -> None:
        """Record that these runs' ids are today's (``runs.config_version``), with their stem ids."""
        stems = dict(stems)
        if stems:
            self._write(lambda s: records.mark_ids_current(s, stems=stems))

    # reads
    def rehash_plan(self, *, only_outdated: bool = True,
                    fingerprints: Fingerprints | None = None) -> RehashPlan:
        """Today's id of each run recorded under an older id scheme (``ablate.store.rehash.RehashPlan``)."""
        return self._read(lambda s: rehash.plan(s, only_outdated=only_outdated, fingerprints=fingerprints))

    def outdated(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Runs of ``run_ids`` that the store holds under an id from an older scheme: ``{id: (old id,
        status)}`` (empty at once when every stored id is current). ``ablate db rehash`` carries them over."""
        return self._read(lambda s: rehash.outdated(s, run_ids))

    def require_current_ids(self, run_ids: Sequence[str]) -> None:
        """Raise UserInputError when runs of ``run_ids`` are stored under older ids: training them again would
        redo finished work (``ablate db rehash`` first)."""
        found = self.outdated(run_ids)
        if found:
            new, (old, status) = next(iter(found.items()))
            raise UserInputError(
                f"{len(found)} run(s) of this grid are in the store {display_url(self.url)} under ids from "
                f"an older ablate (e.g. {new} is {old}, {status}); run `ablate db rehash` to carry them over "
                "(run directories, rows and MLflow tags follow; nothing retrains)")

    def statuses(self, *, run_ids: Sequence[str]) -> dict[str, str]:
        """``{run_id: status}`` for the runs the store knows."""
        return self._read(lambda s: queries.statuses(s, run_ids=run_ids))

    def grids(self) -> list[str]:
        """The registered grids' names."""
        return self._read(queries.grid_names)

    def grids_by_activity(self) -> list[str]:
        """The registered grids' names, the one whose runs last started, ended or joined first."""
        return self._read(queries.grids_by_activity)

    def last_study(self) -> str | None:
        """The grid a report reads when none is named and the store holds several: the study run last (its
        runs last started, ended or joined), a tuning search's trials (``<grid>/tune``: one seed per value,
        no arms to compare) only when there is nothing else; None with one grid or none."""
        names = self.grids_by_activity()
        if len(names) < 2:
            return None
        studies = [n for n in names if not n.endswith(TUNE_SUFFIX)]
        return (studies or names)[0]

    def resolve_run(self, ref: str) -> str:
        """The run id that ``ref`` is, or the one run id it begins (as git does with commits); a
        UserInputError naming the candidates otherwise."""
        found = self._read(lambda s: queries.run_ids_like(s, ref.strip())) if ref.strip() else []
        return pick_run(ref, found, where=f"the store {display_url(self.url)}")

    def run_config(self, run_id: str) -> dict[str, Any]:
        """A run's stored config."""
        return self._read(lambda s: queries.run_config(s, run_id))

    def provenance(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """``{run_id: provenance}``: the software, device and grid commit that produced each run."""
        return self._read(lambda s: queries.provenance(s, run_ids))

    def decisions(self, grid: str) -> list[Decision]:
        """What ``ablate run --until-resolved`` decided for grid ``grid``'s comparisons
        (``ablate.stats.sequential.Decision``); empty when it never ran on it."""
        return self._read(lambda s: stored.decisions(s, grid))

    def grid_axes(self, grid: str) -> list[str]:
        """The config paths ``grid`` varies on purpose (its runs' axes)."""
        return self._read(lambda s: queries.grid_axes(s, grid))

    def runs_frame(self, grid: str | None = None, where: str | None = None, *,
                   run_ids: Sequence[str] | None = None, current: bool = False) -> pd.DataFrame:
        """One row per run with CLI.md's ``runs`` columns and every config field by dotted path.

        ``where``: a ``--where`` expression (see ``ablate.store.where``); an unknown column is a
        UserInputError. ``run_ids``: only these runs. ``current``: only the runs of the grid's current
        configuration.
        """
        frame = self._read(lambda s: queries.runs_frame(s, grid=grid, run_ids=run_ids, current=current))
        if where is not None and where.strip():
            empty = [p for p in ("ppl/", "bench/") if not any(c.startswith(p) for c in frame.columns)]
            cond = Where(where, queries.known_columns(frame), open_prefixes=empty)
            frame = frame[cond.mask(frame).to_numpy()].reset_index(drop=True)
        return frame

    def runs_records(self, grid: str | None = None) -> tuple[list[str], list[list[Any]], dict[str, str]]:
        """``runs_frame``'s table as plain rows, without pandas: ``(columns, rows, dtypes)`` (``queries``)."""
        return self._read(lambda s: queries.runs_records(s, grid=grid))

    def curves(self, *, run_ids: Sequence[str] | None = None, metrics: Iterable[str] | None = None
               ) -> pd.DataFrame:
        """Step curves, long: ``run_id, step, metric, value``."""
        return self._read(lambda s: queries.curves(s, run_ids=run_ids, metrics=metrics))

    def probes(self, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Per-layer probe values: ``run_id, layer, name, value``."""
        return self._read(lambda s: queries.probes(s, run_ids=run_ids))

    def histograms(self, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Histogram bins: ``run_id, name, layer, bin, lo, hi, count``."""
        return self._read(lambda s: queries.histograms(s, run_ids=run_ids))

    def events(self, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Events: ``run_id, kind, step, data``."""
        return self._read(lambda s: queries.events(s, run_ids=run_ids))

    def status_summary(self, grid: str | None = None, *, stale_after_s: float = 300.0, older: bool = False
                       ) -> dict[str, Any]:
        """Counts by status per grid (of its current configuration; ``older``: its older ones' runs too, each
        grid's ``older`` says how many there are), the running runs, and which of them have stale
        heartbeats."""
        return self._read(lambda s: queries.status_summary(s, grid=grid, stale_after_s=stale_after_s,
                                                           older=older))

    def older_runs(self, grid: str) -> int:
        """How many runs of ``grid`` belong to older configurations of it."""
        return self._read(lambda s: queries.older_runs(s, grid))

    def same_stem(self, stems: Mapping[str, str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
        """``{run id: (stored id, status, config)}``: a stored run of the same stem under another id, for each
        of ``stems`` (``{run id: stem id}``) that has one (it read other data: ``ablate plan`` shows it
        stale)."""
        wanted = dict(stems)
        return self._read(lambda s: queries.same_stem(s, wanted)) if wanted else {}
