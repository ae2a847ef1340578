"""``ablate tune``: one Optuna study per cell of a grid, its trials trained as ordinary runs, then the
protocol.

1. Expand the grid; group its runs into cells (``space.cells_of``: everything but the seed and the tuned
   parameter); open each cell's study in the store's database (``studies.open_study``: created once, continued
   after). ``--trials N`` is the total per study: finished and pruned trials count, so a rerun adds only what
   is missing, and resumes a trial that was cut off (its run resumes from its checkpoint).
2. Rounds of as many trials as there are workers, round-robin over the studies: ask each study for a value,
   build the run (the cell's first seed, the value set), register it under ``<grid>/tune``, and train it on
   the executor ``--executor`` names (``execute.trial_runner``: the local pool, Ray tasks) with the pruning
   callback, unless the store already
   has that run finished (the same sampled config is the same run id: its stored result is told instead). Then
   tell each study how its trial ended.
3. ``--find-max-stable``: per cell, bisect between the largest stable and the smallest unstable value seen
   (``protocol.Bracket``), ``--stable-steps`` probes in all (a rerun does not repeat them).
4. ``--then-run``: the grid's seeds of every cell at its best value, as the grid ``<grid>/tuned`` (a grid file
   written under ``$ABLATE_HOME/tune/``, run by ``ablate run``'s executor).

Trials run at the cell's first seed. When the grid does not evaluate during training (``eval.every: 0``) and a
pruner is on, trials evaluate every ``steps // 10`` steps (so pruning has something to read); their run ids
then differ from the grid's own runs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from ablate.errors import ConfigError, StoreError
from ablate.execute.executor import Runner, RunOptions, check_flags, executor
from ablate.execute.messages import Job
from ablate.execute.recorder import stops_when_away
from ablate.layout import run_dir
from ablate.tune.execute import Outcome, trial_runner
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
from ablate.tune.space import SearchSpace, TuneCell, cells_of, check_metric, study_name, with_value
from ablate.tune.studies import open_study, result_point, study_points, tell

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)


def tune(path: str | Path, sets: list[str] | tuple[str, ...] = (),
         options: TuneOptions | None = None) -> TuneReport:
    """Tune ``options.param`` per cell of the grid at ``path``; see the module docstring."""
    from ablate.execute.executor import Expanded
    from ablate.execute.opening import planning
    from ablate.grid import expand, load_grid
    from ablate.runner.fingerprints import Fingerprints
    from ablate.tune.storage import parse_pruner

    opts = options or TuneOptions()
    chosen = executor(opts.executor)
    check_flags(chosen, opts.own)
    t0 = time.monotonic()
    if opts.low is None or opts.high is None:
        raise ConfigError("give the range to search: --low and --high (e.g. --low 1e-4 --high 3e-2 --log)",
                          where="ablate tune")
    if opts.trials < 1:
        raise ConfigError(f"{opts.trials} trials asked for; allowed: 1 or more", where="--trials")
    if opts.tolerance < 0:
        raise ConfigError(f"a tolerance of {opts.tolerance:g}; allowed: 0 or more", where="--tolerance")
    space = SearchSpace(opts.param, float(opts.low), float(opts.high), opts.log)
    pruner = parse_pruner(opts.pruner)
    with planning():  # Ctrl-C while a large grid expands: one line, exit 130
        grid = load_grid(path, sets)
        if grid.match_params is not None and space.param.startswith("model."):
            raise ConfigError(f"cannot tune the model field {space.param!r} of a grid with match_params",
                              where="--param")
        fingerprints = Fingerprints.for_home(Path(opts.home))
        planned = expand(grid, fingerprints=fingerprints)
    if not planned:
        raise ConfigError("the grid has no runs", where=str(path))
    metric = check_metric(opts.metric, planned[0].config)
    cells = cells_of(planned, space.param)
    most = max(1, opts.trials * len(cells))  # never more workers than trials
    home = Path(opts.home)
    console = opts.console or Console(stderr=True)
    run_options = RunOptions(home=home, store=opts.store, executor=opts.executor, jobs=opts.jobs,
                             devices=opts.devices, jobs_per_device=opts.jobs_per_device, threads=opts.threads,
                             device_memory=opts.device_memory, own=dict(opts.own))
    # the executor's checks (the memory check among them) before any study or trial is made
    expanded = Expanded(Path(path), grid, planned, fingerprints, joins=True)
    with chosen.session(expanded, run_options) as session:
        if (crowded := session.describe(most)[1]):
            console.print(f"[yellow]warning:[/] {crowded}", highlight=False, soft_wrap=True)
        return _tune_on(session, grid, cells, space, metric, pruner, opts, most, console, t0)


def _tune_on(session: Any, grid: Any, cells: list[TuneCell], space: SearchSpace, metric: str, pruner: str,
             opts: TuneOptions, most: int, console: Console, t0: float) -> TuneReport:
    """``tune``'s studies and rounds on an executor's ``session``."""
    from ablate.store import Store
    from ablate.store.engine import display_url
    from ablate.tune.storage import optuna_storage

    home = Path(opts.home)
    store = Store.open(opts.store, home=home)
    resume = ("when the store is back, run the same command again: the studies resume, and trials that "
              f"finished meanwhile are read from {home / 'runs'}, not trained again")
    # between trials (Optuna's ask and tell, registering runs) the store going away is one line, as for
    # `ablate run`
    try:
        with stops_when_away(display_url(store.url), doing="while tuning", then=resume):
            tuner = _Tuner(grid, cells, space, metric, pruner, opts, store,
                           optuna_storage(store.url), console)
            with trial_runner(session, home=home, store=store, title=f"{grid.name}/tune", console=console,
                              metric=metric, mlflow=opts.mlflow, mlflow_experiment=opts.mlflow_experiment,
                              store_patience_s=opts.store_patience_s,
                              jobs=most) as pool:
                tuner.search(pool)
                if opts.find_max_stable and not pool.interrupted:
                    tuner.bracket(pool)
                tuner.report.interrupted = pool.interrupted
            # the store stayed away past --store-patience while trials trained
            if pool.store_error is not None:
                raise StoreError(f"{pool.store_error}; {resume}")
            tuner.summarize()
            if opts.then_run and not tuner.report.interrupted:
                tuner.then_run()
    finally:
        store.close()
    tuner.report.wall_s = time.monotonic() - t0
    return tuner.report


@dataclass
class _Item:
    """A run to make in this round: a study's trial (``number``, ``trial_id``) or a probe (``number``
    None)."""

    cell: TuneCell
    value: float
    number: int | None = None
    trial_id: int | None = None
    run_id: str = ""
    config: Any = None


class _Tuner:
    def __init__(self, grid: Any, cells: list[TuneCell], space: SearchSpace, metric: str, pruner: str,
                 opts: TuneOptions, store: Store, storage: Any, console: Console):
        self.grid, self.cells, self.space, self.metric, self.pruner = grid, cells, space, metric, pruner
        self.opts, self.store, self.storage, self.console = opts, store, storage, console
        self.tune_grid = f"{grid.name}/tune"
        self.report = TuneReport(grid=grid.name, tune_grid=self.tune_grid, tolerance=opts.tolerance)
        self.text = yaml.safe_dump({"tune_of": grid.name, **space.as_attrs(), "metric": metric,
                                    "pruner": pruner, "grid": grid.text}, sort_keys=False)
        self.every = {c.key: self._eval_every(c) for c in cells}
        self.notes: dict[str, str] = {}  # cell key -> why its bracketing search did not run or stopped
        self.studies = {c.key: self._open(c) for c in cells}

    # ------------------------------------------------------------ studies
    def _eval_every(self, cell: TuneCell) -> int | None:
        cfg = cell.base.config
        if cfg.eval.every or self.pruner == "none":
            return None
        return max(1, cfg.train.steps // 10)

    def _open(self, cell: TuneCell) -> Any:
        from ablate.tune.storage import make_pruner

        cfg = cell.base.config
        every = self.every[cell.key] or cfg.eval.every or 1
        attrs = {"grid": self.grid.name, "cell": cell.label, "cell_key": cell.key, "variant": cell.variant,
                 "axes": cell.axes, "seed": cfg.seed, **self.space.as_attrs(), "metric": self.metric,
                 "pruner": self.pruner, "tolerance": self.opts.tolerance}
        pruner = make_pruner(self.pruner, min_resource=every, max_resource=cfg.train.steps)
        return open_study(self.storage, study_name(self.grid.name, self.space.param, cell), attrs,
                          trials=self.opts.trials, pruner=pruner)

    def _queue(self) -> dict[str, tuple[list[Any], int]]:
        """Per cell: the trials cut off earlier (to resume) and how many new trials to ask for."""
        from optuna.trial import TrialState

        from ablate.execute.locks import is_locked

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
            items: list[_Item] = []
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

    def _next(self, cell: TuneCell, queue: dict[str, tuple[list[Any], int]]) -> _Item | None:
        resume, n_new = queue[cell.key]
        if resume:
            t = resume.pop(0)
            return _Item(cell, float(t.params[self.space.param]), t.number, t._trial_id)
        if n_new <= 0:
            return None
        queue[cell.key] = (resume, n_new - 1)
        trial = self.studies[cell.key].ask({self.space.param: self.space.distribution()})
        return _Item(cell, trial.params[self.space.param], trial.number, trial._trial_id)

    # ------------------------------------------------------------ a round of runs
    def _run_round(self, pool: Runner, items: list[_Item]) -> list[tuple[_Item, Point | None, str | None]]:
        """Make each item's run (reusing a finished one), train the rest; ``(item, point or None, error)``."""
        from ablate.grid import run_id

        for item in items:
            item.config = with_value(item.cell.base.config, self.space.param, item.value,
                                     eval_every=self.every[item.cell.key])
            item.run_id = run_id(item.config)
            if item.number is not None:
                self.storage.set_trial_user_attr(item.trial_id, "run_id", item.run_id)
        base = {i.run_id: i for i in items}
        same_model = not self.space.param.startswith("model.")  # else ingest fills the parameter counts in
        self.store.register_grid(name=self.tune_grid, text=self.text, whole=False, runs=[
            {"run_id": i.run_id, "config": i.config, "axes": {**i.cell.axes, self.space.param: i.value},
             "params": i.cell.base.params if same_model else None,
             "added_params": i.cell.base.added_params if same_model else None} for i in base.values()])
        status = self.store.statuses(run_ids=list(base))
        stored = self._stored({rid for rid, s in status.items() if s in ("done", "diverged", "pruned",
                                                                         "failed")})
        jobs, out = [], []
        for rid, item in base.items():
            row = stored.get(rid)
            if row is not None and row["status"] != "failed":
                continue  # reused below
            every = self.every[item.cell.key] or item.config.eval.every
            trial = None
            if item.number is not None and every:
                trial = {"storage": self.store.url, "study": self.studies[item.cell.key].study_name,
                         "trial_id": item.trial_id, "pruner": self.pruner, "min_resource": every,
                         "max_resource": item.config.train.steps,
                         "monitor": "loss" if self.metric == "train_loss" else "val_ppl"}
            jobs.append(Job(rid, str(pool.run_dir(rid)), item.config.model_dump(mode="json"), trial=trial,
                            label=f"{item.cell.label}  {self.space.param}={item.value:.3g}",
                            name=self._mlflow_name(item)))
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
                out.append((item,
                            result_point(item.value, row["status"], _num(row.get(self.metric)), item.run_id,
                                               source=src), None))
        return out

    def _mlflow_name(self, item: _Item) -> str:
        """A trial's MLflow run name: ``baseline-s0 train.lr=0.0032`` (its cell's other axes after, ``probe``
        for a bracketing probe), so a cell's trials, all at one seed, are told apart."""
        others = "".join(f" {k}={v}" for k, v in item.cell.axes.items() if k != "variant")
        kind = "" if item.number is not None else " probe"
        return (f"{item.cell.variant}-s{item.config.seed} {self.space.param}={item.value:.4g}{others}{kind}")

    def _stored(self, run_ids: set[str]) -> dict[str, Any]:
        if not run_ids:
            return {}
        frame = self.store.runs_frame(grid=self.tune_grid)
        frame = frame[frame["run_id"].isin(run_ids)]
        return {r["run_id"]: r for r in frame.to_dict("records")}

    def _point(self, item: _Item, o: Outcome, source: str) -> Point | None:
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
                                         steps=left, log=self.space.log, tolerance=tol)
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
                items.append(_Item(cell, int(round(x)) if self.space.is_int else x))
            if not items:
                return
            for item, point, _ in self._run_round(pool, items):
                if point is not None:
                    self._record_probe(item, point, brackets)

    def _record_probe(self, item: _Item, point: Point, brackets: dict[str, Bracket]) -> None:
        study = self.studies[item.cell.key]
        probes = [*(study.user_attrs.get("probes") or []),
                  {"value": point.value, "outcome": point.outcome, "metric": point.metric,
                   "run_id": point.run_id}]
        study.set_user_attr("probes", probes)
        best = best_metric(study_points(study, self.space.param))
        ok = is_stable(point, best, self.opts.tolerance) if best is not None else None
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
            stable = max_stable(points, tol)
            unstable = first_unstable_above(points, stable.value, tol) if stable is not None else None
            best = best_point(points)
            self.report.cells.append(CellResult(cell.label, cell.variant, study.study_name, cell.seeds,
                                                points, best, stable, unstable, notes.get(cell.key, "")))
            if best is not None and (edge := self.space.edge_warning(cell.label, best.value)) is not None:
                self.report.warnings.append(edge)

    # ------------------------------------------------------------ 4. the tuned runs
    def then_run(self) -> None:
        from ablate.execute import run_grid
        from ablate.tune.tuned import tuned_grid, write_tuned_grid

        picks: list[tuple[Any, float | int]] = []
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


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN (a missing value in the frame) is None
