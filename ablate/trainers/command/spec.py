"""The grid's ``trainer:`` section for a training command, validated once: every later step reads this model.

>>> spec = load_spec({"command": "python train.py {args}",
...                   "metrics": {"stdout": r"val (?P<val_loss>[\\d.]+)"},
...                   "objective": {"metric": "val_loss", "better": "lower"}})
>>> spec.args_style, spec.seed_arg, spec.summary_of("val_loss")
('equals', 'seed', 'last')
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ablate.errors import ConfigError
from ablate.trainers.command import template

Better = Literal["lower", "higher"]
Reduce = Literal["last", "min", "max"]
ArgsStyle = Literal["equals", "space", "hydra"]
Bools = Literal["value", "flag"]

STEP = "step"  # the regex group, JSONL key and `(step N)` suffix that give a record's step
_DOTTED = re.compile(r"[A-Za-z_][\w\-]*(\.[A-Za-z_][\w\-]*)*")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(_Section):
    """The metric a run is judged by, and which way is better."""

    metric: str = Field(min_length=1)
    better: Better


class Resume(_Section):
    """Resume a cut run: when the path ``when`` exists, ``args`` are added to the command."""

    args: str = Field(min_length=1)
    when: str = Field(min_length=1)


class Metrics(_Section):
    """Where a run's metrics come from; any of the sources, at least one.

    - ``stdout``: a regex with named groups (one per metric, ``step`` optional), or ``true`` for lines such as
      ``val_loss: 2.31`` and ``val_loss: 2.31 (step 500)``;
    - ``jsonl``: a file of one JSON object a line (``step`` plus metrics), placeholders filled;
    - ``mlflow``: what the script logs into the MLflow run ablate opens for it.
    """

    stdout: str | bool | None = None
    jsonl: str | None = Field(None, min_length=1)
    mlflow: bool = False

    @field_validator("stdout")
    @classmethod
    def _compiles(cls, value: str | bool | None) -> str | bool | None:
        if isinstance(value, str):
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise ValueError(f"the regex does not compile ({exc}): {value!r}") from None
            if not set(pattern.groupindex) - {STEP}:
                raise ValueError(f"the regex names no metric: give each metric a named group, "
                                 f"(?P<val_loss>[\\d.]+), got {value!r}")
        return value

    @model_validator(mode="after")
    def _some_source(self) -> Metrics:
        if self.stdout in (None, False) and self.jsonl is None and not self.mlflow:
            raise ValueError("no source; give stdout (a regex with named groups, or true), "
                             "jsonl (a path) or mlflow: true")
        return self

    @property
    def pattern(self) -> str | None:
        """The stdout regex, if that is a source."""
        return self.stdout if isinstance(self.stdout, str) else None

    def declared(self) -> frozenset[str] | None:
        """The metrics the sources can give, when that is known before a run: only a regex says (its groups);
        None when any other source is given (``stdout: true``, a JSONL file, MLflow may hold any name)."""
        if self.pattern is None or self.jsonl is not None or self.mlflow or self.stdout is True:
            return None
        return frozenset(re.compile(self.pattern).groupindex) - {STEP}


class CommandSpec(_Section):
    """A grid's ``trainer:`` section: the command, where and how it runs, and how its metrics are read."""

    command: str = Field(min_length=1)
    cwd: str | None = None  # relative to the grid file's folder; default: that folder
    env: dict[str, str] = {}
    metrics: Metrics
    objective: Objective
    summary: dict[str, Reduce] = {}  # a metric's value for the run; "last" unless named here
    args_style: ArgsStyle = "equals"
    bools: Bools = "value"
    seed_arg: str | None = "seed"  # the seed's parameter name in {args}; None keeps it out
    shell: bool = False
    resume: Resume | None = None
    gpus: int = Field(0, ge=0)
    code: list[str] = []  # files (globs, relative to cwd) whose contents are the code's identity

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out: dict[object, object] = {}
        for key, item in value.items():
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise ValueError(f"env.{key}: an environment value is a string or a number, got {item!r} "
                                 f"(quote it: '{str(item).lower() if isinstance(item, bool) else item}')")
            out[key] = str(item)
        return out

    @field_validator("seed_arg")
    @classmethod
    def _seed_name(cls, value: str | None) -> str | None:
        if value is not None and not _DOTTED.fullmatch(value):
            raise ValueError(f"a parameter's dotted name (training.seed) or null, got {value!r}")
        return value

    @field_validator("command")
    @classmethod
    def _splits(cls, value: str) -> str:
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"the command cannot be split as a shell would ({exc}): {value!r}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CommandSpec:
        if self.bools == "flag" and self.args_style == "hydra":
            raise ValueError("bools: 'flag' is for --key switches; hydra takes key=true, so use bools: value")
        for where, text in self.templates(with_command=False):
            if template.ARGS in template.names(text):
                raise ValueError(f"{where}: {{args}} belongs in the command only, got {text!r}")
        if not self.shell:
            words = shlex.split(self.command)
            if not words:
                raise ValueError(f"command: no program to run, got {self.command!r}")
            mixed = [w for w in words if template.ARGS in template.names(w) and w != "{args}"]
            if mixed:
                raise ValueError(f"command: {{args}} stands alone, as a word of its own, got {mixed[0]!r}")
        declared = self.metrics.declared()
        if declared is not None:
            wanted = [("objective.metric", self.objective.metric)]
            wanted += [(f"summary.{name}", name) for name in self.summary]
            for where, name in wanted:
                if name not in declared:
                    head = "metrics.stdout: the regex has no group" if where == "objective.metric" \
                        else f"{where}: no source gives the metric; the regex has no group"
                    raise ValueError(f"{head} named {name!r} (the {where.split('.')[0]}'s metric)"
                                     f"{_near(name, declared)}; its groups: {', '.join(sorted(declared))}")
        return self

    def templates(self, *, with_command: bool = True) -> list[tuple[str, str]]:
        """``(field path, text)`` of every string that takes placeholders."""
        out = [("command", self.command)] if with_command else []
        out += [("cwd", self.cwd)] if self.cwd is not None else []
        out += [(f"env.{k}", v) for k, v in self.env.items()]
        out += [("metrics.jsonl", self.metrics.jsonl)] if self.metrics.jsonl is not None else []
        if self.resume is not None:
            out += [("resume.args", self.resume.args), ("resume.when", self.resume.when)]
        return out

    def summary_of(self, metric: str) -> Reduce:
        """How ``metric``'s stream becomes the run's value: ``last`` unless ``summary`` names it."""
        return self.summary.get(metric, "last")


