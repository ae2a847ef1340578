"""A cell's Optuna study: opening it (create or continue, never a second one), its trials as ``Point``s, and
telling it how a trial ended.

Each study's ``user_attrs`` say what it is: ``grid``, ``cell`` (label), ``cell_key``, ``variant``, ``axes``,
``seed`` (the seed its trials run at), ``param``, ``low``, ``high``, ``log``, ``metric``, ``pruner``,
``tolerance``, ``better`` (``lower`` or ``higher``: the study minimizes or maximizes its metric) and
``probes`` (the bracketing search's runs: ``value``, ``outcome``, ``metric``, ``run_id``).
Each trial's ``user_attrs`` hold its ``run_id`` (the run in the store, under the grid ``<grid>/tune``) and
``outcome`` (``ok``, ``diverged``, ``pruned``, ``failed``). A diverged trial is COMPLETE with the value
``PENALTY`` (``-PENALTY`` in a study that maximizes); a pruned one PRUNED; a crashed one FAIL (and does not
count towards ``--trials``, so the next ``ablate tune`` replaces it).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.errors import ConfigError
from ablate.tune.protocol import PENALTY, Outcome, Point, worst
from ablate.tune.storage import optuna_storage, store_studies

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.storages import RDBStorage

    from ablate.store.api import Store

log = logging.getLogger(__name__)

# a study answers one question: these never change (``better`` is absent from studies made before it was)
CHECKED = ("param", "low", "high", "log", "metric", "better")


def _seed(name: str, n: int) -> int:
    return int(hashlib.sha256(f"{name}:{n}".encode()).hexdigest()[:8], 16)


def open_study(storage: RDBStorage, name: str, attrs: Mapping[str, object], *, trials: int,
               pruner: BasePruner) -> optuna.Study:
    """Create the study ``name`` or continue it; ``ConfigError`` when it was made for another search. It
    maximizes its metric when ``attrs["better"]`` is ``higher``, else minimizes it."""
    existing = next((s for s in storage.get_all_studies() if s.study_name == name), None)
    old = existing.user_attrs if existing is not None else {}
    changed = [k for k in CHECKED if k in old and k in attrs and old[k] != attrs[k]]
    if changed:
        was = ", ".join(f"{k}={old[k]!r}" for k in changed)
        now = ", ".join(f"{k}={attrs[k]!r}" for k in changed)
        raise ConfigError(f"study {name!r} was made with {was}, not {now}: continue it with the same "
                          "--param, --low, --high, --log and --metric, or tune under another grid name",
                          where="ablate tune")
    n_done = len(storage.get_all_trials(existing._study_id, deepcopy=False)) if existing is not None else 0
    sampler = optuna.samplers.TPESampler(n_startup_trials=max(2, min(10, trials // 2)),
                                         seed=_seed(name, n_done))
    direction = "maximize" if attrs.get("better") == "higher" else "minimize"
    study = optuna.create_study(study_name=name, storage=storage, direction=direction, load_if_exists=True,
                                sampler=sampler, pruner=pruner)
    for key, value in attrs.items():
        if old.get(key) != value:
            study.set_user_attr(key, value)
    return study


def maximizes(study: optuna.Study | optuna.study.FrozenStudy) -> bool:
    """Whether ``study`` maximizes its metric (a command grid's higher-is-better objective)."""
    return bool(study.direction == optuna.study.StudyDirection.MAXIMIZE)


def stored_studies(store: Store, grid: str) -> list[optuna.Study]:
    """The tuning studies of ``grid`` in an open ablate ``Store``, by name; [] when it has none."""
    frozen = store_studies(store, grid)
    if not frozen:
        return []
    storage = optuna_storage(store.url)
    return [optuna.load_study(study_name=fs.study_name, storage=storage) for fs in frozen]


def trial_point(trial: FrozenTrial, param: str) -> Point | None:
    """A finished trial as a ``Point``; None while it runs or waits."""
    if param not in trial.params:
        return None
    value, rid = float(trial.params[param]), trial.user_attrs.get("run_id")
    if trial.state == TrialState.COMPLETE:
        diverged = trial.value is None or abs(trial.value) >= PENALTY  # told PENALTY (-PENALTY: maximized)
        if trial.user_attrs.get("outcome") == "diverged" or diverged:
            return Point(value, "diverged", None, rid)
        return Point(value, "ok", float(trial.value), rid)
    if trial.state == TrialState.PRUNED:
        return Point(value, "pruned", None, rid)
    if trial.state == TrialState.FAIL:
        return Point(value, "failed", None, rid)
    return None


def probe_points(attrs: Mapping[str, object]) -> list[Point]:
    """The bracketing search's runs recorded on a study."""
    probes = attrs.get("probes") or []
    assert isinstance(probes, list)  # ablate.tune.tuner records them as a list of JSON objects
    return [Point(float(p["value"]), p["outcome"], p.get("metric"), p.get("run_id"), source="probe")
            for p in probes]


def study_points(study: optuna.Study | optuna.study.FrozenStudy, param: str) -> list[Point]:
    """Every finished trial and probe of ``study``, in the order they were made."""
    trials = [p for t in study.get_trials(deepcopy=False) if (p := trial_point(t, param)) is not None]
    return trials + probe_points(study.user_attrs)


def result_point(value: float, outcome: str, metric: float | None, run_id: str | None, *,
                 source: str = "trial") -> Point:
    """A ``Point`` from how a run ended; a ``done`` run with no finite metric counts as diverged."""
    if outcome in ("done", "ok"):
        if metric is None or not math.isfinite(metric):
            return Point(value, "diverged", None, run_id, source)
        return Point(value, "ok", float(metric), run_id, source)
    ended: Outcome = "diverged" if outcome == "diverged" else "pruned" if outcome == "pruned" else "failed"
    return Point(value, ended, None, run_id, source)


def tell(study: optuna.Study, number: int, point: Point, *, error: str | None = None) -> None:
    """Tell ``study`` how trial ``number`` ended (see the module docstring for the mapping)."""
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    study._storage.set_trial_user_attr(trial_id, "outcome", point.outcome)
    if error:
        study._storage.set_trial_user_attr(trial_id, "error", error[:2000])
    try:
        if point.outcome == "ok":
            study.tell(number, point.metric)
        elif point.outcome == "diverged":
            study.tell(number, worst(higher=maximizes(study)))
        elif point.outcome == "pruned":
            study.tell(number, state=TrialState.PRUNED)
        else:
            study.tell(number, state=TrialState.FAIL)
    except (RuntimeError, ValueError) as exc:  # e.g. another `ablate tune` finished it meanwhile
        log.warning("trial %d of %s: %s", number, study.study_name, exc)
