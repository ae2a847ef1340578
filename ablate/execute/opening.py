"""What every ``ablate run`` does before anything trains, whatever the executor: the grid is loaded and
expanded, the store opened, the grid registered, and each run triaged (``ablate.execute.triage``) with the one
liveness rule.

``open_grid(path, sets, home=, store=, retry_failed=, stale_after_s=, remote=)`` -> ``Opened`` (a context
manager that closes the store): the runs ``todo`` (resumed ones first), what was skipped and why, and who
holds the runs that another process is training. ``path`` may be the grid already expanded (``expand_grid``),
so that a caller which reads the runs first (the memory check, the worker count) expands it once. A run that
finished while nobody could record it (its ``result.json`` is complete but the store still has it ``queued``
or ``running``: the store was away, or the process recording it was killed) is ingested here, not trained
again.

Liveness (``Liveness``), the one rule for "is a ``running`` run's process alive", used by the triage and by
``ablate status``: a run whose directory lock is held on this machine is alive (the lock file names its pid);
one held by an executor's job (a Slurm array task, a Ray task) is alive while its executor lists the job as
alive, and gone once it does not (an executor that cannot tell from here leaves it to the rules below); one
recorded on this host whose lock file is there but free was cut off (the kernel dropped the lock with its
process, however it died); any other is alive until its heartbeat is ``stale_after_s`` old (another host, or
another home). A run whose process is gone but whose ``result.json`` is complete ended; it was not cut off
(``ablate status`` says so; the triage ingests it).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate import layout, provenance
from ablate.errors import PlanningInterrupted
from ablate.execute.executor import Expanded, executor_name, executors
from ablate.execute.job import ERROR_FILE
from ablate.execute.locks import LOCK_FILE, holder_pid, is_locked
from ablate.execute.triage import RunAction, triage
from ablate.layout import CHECKPOINT

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holder:
    """Who trains a run now: a process on this machine (``pid``), an executor's job (``job``: its name in
    the executor's words, ``Slurm job 12_3``), or a process on another host."""

    host: str | None = None
    pid: int | None = None
    job: str | None = None

    def __str__(self) -> str:
        if self.job:
            return self.job
        if self.pid:
            return f"pid {self.pid}"
        return f"host {self.host}" if self.host else "another process"


