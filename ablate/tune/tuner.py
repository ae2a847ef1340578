"""The search of ``ablate tune`` on one executor session: each cell's study, the rounds of trials, the
bracketing probes of ``--find-max-stable``, the results, and ``--then-run``'s tuned grid (``search.py`` says
the steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, SupportsFloat

import yaml
from optuna.trial import TrialState
from rich.console import Console

from ablate.execute.executor import Runner, RunOptions
from ablate.execute.grid_run import run_grid
from ablate.execute.locks import is_locked
from ablate.execute.messages import Job
from ablate.grid import Grid
from ablate.layout import run_dir
from ablate.tune.execute import Outcome
from ablate.tune.options import CellResult, TuneOptions, TuneReport
from ablate.tune.protocol import (
    Bracket,
    Point,
    best_metric,
    best_point,
    bracket_from_points,
    first_unstable_above,
    is_stable,
    max_stable,
)
from ablate.tune.space import SearchSpace, TuneCell, study_name
from ablate.tune.storage import make_pruner
from ablate.tune.studies import open_study, result_point, study_points, tell
from ablate.tune.trials import TrialConfig, Trials
from ablate.tune.tuned import tuned_grid, write_tuned_grid

if TYPE_CHECKING:
    import optuna
    from optuna.storages import RDBStorage

    from ablate.grid import PlannedRun
    from ablate.store.api import Store


@dataclass
class TuneItem:
    """A run to make in this round: a study's trial (``number``, ``trial_id``) or a probe (``number``
    None)."""

    cell: TuneCell
    value: float
    number: int | None = None
    trial_id: int | None = None
    run_id: str = ""
    config: TrialConfig | None = None


class Tuner:
    """The studies of a grid's cells and the runs that answer them, on one executor session's pool;
    ``trials`` says what a trial is for the grid's trainer (``ablate.tune.trials``)."""

    def __init__(self, grid: Grid, cells: list[TuneCell], space: SearchSpace, trials: Trials, pruner: str,
                 opts: TuneOptions, store: Store, storage: RDBStorage, console: Console):
        self.grid, self.cells, self.space, self.trials, self.pruner = grid, cells, space, trials, pruner
        self.metric, self.higher = trials.metric, trials.higher
        self.opts, self.store, self.storage, self.console = opts, store, storage, console
        self.tune_grid = f"{grid.name}/tune"
        self.report = TuneReport(grid=grid.name, tune_grid=self.tune_grid, tolerance=opts.tolerance,
                                 metric=self.metric)
        self.text = yaml.safe_dump({"tune_of": grid.name, **space.as_attrs(), "metric": self.metric,
                                    "pruner": pruner, "grid": grid.text}, sort_keys=False)
        self.notes: dict[str, str] = {}  # cell key -> why its bracketing search did not run or stopped
        self.studies = {c.key: self._open(c) for c in cells}

    # ------------------------------------------------------------ studies
    def _open(self, cell: TuneCell) -> optuna.Study:
        attrs = {"grid": self.grid.name, "cell": cell.label, "cell_key": cell.key, "variant": cell.variant,
                 "axes": cell.axes, "seed": cell.base.config.seed, **self.space.as_attrs(),
                 "metric": self.metric, "better": "higher" if self.higher else "lower", "pruner": self.pruner,
                 "tolerance": self.opts.tolerance}
        least, most = self.trials.resources(cell)
        pruner = make_pruner(self.pruner, min_resource=least, max_resource=most)
        return open_study(self.storage, study_name(self.grid.name, self.space.param, cell), attrs,
                          trials=self.opts.trials, pruner=pruner)

    def _queue(self) -> dict[str, tuple[list[optuna.trial.FrozenTrial], int]]:
        """Per cell: the trials cut off earlier (to resume) and how many new trials to ask for."""
        out = {}
        for cell in self.cells:
            trials = self.studies[cell.key].get_trials(deepcopy=False)
            taken = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED,
                                                      TrialState.RUNNING)]
            resume = []
            for t in trials:
                if t.state != TrialState.RUNNING:
                    continue
                rid = t.user_attrs.get("run_id")
                if rid is None:  # asked, but never made into a run: nothing to resume
                    tell(self.studies[cell.key], t.number, Point(0.0, "failed"), error="never started")
                    taken.remove(t)
                elif not is_locked(run_dir(self.opts.home, rid)):  # else another process trains it now
                    resume.append(t)
            out[cell.key] = (resume, max(0, self.opts.trials - len(taken)))
        return out

    # ------------------------------------------------------------ 2. the search
    def search(self, pool: Runner) -> None:
        queue = self._queue()
        total = sum(len(r) + n for r, n in queue.values())
        if not total:
            return
        pool.expect(total)
        width = pool.width
        while not pool.interrupted:
            items: list[TuneItem] = []
            progress = True
            while len(items) < width and progress:
                progress = False
                for cell in self.cells:
                    if len(items) < width and (item := self._next(cell, queue)) is not None:
                        items.append(item)
                        progress = True
            if not items:
                return
            for item, point, error in self._run_round(pool, items):
                if point is not None:
                    assert item.number is not None  # the search makes trials only (probes are the bracket's)
                    tell(self.studies[item.cell.key], item.number, point, error=error)

    def _next(self, cell: TuneCell, queue: dict[str, tuple[list[optuna.trial.FrozenTrial], int]]
              ) -> TuneItem | None:
        resume, n_new = queue[cell.key]
        if resume:
            t = resume.pop(0)
            return TuneItem(cell, float(t.params[self.space.param]), t.number, t._trial_id)
        if n_new <= 0:
            return None
        queue[cell.key] = (resume, n_new - 1)
        trial = self.studies[cell.key].ask({self.space.param: self.space.distribution()})
        return TuneItem(cell, trial.params[self.space.param], trial.number, trial._trial_id)

    # ------------------------------------------------------------ a round of runs
    def _run_round(self, pool: Runner, items: list[TuneItem]
                   ) -> list[tuple[TuneItem, Point | None, str | None]]:
        """Make each item's run (reusing a finished one), train the rest; ``(item, point or None, error)``."""
        param = self.space.param
        for item in items:
            item.config = self.trials.config(item.cell, param, item.value)
            item.run_id = self.trials.run_id(item.config)
            if item.number is not None:
                self.storage.set_trial_user_attr(item.trial_id, "run_id", item.run_id)
        base = {i.run_id: i for i in items}
        self.store.register_grid(name=self.tune_grid, text=self.text, whole=False, runs=[
            self.trials.row(i.cell, i.config, param, i.value) for i in base.values() if i.config is not None])
        status = self.store.statuses(run_ids=list(base))
        stored = self._stored({rid for rid, s in status.items() if s in ("done", "diverged", "pruned",
                                                                         "failed")})
        jobs, out = [], []
        for rid, item in base.items():
            row = stored.get(rid)
            if row is not None and row["status"] != "failed":
                continue  # reused below
            config = item.config
            assert config is not None  # made above
            trial = None
            if item.number is not None and (spec := self.trials.spec(item.cell, config)) is not None:
                trial = {"storage": self.store.url, "study": self.studies[item.cell.key].study_name,
                         "trial_id": item.trial_id, **spec}
            jobs.append(Job(rid, str(pool.run_dir(rid)), config.model_dump(mode="json"), trial=trial,
                            label=f"{item.cell.label}  {self.space.param}={item.value:.3g}",
                            name=self._mlflow_name(item, config)))
        outcomes = pool.run(jobs) if jobs else {}
        for item in items:
            src = "trial" if item.number is not None else "probe"
            if item.run_id in outcomes:
                o = outcomes[item.run_id]
                self._count(o.kind)
                out.append((item, self._point(item, o, src), o.error))
            else:
                row = stored[item.run_id]
                self._count("reused")
                point = result_point(item.value, str(row["status"]), _num(row.get(self.metric)), item.run_id,
                                     source=src)
                out.append((item, point, None))
        return out

    def _mlflow_name(self, item: TuneItem, config: TrialConfig) -> str:
        """A trial's MLflow run name: ``baseline-s0 train.lr=0.0032`` (its cell's other axes after, ``probe``
        for a bracketing probe), so a cell's trials, all at one seed, are told apart."""
        others = "".join(f" {k}={v}" for k, v in item.cell.axes.items() if k != "variant")
        kind = "" if item.number is not None else " probe"
        return (f"{item.cell.variant}-s{config.seed} {self.space.param}={item.value:.4g}{others}{kind}")

    def _stored(self, run_ids: set[str]) -> dict[str, dict[str, object]]:
        if not run_ids:
            return {}
        frame = self.store.runs_frame(grid=self.tune_grid)
        frame = frame[frame["run_id"].isin(run_ids)]
        return {r["run_id"]: r for r in frame.to_dict("records")}

    def _point(self, item: TuneItem, o: Outcome, source: str) -> Point | None:
        if o.kind in ("interrupted", "busy"):
            return None  # the trial stays RUNNING; the next `ablate tune` resumes it
        if o.kind in ("done", "diverged"):
            metric = o.result.summary.get(self.metric) if o.result is not None else None
            return result_point(item.value, o.kind, _num(metric), item.run_id, source=source)
        return result_point(item.value, o.kind, None, item.run_id, source=source)

    def _count(self, kind: str) -> None:
        self.report.counts[kind] = self.report.counts.get(kind, 0) + 1

    # ------------------------------------------------------------ 3. the largest stable value
    def bracket(self, pool: Runner) -> None:
        tol, brackets, notes = self.opts.tolerance, {}, {}
        for cell in self.cells:
            study = self.studies[cell.key]
            left = self.opts.stable_steps - len(study.user_attrs.get("probes") or [])
            if left <= 0:
                continue
            b, why = bracket_from_points(study_points(study, self.space.param), high=self.space.high,
                                         steps=left, log=self.space.log, tolerance=tol, higher=self.higher)
            if b is None:
                notes[cell.key] = why
            else:
                brackets[cell.key] = b
        self.notes.update(notes)
        if brackets:
            pool.expect(sum(b.steps for b in brackets.values()))
        while brackets and not pool.interrupted:
            items = []
            for key, b in list(brackets.items()):
                x = b.probe()
                if x is None:
                    del brackets[key]
                    continue
                cell = next(c for c in self.cells if c.key == key)
                items.append(TuneItem(cell, int(round(x)) if self.space.is_int else x))
            if not items:
                return
            for item, point, _ in self._run_round(pool, items):
                if point is not None:
                    self._record_probe(item, point, brackets)

    def _record_probe(self, item: TuneItem, point: Point, brackets: dict[str, Bracket]) -> None:
        study = self.studies[item.cell.key]
        probes = [*(study.user_attrs.get("probes") or []),
                  {"value": point.value, "outcome": point.outcome, "metric": point.metric,
                   "run_id": point.run_id}]
        study.set_user_attr("probes", probes)
        best = best_metric(study_points(study, self.space.param), higher=self.higher)
        ok = is_stable(point, best, self.opts.tolerance, higher=self.higher) if best is not None else None
        b = brackets[item.cell.key]
        if ok is None:  # crashed: no evidence, stop this bracket
            del brackets[item.cell.key]
            self.notes[item.cell.key] = f"the probe at {point.value:.3g} {point.outcome}; search stopped"
        else:
            b.record(point.value, ok)

    # ------------------------------------------------------------ results
    def summarize(self) -> None:
        tol, notes = self.opts.tolerance, self.notes
        for cell in self.cells:
            study = self.studies[cell.key]
            points = study_points(study, self.space.param)
            stable = max_stable(points, tol, higher=self.higher)
            unstable = (first_unstable_above(points, stable.value, tol, higher=self.higher)
                        if stable is not None else None)
            best = best_point(points, higher=self.higher)
            self.report.cells.append(CellResult(cell.label, cell.variant, study.study_name, cell.seeds,
                                                points, best, stable, unstable, notes.get(cell.key, "")))
            if best is not None and (edge := self.space.edge_warning(cell.label, best.value)) is not None:
                self.report.warnings.append(edge)

    # ------------------------------------------------------------ 4. the tuned runs
    def then_run(self) -> None:
        picks: list[tuple[PlannedRun, float | int]] = []
        for cell, result in zip(self.cells, self.report.cells, strict=True):
            if result.best is None:
                self.report.warnings.append(f"{cell.label}: no trial finished without diverging, so it has "
                                            f"no best {self.space.param}; left out of {self.grid.name}/tuned")
                continue
            value = int(result.best.value) if self.space.is_int else result.best.value
            picks += [(run, value) for run in cell.runs]
        if not picks:
            return
        path = write_tuned_grid(tuned_grid(self.grid, picks, self.space.param), self.opts.home,
                                note=f"written by `ablate tune` from {self.grid.source}: every run of grid "
                                     f"{self.grid.name!r} at its cell's best {self.space.param} (metric "
                                     f"{self.metric}); `ablate run` this file to run it again")
        self.report.tuned_grid = path
        self.console.print(f"ablate tune: the grid's seeds at each cell's best {self.space.param}: {path}",
                           highlight=False)
        o = self.opts
        self.report.tuned = run_grid(path, [],
                                     RunOptions(home=o.home, store=o.store, executor=o.executor, jobs=o.jobs,
                                                devices=o.devices, jobs_per_device=o.jobs_per_device,
                                                threads=o.threads, mlflow=o.mlflow,
                                                mlflow_experiment=o.mlflow_experiment, own=dict(o.own),
                                                device_memory=o.device_memory, console=self.console))


def _num(value: object) -> float | None:
    if not isinstance(value, SupportsFloat | str):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN (a missing value in the frame) is None
