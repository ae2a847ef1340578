"""Grid -> the exact list of runs: product of the axes, ``include`` appended, ``exclude`` dropped, parameter
matching, duplicates collapsed.

Order is deterministic: the product of the axes in file order (``grid`` keys and ``zip`` groups, as written),
the first varying slowest, then the ``include`` entries in order. ``exclude`` drops product runs whose
resolved config matches every given key (explicit ``include`` runs are kept, as in CI matrices). Two runs with
the same resolved config are one run (the first one's axes are kept). Parameter counts come from the meta
device (``ablate.ablations.count_params``, cached per model config), so expanding a paper-scale grid trains
and allocates nothing. The only I/O is filling each run's identity fields (``ablate.grid.identity``: its data
files' fingerprints, one hash per distinct file, cached).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ablate.ablations.config import ModelConfig
from ablate.ablations.params import count_params, match_ffn
from ablate.ablations.plugins import check as check_plugin
from ablate.ablations.variants import apply_variant, without_variant
from ablate.config import RunConfig, vocab_from_tokenizer
from ablate.errors import ConfigError
from ablate.grid import identity
from ablate.grid.ids import canonical
from ablate.grid.ladder import budget_steps
from ablate.grid.paths import assign, describe, explain, get_path
from ablate.grid.schema import Grid
from ablate.grid.stems import run_and_stem_ids
from ablate.runner.fingerprints import Fingerprints
from ablate.trainers.command.config import CommandConfig


@dataclass(frozen=True)
class PlannedRun:
    """One run of a grid: its id, the resolved config, the values its axes gave it (dotted path -> value),
    total parameters, parameters added over the same config without its variant, under ``match_params`` the
    residual ``(params - target) / target`` left after re-widening the FFN, and its stem id."""

    run_id: str
    config: RunConfig | CommandConfig  # a training command's run: ablate.trainers.command.config
    axes: dict[str, Any]
    params: int
    added_params: int
    match_residual: float | None = None
    stem_id: str = ""  # the id without what the run reads outside its config (``identity.stem_id``)

    @property
    def model(self) -> RunConfig:
        """The config of a run of ablate's own model (what the model's views, costs and checks read); a
        command run's has none."""
        if not isinstance(self.config, RunConfig):
            raise TypeError(f"run {self.run_id} is a training command's: it has no model config")
        return self.config


def _assignments(grid: Grid) -> Iterator[tuple[dict[str, Any], dict[str, str], bool]]:
    """``(path -> value, path -> origin, from_product)`` for each product run, then each include entry."""
    for combo in itertools.product(*(axis.rows for axis in grid.axes)):
        values: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for axis, row in zip(grid.axes, combo, strict=True):
            for path, value in zip(axis.paths, row, strict=True):
                values[path] = value
                origins[path] = axis.origin
        yield values, origins, True
    for i, entry in enumerate(grid.include):
        yield dict(entry), dict.fromkeys(entry, f"include[{i}]"), False


def _blame(loc: str, origins: dict[str, str], grid: Grid) -> str:
    """The section that set the field at ``loc`` (an axis, an include entry, ``--set``), else ``base``."""
    for path, origin in [*origins.items(), *grid.base_origins.items()]:
        if loc == path or loc.startswith(path + ".") or path.startswith(loc + "."):
            return origin
    return "base"


def _resolve(grid: Grid, values: dict[str, Any], origins: dict[str, str], *, check: bool = True) -> RunConfig:
    raw: Any = grid.base
    for path, value in values.items():
        raw = assign(raw, path, value)
    try:
        config = RunConfig.model_validate(vocab_from_tokenizer(raw))
    except ValidationError as exc:
        loc, msg = explain(exc)
        raise ConfigError(describe(loc, msg), where=f"{grid.source}: {_blame(loc, origins, grid)}") from None
    set_by_user = identity.given(config) if check else []
    if set_by_user:
        loc = set_by_user[0]
        raise ConfigError(f"{loc} is filled by ablate from what the run reads (a hash of its files), never "
                          "set in a grid: remove it", where=f"{grid.source}: {_blame(loc, origins, grid)}")
    return config


