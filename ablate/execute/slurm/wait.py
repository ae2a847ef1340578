"""``ablate run --executor slurm --wait``: the submitted array followed until every run has ended, through a
store that may go away meanwhile (its own ``Recorder``, ``WAIT``'s words).
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ablate.execute.opening import ingest_found
from ablate.execute.recorder import Recorder, Wording
from ablate.execute.slurm.array import SlurmOptions, SlurmReport
from ablate.execute.slurm.queue import ALIVE, job_states
from ablate.store.api import Store

# what ``--wait`` says when the store goes away, when it is back, and when it stayed away past the patience
WAIT = Wording(
    away="the store {where} is {away}: the Slurm tasks train on and record their runs when it is back; "
         "waiting for it (up to {patience:.0f} s)",
    back="the store {where} is back after {down:.0f} s",
    gave_up="the store {where} has been {away} for {down:.0f} s: stopped waiting; array {array} goes "
            "on, and its runs are recorded when the store is back (by their tasks, or by the next "
            "`ablate run` for a task that ended meanwhile)")
FINAL = ("done", "diverged", "failed")

def wait_for(store: Store, report: SlurmReport, opts: SlurmOptions, console: Console) -> None:
    """Follow the submitted runs until each has ended (done, diverged, failed) or its Slurm job is gone; a run
    whose job ended without recording anything is marked failed (one that left a complete ``result.json`` is
    ingested). A store that goes away is waited for, up to ``opts.store_patience_s`` seconds: the tasks train
    on and record their runs themselves when it is back; past the patience this stops waiting (exit 1)."""
    ids = list(report.jobs)
    told: set[str] = set()
    suspect: set[str] = set()  # not alive in squeue at the last look (twice in a row: lost)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[states]}"), TimeElapsedColumn(), console=console,
                        transient=True, disable=not console.is_terminal)
    task = progress.add_task(f"array {report.array_id}", total=len(ids), states="")
    recorder = Recorder(store, home=report.home, patience_s=opts.store_patience_s)
    wording = WAIT.filled(array=str(report.array_id))

    def say(news: str, text: str) -> None:
        if news != "gave_up":  # that one is the command's error line (report.store_error)
            console.print(text, highlight=False, soft_wrap=True)

    def look() -> bool:
        """One look at the store and the queue; True once every run has ended."""
        statuses = store.statuses(run_ids=ids)
        states = job_states(report.jobs.values())
        for rid in ids:
            if statuses.get(rid) in FINAL and rid not in told:
                told.add(rid)
                console.print(f"{statuses[rid]:>9} {rid}  (Slurm job {report.jobs[rid]})", highlight=False)
        gone = {rid for rid in ids if rid not in told and states.get(report.jobs[rid]) not in ALIVE}
        counts: dict[str, int] = {}
        for s in states.values():
            counts[s] = counts.get(s, 0) + 1
        progress.update(task, completed=len(told),
                        states=" ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())))
        if len(told) == len(ids):
            return True
        if lost := gone & suspect:
            _lost(store, sorted(lost), report, states)  # re-reads first: it may have just finished
        suspect.clear()
        suspect.update(gone)
        return False

    try:
        with progress:
            while True:
                done = recorder.attempt(look)  # None while the store is away: the tasks train on
                if recorder.watch(say, wording):  # away past the patience: stop waiting
                    report.store_error = recorder.gave_up
                    return
                if done:
                    break
                time.sleep(opts.poll_s)
    except KeyboardInterrupt:
        report.interrupted = True
        console.print(f"stopped waiting; array {report.array_id} goes on (ablate status shows it)",
                      highlight=False)
    report.statuses = recorder.attempt(lambda: store.statuses(run_ids=ids)) or report.statuses


def _lost(store: Store, gone: list[str], report: SlurmReport, states: dict[str, str]) -> None:
    statuses = store.statuses(run_ids=gone)
    for rid in gone:
        if statuses.get(rid) in FINAL or ingest_found(store, report.home, rid) is not None:
            continue  # recorded meanwhile, or left its result.json (the store was away when it ended)
        job = report.jobs[rid]
        state = states.get(job, "gone from squeue")
        msg = (f"Slurm job {job} ended ({state}) without recording a result; its log is in "
               f"{report.log_dir}/{job}/")
        store.mark_failed(run_id=rid, error=msg)
