"""Optuna's studies in the results store's own database, and the pruners a study can use.

Optuna's RDB storage takes the store's SQLAlchemy URL, so the studies live beside the runs (tables
``studies``, ``trials``, ``trial_*``, ``version_info``; no name is shared with ablate's tables). One thing is
shared: both use Alembic, and Alembic's default ``alembic_version`` table holds *ablate's* schema revision. So
the store is always opened (and migrated) first, and Optuna's storage is opened with
``skip_compatibility_check=True`` (it would otherwise read ablate's revision as its own and refuse); Optuna
never stamps the table because it is not empty. The Optuna version is pinned in ``constraints.txt``, which is
what the skipped check was for.

On SQLite Optuna's connections get the store's settings (busy timeout, ``BEGIN IMMEDIATE`` for writes), so the
pool's workers reporting intermediate values and the main process telling results queue on the lock.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect

from ablate.errors import ConfigError, did_you_mean
from ablate.store.engine import _sqlite_settings  # the store's own SQLite settings, for Optuna's engine

if TYPE_CHECKING:
    import optuna
    from optuna.storages import RDBStorage

    from ablate.store.api import Store

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 60.0
PRUNERS = ("median", "median:<startup trials>", "hyperband", "threshold:<upper>", "none")
MEDIAN_STARTUP = 5  # Optuna's default: no pruning until this many trials finished


def optuna_storage(url: str) -> RDBStorage:
    """Optuna's RDB storage on the store database at ``url`` (open the ablate ``Store`` on it first)."""
    import optuna
    from optuna.storages import RDBStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial is the caller's to print
    sqlite = url.startswith("sqlite")
    kwargs: dict[str, object] = ({"connect_args": {"timeout": BUSY_TIMEOUT_S}} if sqlite
                                 else {"pool_pre_ping": True})
    storage = RDBStorage(url, engine_kwargs=kwargs, skip_compatibility_check=True)
    if sqlite:
        # the store's own connection settings: a writer takes the lock up front (BEGIN IMMEDIATE) and waits
        # for it, instead of failing when its read snapshot went stale while a worker wrote a report
        _sqlite_settings(storage.engine)
        storage.engine.dispose()  # connections made before the settings are dropped
    return storage


def has_study_tables(engine: Engine) -> bool:
    """Whether Optuna's tables exist in the database of ``engine`` (without creating them)."""
    found: bool = inspect(engine).has_table("studies")
    return found


def grid_studies(storage: RDBStorage, grid: str) -> list[optuna.study.FrozenStudy]:
    """The studies ``ablate tune`` made for ``grid`` (FrozenStudy objects), by name."""
    studies = [s for s in storage.get_all_studies() if s.user_attrs.get("grid") == grid]
    return sorted(studies, key=lambda s: s.study_name)


def store_studies(store: Store, grid: str) -> list[optuna.study.FrozenStudy]:
    """The tuning studies of ``grid`` in an open ablate ``Store`` ([] when it has none, creating nothing)."""
    if not has_study_tables(store.engine):
        return []
    return grid_studies(optuna_storage(store.url), grid)


# ---------------------------------------------------------------- pruners
def parse_pruner(spec: str) -> str:
    """Check a ``--pruner`` spec: ``median`` (``median:N``: prune only after N trials finished, default 5),
    ``hyperband``, ``threshold:X`` (prune a trial whose validation metric goes above X) or ``none``."""
    name, _, arg = spec.strip().partition(":")
    ok = (name in ("median", "hyperband", "none") and not arg) or (name == "median" and arg.isdigit())
    if name == "threshold":
        try:
            float(arg)
            ok = True
        except ValueError:
            ok = False
    if not ok:
        raise ConfigError("unknown pruner "
                          f"{spec!r}{did_you_mean(name, ['median', 'hyperband', 'threshold', 'none'])}; "
                          f"allowed: {', '.join(PRUNERS)}", where="--pruner")
    return spec.strip()


def make_pruner(spec: str, *, min_resource: int = 1, max_resource: int | str = "auto"
                ) -> optuna.pruners.BasePruner:
    """The Optuna pruner of a ``--pruner`` spec. Resources count training steps (what the trials report)."""
    import optuna

    name, _, arg = parse_pruner(spec).partition(":")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=int(arg) if arg else MEDIAN_STARTUP,
                                           n_warmup_steps=0)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                              reduction_factor=3)
    if name == "threshold":
        return optuna.pruners.ThresholdPruner(upper=float(arg))
    return optuna.pruners.NopPruner()
