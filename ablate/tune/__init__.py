"""``ablate tune``: a learning-rate (or any numeric field) search per grid cell with Optuna, in the results
store's own database, trials trained as ordinary runs by ``ablate run``'s worker pool; then each variant's
best and largest stable value, and the grid's seeds at the best one (``--then-run``).

- ``tune(path, sets, TuneOptions(...)) -> TuneReport`` (``search.py``): the command.
- ``protocol.py``: best / largest stable value and the bracketing search, pure.
- ``space.py``: the search space, the grid's cells, study names, trial configs, pure.
- ``studies.py`` / ``storage.py``: the studies in the store's database; pruners.
- ``execute.py`` / ``job.py`` / ``pruning.py``: the trials on the worker pool, with Optuna's Lightning
  pruning.
- ``dashboard.py``: optuna-dashboard over the same storage.

Importing this package imports neither Optuna nor torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TuneOptions", "TuneReport", "tune"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ablate.tune import search

        return getattr(search, name)
    raise AttributeError(name)
