"""Counting the work a command does, for the tests that guard its cost: ``with counting() as work: ...``,
then ``work["validate RunConfig"]``, ``work["dump DataConfig"]``, ``work["count params"]``, ``work["sql"]``,
and any function ``spy``-ed on.

Counting is exact and the same on every machine at any load: a test asserts how the counts grow with the runs
(bench/ times them). What is counted:

- ``validate <Model>`` / ``dump <Model>``: the validations and dumps (``model_dump``, ``model_dump_json``) of
  a config model asked for from Python (``Model(...)``, ``model_validate``). A section validated inside its
  run's validation is part of that one.
- ``count params``: parameter counts not answered by ``count_params``' in-process cache (its cache is cleared
  on entry: each distinct model counts once).
- ``sql``: statements sent to any database (SQLAlchemy's ``before_cursor_execute``).
- ``spy(module, name)``: calls of a module-level function, through that module's attribute.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

from ablate.ablations.config import GateSpec, ModelConfig, PluginArm, SwitchSpec
from ablate.config import DataConfig, EvalConfig, RunConfig, SourceConfig, TrainConfig

MODELS: tuple[type[BaseModel], ...] = (RunConfig, ModelConfig, DataConfig, TrainConfig, EvalConfig,
                                       SourceConfig, PluginArm, GateSpec, SwitchSpec)


class _Counted:
    """A pydantic validator or serializer that counts the calls made through it."""

    def __init__(self, inner: Any, counts: Counter[str], label: str):
        self._inner, self._counts, self._label = inner, counts, label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counts[self._label] += 1
            return attr(*args, **kwargs)

        return call


class Work(Counter[str]):
    """The counts, and ``spy`` to count one more function."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        super().__init__()
        self._mp = monkeypatch

    def spy(self, module: ModuleType, name: str, label: str | None = None) -> None:
        """Count the calls of ``module.name`` made through the module's attribute."""
        inner = getattr(module, name)
        key = label or name

        def counted(*args: Any, **kwargs: Any) -> Any:
            self[key] += 1
            return inner(*args, **kwargs)

        self._mp.setattr(module, name, counted)

    def grown(self, before: Work) -> dict[str, int]:
        """How much each count grew from ``before`` to these."""
        return {k: self[k] - before[k] for k in sorted(set(self) | set(before))}


@contextmanager
def counting() -> Iterator[Work]:
    """Count the work done inside the block (see the module's docstring)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from ablate.ablations.params import count_params

    mp = pytest.MonkeyPatch()
    work = Work(mp)
    for model in MODELS:
        mp.setattr(model, "__pydantic_validator__",
                   _Counted(model.__pydantic_validator__, work, f"validate {model.__name__}"))
        mp.setattr(model, "__pydantic_serializer__",
                   _Counted(model.__pydantic_serializer__, work, f"dump {model.__name__}"))

    def statement(*_: Any) -> None:
        work["sql"] += 1

    event.listen(Engine, "before_cursor_execute", statement)
    count_params.cache_clear()
    misses = count_params.cache_info().misses
    try:
        yield work
    finally:
        work["count params"] += count_params.cache_info().misses - misses
        event.remove(Engine, "before_cursor_execute", statement)
        mp.undo()
