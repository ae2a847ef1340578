"""The results store: every run, metric, probe and event in a typed SQL database (SQLite or PostgreSQL),
queried as pandas DataFrames. ``Store.open(url=None, *, home=None)`` is the entry point."""

from ablate.store.api import Store
from ablate.store.engine import resolve_url

__all__ = ["Store", "resolve_url"]