class Liveness:
    """Whether the process of a ``running`` run is alive (see the module docstring).

    ``running``: the store's running rows (``status_summary()["running"]``: ``run_id``, ``host``, ``stale``);
    ``jobs``: ``{run_id: (executor, job id)}`` of runs an executor's job holds; ``live``: ``{executor: the job
    ids it lists as alive}``, or None for an executor that cannot tell from here; ``names``: ``{run_id: its
    job in the executor's words}``.
    """

    def __init__(self, home: Path, running: Iterable[Mapping[str, Any]] = (), *, host: str | None = None,
                 jobs: Mapping[str, tuple[str, str]] | None = None,
                 live: Mapping[str, set[str] | None] | None = None, names: Mapping[str, str] | None = None):
        self.home = Path(home)
        self.host = host or socket.gethostname()
        self.running = {r["run_id"]: r for r in running}
        self.jobs = dict(jobs or {})
        self.live = dict(live or {})
        self.names = dict(names or {})

    def holder(self, run_id: str) -> Holder | None:
        """Who holds ``run_id`` now, or None when nobody does (a ``running`` record of it was cut off)."""
        run_dir = layout.run_dir(self.home, run_id)
        if is_locked(run_dir):
            return Holder(self.host, holder_pid(run_dir))
        if (held := self.jobs.get(run_id)) is not None and (live := self.live.get(held[0])) is not None:
            # its executor can tell: alive while it lists the job
            return Holder(job=self.names.get(run_id, held[1])) if held[1] in live else None
        row = self.running.get(run_id)
        if row is None:
            return None  # not running
        if row.get("host") == self.host and (run_dir / LOCK_FILE).exists():
            return None  # on this host a free lock means its process is gone, however it died
        return None if row.get("stale") else Holder(row.get("host"))

    def is_alive(self, run_id: str) -> bool:
        """Whether a live process trains ``run_id`` now."""
        return self.holder(run_id) is not None

    def mark(self, running: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``ablate status``'s running rows with ``stale`` set by this rule (``gone``: True where the process
        is known to be gone at once, on this host or from its executor, not just quiet; ``ended``: True where
        it is gone because the run finished: its complete ``result.json`` waits to be recorded, by its own
        ``ablate run`` a moment later, else by the next ``ablate run`` or ``ablate ingest``, and nothing was
        cut off; ``failed``: True where it crashed while the store could not be told: its ``error.txt`` says
        how, and the next ``ablate run`` records it failed)."""
        from ablate.execute.job import crashed, finished_result

        for row in running:
            alive = self.is_alive(row["run_id"])
            run_dir = layout.run_dir(self.home, row["run_id"])
            row["ended"] = not alive and finished_result(run_dir) is not None
            row["failed"] = not alive and not row["ended"] and crashed(run_dir) is not None
            row["gone"] = not alive and not row["ended"] and not row["failed"] and not row.get("stale")
            row["stale"] = not alive and not row["ended"]
        return running


def job_liveness(store: Store, home: Path, running: Sequence[Mapping[str, Any]],
                 run_ids: Iterable[str] | None = None) -> Liveness:
    """The liveness rule with the jobs holding the unfinished runs among ``run_ids`` (all runs when None)
    asked of their executors (``squeue``, Ray's state API)."""
    from ablate.execute.jobs import grid_jobs

    wanted = None if run_ids is None else set(run_ids)
    rows = [r for r in grid_jobs(store, unfinished=True) if wanted is None or r["run_id"] in wanted]
    live = {ex.name: ex.alive([r["job_id"] for r in rows if r["executor"] == ex.name])
            for ex in executors({r["executor"] for r in rows})}
    names = {r["run_id"]: executor_name(r["executor"], r["job_id"]) for r in rows}
    return Liveness(home, running, jobs={r["run_id"]: (r["executor"], r["job_id"]) for r in rows}, live=live,
                    names=names)


@dataclass
class Opened:
    """A grid opened for running: its runs, the store (closed with this object), and the triage's answer."""

    name: str
    text: str
    planned: list[Any]
    store: Store
    home: Path
    decisions: list[RunAction]
    todo: list[RunAction] = field(default_factory=list)  # resumed first, then new
    skipped: dict[str, str] = field(default_factory=dict)  # run_id -> why
    held: dict[str, Holder] = field(default_factory=dict)  # run_id -> who trains it now
    # run_id -> status of a result found on disk and ingested
    reused: dict[str, str] = field(default_factory=dict)
    failed_before: list[str] = field(default_factory=list)  # skipped because they failed (--retry-failed)
    liveness: Liveness | None = None
    warnings: list[str] = field(default_factory=list)  # for the user (a held-out set that is training data)
    joins: bool = False  # the runs join the grid's current configuration (--set), else they are it

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()

    def held_line(self) -> str | None:
        """The one line saying which runs another process trains (None when none)."""
        if not self.held:
            return None
        who = sorted({str(h) for h in self.held.values()})
        return f"{len(self.held)} running in another process ({', '.join(who)}), skipped"


@contextmanager
def planning() -> Iterator[None]:
    """Ctrl-C while a grid is expanded, checked or registered (before anything trains) becomes
    ``PlanningInterrupted``: one line, exit 130. The registration is one transaction: none of it is left."""
    try:
        yield
    except KeyboardInterrupt:
        raise PlanningInterrupted() from None


def expand_grid(path: str | Path, sets: Sequence[str] = (), *, home: Path,
                extra: Sequence[Mapping[str, Any]] = ()
                ) -> Expanded:
    """Load the grid at ``path`` (with ``--set`` overrides, and ``extra`` runs beyond the file's as
    ``include`` entries: the seeds ``--until-resolved`` adds) and expand it, its data fingerprinted under
    ``home``."""
    from ablate.grid import expand, load_grid
    from ablate.runner.fingerprints import Fingerprints

    grid = load_grid(path, sets)
    if extra:
        grid = dataclasses.replace(grid, include=(*grid.include, *map(dict, extra)))
    fingerprints = Fingerprints.for_home(Path(home))
    return Expanded(Path(path), grid, expand(grid, fingerprints=fingerprints), fingerprints,
                    joins=bool(sets) or bool(extra))


def open_grid(path: str | Path | Expanded, sets: Sequence[str] = (), *, home: Path, store: str | None,
              retry_failed: bool, stale_after_s: float, remote: bool = False, append: bool = False,
              extra: Sequence[Mapping[str, Any]] = ()) -> Opened:
    """Load, expand, open the store, register the grid and triage its runs (see the module docstring).
    ``path`` may be the grid already expanded (``expand_grid``, with its own ``sets`` and ``extra``), so that
    it is expanded once.

    ``extra``: runs beyond the file's, as ``include`` entries (the seeds ``--until-resolved`` adds); like
    ``--set`` runs they join the grid's current ones.

    A grid whose name the store holds with another ``base`` is refused unless ``append`` (the same study
    grown: its runs so far stay in it). The runs planned from the file alone (no ``sets``) are the grid's
    current configuration, its other runs kept as older ones; with ``--set`` they join the current runs.
    ``remote``: the runs train in processes elsewhere (Slurm tasks, Ray tasks), which see the home by its
    absolute path."""
    from ablate.runner.preflight import check_data, check_tokenizers, heldout_warnings
    from ablate.store import Store

    expanded = path if isinstance(path, Expanded) else expand_grid(path, sets, home=Path(home), extra=extra)
    grid, planned, fingerprints = expanded.grid, expanded.planned, expanded.fingerprints
    provenance.announce(expanded.path)  # the grid's commit, for the workers this process starts
    check_tokenizers(planned, source=grid.source)  # a tokenizer that cannot be made or does not fit the model
    check_data(planned, source=grid.source)  # data that cannot work: one line, before anything is recorded
    home = layout.usable_home(Path(home).absolute() if remote else Path(home))  # checked; nothing made yet
    opened_store = Store.open(store, home=home)  # a bad URL or a store that does not answer: nothing made
    try:
        layout.runs_dir(home).mkdir(parents=True, exist_ok=True)
        fingerprints.save()  # the home exists now
        # else an upgrade retrains finished runs
        opened_store.require_current_ids([p.run_id for p in planned])
        check_grid_name(opened_store, grid, append=append)
        opened = Opened(grid.name, grid.text, planned, opened_store, home, [],
                        warnings=heldout_warnings(planned, source=grid.source), joins=expanded.joins)
        _triage(opened, retry_failed=retry_failed, stale_after_s=stale_after_s)
    except BaseException:
        opened_store.close()
        raise
    return opened


def check_grid_name(store: Store, grid: Any, *, append: bool) -> None:
    """Refuse (UserInputError) a grid whose name ``store`` holds with another base, unless ``append``: two
    grid files of one name would merge silently into one grid."""
    from ablate.errors import UserInputError
    from ablate.grid.schema import file_base
    from ablate.store.engine import display_url
    from ablate.store.records import flatten

    stored = store.grid_text(grid.name)
    if append or stored is None or stored == grid.text:
        return
    old, new = file_base(stored), file_base(grid.text)
    if old is None or old == new:
        return  # the same base (the axes grew), or a text this version cannot read
    assert new is not None  # the grid being opened was read from its text
    a, b = flatten(old), flatten(new)
    diff = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
    first = diff[0] if diff else "base"
    raise UserInputError(
        f"{grid.source}: the store {display_url(store.url)} already holds a grid named {grid.name!r} with "
        f"another base ({first}: {a.get(first, '(not set)')!r} there, {b.get(first, '(not set)')!r} "
        f"here{f'; and {len(diff) - 1} more' if len(diff) > 1 else ''}): give this grid its own name, or "
        "pass --append if it is the same study grown")


def _triage(o: Opened, *, retry_failed: bool, stale_after_s: float) -> None:
    store = o.store
    ids = list(dict.fromkeys(p.run_id for p in o.planned))
    before = store.statuses(run_ids=ids)
    running = (
        store.status_summary(stale_after_s=stale_after_s)["running"] if "running" in before.values() else []
    )
    if before:  # a run held by a live job of any executor is never trained here, whichever executor asks
        o.liveness = job_liveness(store, o.home, running, ids)
    else:
        o.liveness = Liveness(o.home, running)
    for rid, status in before.items():  # crashed while the store was away: failed, as it happened
        if status in ("queued", "running") and (error := unrecorded_crash(o, rid)) is not None:
            store.mark_failed(run_id=rid, error=error)
            before[rid] = "failed"
    o.decisions = triage(o.planned, before, retry_failed=retry_failed, is_alive=o.liveness.is_alive,
                         has_checkpoint=lambda rid: (layout.run_dir(o.home, rid) / CHECKPOINT).is_file())
    store.register_grid(name=o.name, text=o.text, runs=o.planned, whole=not o.joins)
    todo = []
    for d in o.decisions:
        holder = o.liveness.holder(d.run_id) if d.action != "skip" or d.status == "running" else None
        if holder is not None:  # training (or queued in an executor's job) elsewhere, whatever the store says
            o.held[d.run_id] = holder
            o.skipped[d.run_id] = f"queued in {holder}" if holder.job else "running in another process"
            continue
        if d.action == "skip":
            o.skipped[d.run_id] = d.reason
            if d.status == "failed":
                o.failed_before.append(d.run_id)
            continue
        if (found := ingest_found(store, o.home, d.run_id)) is not None:
            o.reused[d.run_id] = found
            continue
        if d.status in ("running", "failed"):
            store.mark_queued(run_id=d.run_id)
            # retried: its last crash is no longer how it ended
            (layout.run_dir(o.home, d.run_id) / ERROR_FILE).unlink(missing_ok=True)
        todo.append(d)
    o.todo = [d for d in todo if d.action == "resume"] + [d for d in todo if d.action == "train"]


def unrecorded_crash(o: Opened, run_id: str) -> str | None:
    """The error of a run the store still has queued or running but whose last attempt crashed (its process
    gone, its ``error.txt`` there): the store was away when it failed."""
    from ablate.execute.job import crashed

    assert o.liveness is not None
    return None if o.liveness.is_alive(run_id) else crashed(layout.run_dir(o.home, run_id))


def ingest_found(store: Store, home: Path, run_id: str) -> str | None:
    """Ingest a complete ``result.json`` of a finished run already in its directory; its status, else None."""
    from ablate.execute.job import finished_result

    result = finished_result(layout.run_dir(home, run_id))
    if result is None:
        return None
    store.ingest(result)
    log.info("run %s had finished (%s) without being recorded: ingested its result.json", run_id,
             result.status)
    return str(result.status)