@dataclass(frozen=True)
class _Model:
    """A run's model as planned: after ``match_params``, its dump, its parameters (with its variant), those of
    the same model without its variant, and the residual of the match."""

    config: ModelConfig
    dump: dict[str, Any]
    params: int
    reference: int
    residual: float | None


class _Sections:
    """What a run's sections need, worked out once per distinct section and shared by the runs that hold it (a
    grid's 10,000 runs share a few): the model's plugin check, parameter counts and ``match_params``
    (``model``), and each section's identity fields filled (``identified``: ``identity.fill``). The keys are
    the sections' JSON, taken from the run's one dump. The run's own identity fields
    (``RunConfig.variant_revision``) are filled from its variant alone: once per variant."""

    def __init__(self, grid: Grid, resolver: Any):
        self.grid = grid
        self.resolver = resolver
        self.names = [n for n, f in RunConfig.model_fields.items()
                      if n != "stages" and identity.holds_identity(f.annotation)]
        self.models: dict[tuple[str, str], _Model] = {}
        self.filled: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.own: dict[str, dict[str, Any]] = {}  # variant -> the run's own identity fields

    def model(self, config: RunConfig, dump: dict[str, Any], where: str) -> _Model:
        key = (json.dumps(dump, ensure_ascii=False), config.variant)
        if (found := self.models.get(key)) is None:
            found = self.models[key] = self._model(config.model, config.variant, dump, where)
        return found

    def _model(self, model: ModelConfig, variant: str, dump: dict[str, Any], where: str) -> _Model:
        grid = self.grid
        if model.plugin is not None:  # before anything imports it: only listed modules
            try:
                check_plugin(model.plugin, grid.plugins, model)
            except ConfigError as exc:
                raise _reraise(exc, where) from None
        reference = _count(without_variant(model, variant), where)
        residual = None
        if grid.match_params is not None:
            matched, residual = _match(model, variant, grid.match_params, where, grid.source)
            if matched is not model:
                model, dump = matched, matched.model_dump(mode="json")
        params = _count(_effective(model, variant, where), where)
        return _Model(model, dump, params, reference, residual)

    def identified(self, config: RunConfig, dump: dict[str, Any],
                   model: _Model) -> tuple[RunConfig, dict[str, Any]]:
        """``config`` with its planned model and its identity fields filled, and its dump."""
        if config.stages:
            config = identity.fill(config.model_copy(update={"model": model.config}), self.resolver)
            return config, config.model_dump(mode="json")
        if (own := self.own.get(config.variant)) is None:
            own = self.own[config.variant] = identity.fill_own(config, self.resolver)
        updates: dict[str, Any] = {"model": model.config, **own}
        final = {**dump, "model": model.dump, **own}
        for name in self.names:
            key = (name, json.dumps(final[name], ensure_ascii=False))
            if (found := self.filled.get(key)) is None:
                section = updates.get(name, getattr(config, name))
                filled = identity.fill(section, self.resolver)
                found = self.filled[key] = (filled, final[name] if filled is section
                                            else filled.model_dump(mode="json"))
            updates[name], final[name] = found
        return config.model_copy(update=updates), final


def _reraise(exc: ConfigError, where: str, field: str | None = None) -> ConfigError:
    """``exc`` re-located to ``where`` (the file and section); ``field`` renames its own location."""
    text = str(exc)
    if field is not None and exc.where:
        text = f"{field}: {text.removeprefix(f'{exc.where}: ')}"
    return ConfigError(text, where=where)


