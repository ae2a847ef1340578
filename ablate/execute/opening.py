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

Who holds a run now is decided by the one liveness rule (``ablate.execute.liveness``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ablate import layout, provenance
from ablate.errors import PlanningInterrupted, UserInputError
from ablate.execute.executor import Expanded
from ablate.execute.last_attempt import ERROR_FILE, crashed, finished_result
from ablate.execute.liveness import Holder, Liveness, job_liveness
from ablate.execute.triage import RunAction, triage
from ablate.grid import Grid, PlannedRun
from ablate.grid.planning import plan_grid, planner
from ablate.grid.schema import file_base
from ablate.runner.fingerprints import Fingerprints
from ablate.store import Store
from ablate.store.engine import display_url
from ablate.store.records import flatten
from ablate.trainers.registry import MODEL, TRAINERS, Trainer

log = logging.getLogger(__name__)


@dataclass
class Opened:
    """A grid opened for running: its runs, the store (closed with this object), and the triage's answer."""

    name: str
    text: str
    planned: list[PlannedRun]
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
    trainer: Trainer = TRAINERS[MODEL]  # what trains the runs (its job function)

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
                extra: Sequence[Mapping[str, object]] = ()
                ) -> Expanded:
    """Load the grid at ``path`` (with ``--set`` overrides, and ``extra`` runs beyond the file's as
    ``include`` entries: the seeds ``--until-resolved`` adds) and expand it, its data fingerprinted under
    ``home``."""
    fingerprints = Fingerprints.for_home(Path(home))
    planned = plan_grid(path, sets, fingerprints=fingerprints, extra=extra)
    return Expanded(Path(path), planned.grid, planned.planned, fingerprints, joins=bool(sets) or bool(extra),
                    trainer=planned.trainer)


def open_grid(path: str | Path | Expanded, sets: Sequence[str] = (), *, home: Path, store: str | None,
              retry_failed: bool, stale_after_s: float, remote: bool = False, append: bool = False,
              extra: Sequence[Mapping[str, object]] = ()) -> Opened:
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
    expanded = path if isinstance(path, Expanded) else expand_grid(path, sets, home=Path(home), extra=extra)
    grid, planned, fingerprints = expanded.grid, expanded.planned, expanded.fingerprints
    provenance.announce(expanded.path)  # the grid's commit, for the workers this process starts
    # what cannot work (the model's tokenizers and data): one line, before anything is made
    warnings = planner(expanded.trainer).check_inputs(planned, grid.source, strict=True)
    home = layout.usable_home(Path(home).absolute() if remote else Path(home))  # checked; nothing made yet
    opened_store = Store.open(store, home=home)  # a bad URL or a store that does not answer: nothing made
    try:
        layout.runs_dir(home).mkdir(parents=True, exist_ok=True)
        fingerprints.save()  # the home exists now
        # else an upgrade retrains finished runs
        opened_store.require_current_ids([p.run_id for p in planned])
        check_grid_name(opened_store, grid, append=append)
        opened = Opened(grid.name, grid.text, planned, opened_store, home, [],
                        warnings=warnings,
                        joins=expanded.joins, trainer=expanded.trainer)
        _triage(opened, retry_failed=retry_failed, stale_after_s=stale_after_s)
    except BaseException:
        opened_store.close()
        raise
    return opened


def check_grid_name(store: Store, grid: Grid, *, append: bool) -> None:
    """Refuse (UserInputError) a grid whose name ``store`` holds with another base, unless ``append``: two
    grid files of one name would merge silently into one grid."""
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
    configs = {p.run_id: p.config for p in o.planned}
    runs_planner = planner(o.trainer)

    def has_checkpoint(rid: str) -> bool:
        return runs_planner.resumes(configs[rid], layout.run_dir(o.home, rid), rid)

    o.decisions = triage(o.planned, before, retry_failed=retry_failed, is_alive=o.liveness.is_alive,
                         has_checkpoint=has_checkpoint)
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
    assert o.liveness is not None
    return None if o.liveness.is_alive(run_id) else crashed(layout.run_dir(o.home, run_id))


def ingest_found(store: Store, home: Path, run_id: str) -> str | None:
    """Ingest a complete ``result.json`` of a finished run already in its directory; its status, else None."""
    result = finished_result(layout.run_dir(home, run_id))
    if result is None:
        return None
    store.ingest(result)
    log.info("run %s had finished (%s) without being recorded: ingested its result.json", run_id,
             result.status)
    return str(result.status)
