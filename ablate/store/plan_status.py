"""The status column of ``ablate plan``: each planned run's status in the store, if there is one.

The store is opened only when it exists (the SQLite file is there, or a server URL is given): planning never
creates a database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from ablate.grid.expand import PlannedRun
from ablate.grid.planning import run_planner
from ablate.grid.view import NEW
from ablate.store.api import Store
from ablate.store.engine import check_url


def _sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URL; ``None`` for an in-memory one."""
    path = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
    return None if path in ("", ":memory:") else Path(path)


def store_exists(store: str | None, home: Path) -> bool:
    """Is there a store to ask? The default SQLite file, or the URL's file, exists; a server URL always
    counts."""
    if store is None:
        return (home / "ablate.db").exists()
    if store.startswith("sqlite"):
        path = _sqlite_file(store)
        return path is not None and path.exists()
    return True


def statuses(runs: Sequence[PlannedRun], *, store: str | None, home: Path) -> dict[str, str]:
    """Each run's status in the store, ``new`` for one it has never seen (or when there is no store),
    ``"<status> as <old id> (ablate db rehash)"`` for one stored under an id from an older ablate, and
    ``"stale: <field> changed since run <old id>"`` for one whose stem the store holds under another id (what
    it reads outside its config changed: its data; ``ablate run`` trains it anew)."""
    run_ids = [r.run_id for r in runs]
    found: dict[str, str] = {}
    if store is not None:  # a URL that cannot work is refused here too, before anything is made
        check_url(store)
    if run_ids and store_exists(store, home):
        with Store.open(store, home=home) as db:
            found = dict(db.statuses(run_ids=run_ids))
            found.update({new: f"{status} as {old} (ablate db rehash)"
                          for new, (old, status) in db.outdated(run_ids).items()})
            unknown = {r.run_id: r.stem_id for r in runs if r.run_id not in found and r.stem_id != r.run_id}
            planned = {r.run_id: r for r in runs}
            for rid, (old, _status, config) in db.same_stem(unknown).items():
                found[rid] = stale_line(planned[rid].config, config, old)
    return {rid: found.get(rid, NEW) for rid in run_ids}


def stale_line(planned: BaseModel, stored: Mapping[str, object], old: str) -> str:
    """``stale: data.train.0.fingerprint changed since run <old>``: the identity fields that differ; for a
    command run, ``new: the code changed since run <old> (git:abc -> git:def+diff:...)``: the run's trainer's
    planner says (``GridPlanner.stale_line``)."""
    return run_planner(planned).stale_line(planned, stored, old)