def _near(name: str, allowed: frozenset[str]) -> str:
    close = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_spec(raw: object, *, source: str | None = None, section: str = "trainer") -> CommandSpec:
    """The ``trainer:`` mapping of a grid file as a ``CommandSpec``, or one ``ConfigError`` line that names
    the field (``trainer.metrics.stdout``), the wrong value and what is allowed. ``source`` is the grid
    file."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{section}: a mapping with at least command, metrics and objective, got "
                          f"{type(raw).__name__}", where=source)
    try:
        return CommandSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, section), where=source) from None


def _explain(exc: ValidationError, section: str) -> str:
    """One line for the most useful error: an unknown key first, else the first, with the wrong value."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("str", "bool", "none"))]
    path = ".".join([section, *loc])
    if err["type"] == "extra_forbidden":
        parent: type[BaseModel] = CommandSpec
        for part in loc[:-1]:
            field = parent.model_fields.get(part)
            annotation = field.annotation if field is not None else None
            parent = next((a for a in (annotation, *getattr(annotation, "__args__", ()))
                           if isinstance(a, type) and issubclass(a, BaseModel)), parent)
        allowed = sorted(parent.model_fields)
        return f"unknown key {path!r}{_near(loc[-1], frozenset(allowed))}; allowed: {', '.join(allowed)}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] != "value_error" and not isinstance(err.get("input"), dict):
        msg = f"{msg}, got {err.get('input')!r}"
    head, sep, rest = msg.partition(": ")
    if sep and not loc and _DOTTED.fullmatch(head) and head.split(".")[0] in CommandSpec.model_fields:
        return f"{section}.{head}: {rest}"  # a check across fields names its own field
    if sep and head.startswith("env."):
        return f"{section}.{head}: {rest}"
    return f"{path}: {msg}"