def _matches(dump: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Does the dumped config hold every (normalized) value of an ``exclude`` entry?"""
    for path, wanted in entry.items():
        found, have = get_path(dump, path)
        if not found or canonical(have) != wanted:
            return False
    return True


def _count(model: ModelConfig, where: str) -> int:
    try:
        return count_params(model).total
    except Exception as exc:  # noqa: BLE001 - a plugin's __init__ is the user's code: any failure is one line
        plugin = model.plugin is not None
        if not plugin and not isinstance(exc, (RuntimeError, ValueError, OverflowError, MemoryError)):
            raise
        raise ConfigError(_count_failure(model, exc), where=where) from None


def _count_failure(model: ModelConfig, exc: Exception) -> str:
    """Why a model could not be built on the meta device (where parameters are counted without memory)."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if model.plugin is None:
        return f"cannot build this model to count its parameters: {exc}"
    arm = model.plugin.arm
    if "meta" in text:
        return (f"plugin arm {arm!r} cannot be built on the meta device, where ablate counts a model's "
                f"parameters without allocating them ({text}): its __init__ must not read a tensor's values "
                "(.item(), .tolist(), a shape or branch that depends on them); compute those from its Args "
                "and cfg, or in forward")
    return f"plugin arm {arm!r} failed while the model was built to count its parameters ({text})"


def _effective(model: ModelConfig, variant: str, where: str, field: str | None = None) -> ModelConfig:
    try:
        return apply_variant(model, variant)
    except ConfigError as exc:
        raise _reraise(exc, where, field) from None


def _match(model: ModelConfig, variant: str, target_variant: str, where: str,
           source: str) -> tuple[ModelConfig, float]:
    """``model`` with its FFN re-widened so its total under ``variant`` equals ``target_variant``'s on the
    same model (less the run's plugin arm, which the target does not carry)."""
    reference = without_variant(model, variant)
    target = _count(_effective(reference, target_variant, source, field="match_params"), where)
    effective = _effective(model, variant, where)
    if _count(effective, where) == target:
        return model, 0.0
    try:
        matched, residual = match_ffn(effective, target)
    except ConfigError as exc:
        raise _reraise(exc, where) from None
    widths = {"ffn_dim": matched.ffn_dim, "expert_dim": matched.expert_dim}
    new = ModelConfig.model_validate({**model.model_dump(), **widths})
    if _count(_effective(new, variant, where), where) != _count(matched, where):
        raise ConfigError(
            f"match_params: variant {variant!r} sets the FFN width itself, so it cannot be re-widened",
            where=where,
        )
    return new, residual


def expand(grid: Grid, *, fingerprints: Any = None) -> list[PlannedRun]:
    """The runs of ``grid``, in order, duplicates collapsed. Raises ``ConfigError`` (file, section, field,
    value) for any run whose config is invalid or whose variant does not fit its model.

    Each run's identity fields are filled (``ablate.grid.identity``) with ``fingerprints``
    (``ablate.runner.fingerprints.Fingerprints``; given a home's, its disk cache is used and written): the
    only I/O, one hash per distinct file, cached.
    """
    if fingerprints is None:
        fingerprints = Fingerprints()
    sections = _Sections(grid, fingerprints)
    runs: dict[str, PlannedRun] = {}
    excluded = 0
    check = identity.mentions([grid.base, grid.include, *(  # does the grid set an identity field anywhere?
        [dict.fromkeys(a.paths), a.rows] for a in grid.axes)])
    for values, origins, from_product in _assignments(grid):
        config = _resolve(grid, values, origins, check=check)
        if grid.ladder is not None:
            config = budget_steps(config, grid.ladder, f"{grid.source}: ladder")
        dump = config.model_dump(mode="json")  # the run's one dump: its sections' keys, its id
        if from_product and grid.exclude and any(_matches(dump, entry) for entry in grid.exclude):
            excluded += 1
            continue
        model = sections.model(config, dump["model"], f"{grid.source}: {_blame('variant', origins, grid)}")
        config, final = sections.identified(config, dump, model)
        rid, stem = run_and_stem_ids(config, final)
        if rid not in runs:
            axes = {path: get_path(final, path)[1] for path in values}
            runs[rid] = PlannedRun(rid, config, axes, model.params, model.params - model.reference,
                                   model.residual, stem)
    if not runs and excluded:
        raise ConfigError(f"exclude removes every run of the grid (all {excluded}); nothing would run: "
                          "narrow the exclude entries", where=f"{grid.source}: exclude")
    fingerprints.save()
    return list(runs.values())
