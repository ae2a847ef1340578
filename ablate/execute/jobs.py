"""Transitional: ``jobs.py`` was split into ``liveness`` (``grid_jobs``: the runs executors' jobs hold),
``status`` (``job_rows``) and ``cancel`` (``cancel_grid``, ``CancelReport``).

Kept only for ``ablate.cli.cancel``, which still names this module; delete it once it names
``ablate.execute.cancel``.
"""

from ablate.execute.cancel import CancelReport, cancel_grid

__all__ = ["CancelReport", "cancel_grid"]
