"""``ablate status``: what the store says of each grid, what runs now, and which ``running`` runs' processes
are gone, by the one liveness rule of ``ablate run`` (``liveness.Liveness``, with the executors' jobs their
executors list as alive).

``grid_status(store, home, grid, stale_after_s=, older=)`` -> the summary (``Store.status_summary``'s
``grids``, ``running`` and ``stale``, each running row marked ``gone``/``ended``/``failed``/``stale``, and
``jobs``: the unfinished runs an executor's job holds, with the job's state as its executor says it);
``status_warnings(summary, ...)`` -> the lines that say what to do about them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.execute.executor import executor_name, executors
from ablate.execute.liveness import JobRow, grid_jobs, job_liveness
from ablate.store.api import Store


def grid_status(store: Store, home: Path, grid: str | None = None, *, stale_after_s: float = 300.0,
                older: bool = False) -> dict[str, Any]:
    """Runs by status per grid (its current configuration; ``older``: its older ones too), the running runs
    with how their processes are (``Liveness.mark``), the stale ones' ids, and the runs in executors' jobs."""
    summary = store.status_summary(grid, stale_after_s=stale_after_s, older=older)
    summary["jobs"] = job_rows(store, grid)  # runs in executors' jobs, with the jobs' states
    if summary["running"]:  # the one liveness rule of `ablate run`
        job_liveness(store, home, summary["running"]).mark(summary["running"])
        summary["stale"] = [r["run_id"] for r in summary["running"] if r["stale"]]
    return summary


def job_rows(store: Store, grid: str | None = None) -> list[JobRow]:
    """What ``ablate status`` shows of the executors' jobs: each unfinished run that carries one, with the
    job in its executor's words (``job``) and its state as the executor says it (``state``: ``"gone"`` when
    the executor no longer knows it, None when it cannot tell from here)."""
    rows = grid_jobs(store, grid, unfinished=True)
    for ex in executors({r["executor"] for r in rows}):
        mine = [r for r in rows if r["executor"] == ex.name]
        states = ex.states([r["job_id"] for r in mine])
        for r in mine:
            r["state"] = None if states is None else states.get(r["job_id"], "gone")
    for r in rows:
        r.setdefault("state", None)
        r["job"] = executor_name(str(r["executor"]), r["job_id"])
    return rows


def status_warnings(summary: dict[str, Any], *, older: bool, stale_after_s: float) -> list[str]:
    """The warnings under ``ablate status``'s tables: grids' older runs left out (without ``older``), and
    running runs that crashed, ended, were cut off, or are quiet past ``stale_after_s``."""
    out = []
    if not older:
        for row in summary["grids"]:
            if row["older"]:
                out.append(f"grid {row['grid']}: {row['older']} run(s) of older configurations left out "
                           "(runs its last `ablate run` did not plan: an edited grid file, changed data); "
                           "--older counts them")
    running = summary["running"]
    gone = [r["run_id"] for r in running if r.get("gone")]
    crashed = [r["run_id"] for r in running if r.get("failed")]
    quiet = [rid for rid in summary["stale"] if rid not in gone and rid not in crashed]
    ended = [r["run_id"] for r in running if r.get("ended")]
    if crashed:
        out.append(f"{len(crashed)} run(s) marked running failed while the store could not be told (their "
                   f"error.txt says why; the next `ablate run` of their grid records them failed): "
                   f"{', '.join(crashed)}")
    if ended:
        out.append(f"{len(ended)} run(s) marked running have ended and wait to be recorded (by their `ablate "
                   "run` in a moment; if it is gone, the next `ablate run` of their grid or `ablate ingest` "
                   f"records them): {', '.join(ended)}")
    if gone:
        out.append(f"{len(gone)} run(s) marked running were cut off (their process on this machine is gone; "
                   f"the next `ablate run` of their grid resumes them): {', '.join(gone)}")
    if quiet:
        out.append(f"{len(quiet)} running run(s) have no heartbeat for over {stale_after_s:.0f}s "
                   f"(worker gone?): {', '.join(quiet)}")
    return out
