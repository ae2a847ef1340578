"""A run's metrics, read as the command runs: its stdout fed line by line to a regex with named groups or to
``key: value`` lines, and a JSONL file tailed for new complete lines. Each gives ``(step, {metric: value})``
records; ``Stream`` keeps them by metric, and ``MetricsReader`` ties the sources of one run together and says
why a run that never reported its objective failed.

>>> reader = StdoutRegex(r"step (?P<step>\\d+): train (?P<train_loss>[\\d.]+), val (?P<val_loss>[\\d.]+)")
>>> reader.feed("step 100: train 2.31, val 2.40")
(100, {'train_loss': 2.31, 'val_loss': 2.4})
>>> KeyValueLines().feed("val_loss: 2.31 (step 500)"), KeyValueLines().feed("loading data: 50%")
((500, {'val_loss': 2.31}), None)
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ablate.trainers.command.spec import STEP, CommandSpec, Reduce

log = logging.getLogger(__name__)

Record = tuple[int | None, dict[str, float]]  # (step, or None when the line gives none; metric -> value)

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_KEY_VALUE = re.compile(rf"\s*([A-Za-z_][\w./\-]*)\s*:\s*({_NUMBER})\s*(?:\(step\s+(\d+)\))?\s*")
_NUMBERS = frozenset((int, float))  # the types of a JSON value that is a metric
HEAD_CHARS = 300  # how much of the output a failure message quotes


class StdoutRegex:
    """A regex with named groups: each group a metric (``step`` the step), searched once in each line."""

    def __init__(self, pattern: str):
        compiled = re.compile(pattern)  # once per run: every line is searched with it
        self._search = compiled.search
        self.metrics = tuple(name for name in compiled.groupindex if name != STEP)
        self._step = STEP in compiled.groupindex
        self.matched = 0  # lines the pattern matched

    def feed(self, line: str) -> Record | None:
        """The record of ``line``, or None when the pattern does not match it (or gives no number)."""
        m = self._search(line)
        if m is None:
            return None
        self.matched += 1
        groups = m.groupdict()
        values: dict[str, float] = {}
        for name in self.metrics:
            text = groups[name]
            if text is not None:
                try:
                    values[name] = float(text)
                except ValueError:
                    continue  # a group such as [\d.]+ matched "1.2.": not a number
        if not values:
            return None
        step = groups[STEP] if self._step else None
        return (int(step) if step is not None and step.isdigit() else None), values


class KeyValueLines:
    """Lines that are one metric each: ``val_loss: 2.31`` or ``val_loss: 2.31 (step 500)``."""

    def __init__(self) -> None:
        self._match = _KEY_VALUE.fullmatch
        self.matched = 0

    def feed(self, line: str) -> Record | None:
        """The record of ``line``, or None when it is not a ``key: number`` line."""
        m = self._match(line)
        if m is None:
            return None
        self.matched += 1
        step = m.group(3)
        return (int(step) if step is not None else None), {m.group(1): float(m.group(2))}


class JsonlTail:
    """A JSONL file that a run appends to, read a little at a time: each ``poll`` returns the records of the
    complete lines written since the last one. A line that is not a JSON object is warned about once (its
    line number; later ones are only counted), and reading goes on."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._partial = b""
        self.lines = 0
        self.bad: list[int] = []  # numbers of the lines that were not JSON objects

    def poll(self) -> list[Record]:
        """The records of the new complete lines (none when the file is not there yet)."""
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self._offset:  # the file was started again (a run that restarts)
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        first = self.lines + 1  # the number of complete[0]
        self.lines += len(complete)
        lines = [raw for raw in complete if raw]
        try:  # the common case, every line JSON: one parse for the whole chunk
            objects: list[object] = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:  # a line that is not JSON (or only blanks): one at a time
            lines = [raw for raw in lines if raw.strip()]
            objects = [self._object(raw) for raw in lines]
        out: list[Record] = []
        append = out.append
        where: list[int] = []  # each kept line's index in complete, worked out at the first bad line
        for i, obj in enumerate(objects):
            if type(obj) is not dict:
                where = where or [j for j, raw in enumerate(complete) if raw.strip()]
                self._bad(first + where[i], lines[i].decode(errors="replace"))
                continue
            step = obj.pop(STEP, None)
            if not _NUMBERS.issuperset(map(type, obj.values())):  # exact types: true is no number
                obj = {k: v for k, v in obj.items() if type(v) in _NUMBERS}
            if obj:
                append((step if type(step) is int else None, obj))
        return out

    @staticmethod
    def _object(raw: bytes) -> object:
        try:
            return json.loads(raw)
        except ValueError:
            return None  # not JSON: reported as not an object

    def _bad(self, number: int, text: str) -> None:
        self.bad.append(number)
        if len(self.bad) == 1:
            log.warning("%s line %d is not a JSON object; skipped, and the run goes on (later bad lines are "
                        "counted, not shown): %.80s", self.path, number, text)


class Stream:
    """Every value a run reported, by metric, in the order reported: ``series[metric] = [(step, value)]``."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int | None, float]]] = {}
        self.records: list[Record] = []  # every record, in order: what a live reader forwards from
        self.last_step: int | None = None

    def add(self, record: Record) -> None:
        """Keep one record."""
        self.extend((record,))

    def extend(self, records: Iterable[Record]) -> None:
        """Keep each of ``records``, in order."""
        series, last, kept = self.series, self.last_step, self.records
        for record in records:
            kept.append(record)
            step, values = record
            if step is not None:
                last = step
            for name, value in values.items():
                try:
                    series[name].append((step, value))
                except KeyError:
                    series[name] = [(step, value)]
        self.last_step = last

    def last(self) -> dict[str, float]:
        """Each metric's latest value (what ``ablate status`` shows)."""
        return {name: points[-1][1] for name, points in self.series.items()}


Series = Mapping[str, list[tuple[int | None, float]]]


def summarize(series: Series, how: Mapping[str, Reduce]) -> dict[str, float]:
    """Each metric's value for the run: its last value, or with ``how[metric]`` its ``min`` or ``max`` (NaNs
    left out unless every value is NaN).

    >>> summarize({"val": [(1, 3.0), (2, 2.0), (3, 2.5)], "lr": [(1, 0.1)]}, {"val": "min"})
    {'val': 2.0, 'lr': 0.1}
    """
    out: dict[str, float] = {}
    for name, points in series.items():
        reduce = how.get(name, "last")
        values = [v for _, v in points]
        if reduce != "last":
            values = [v for v in values if not math.isnan(v)] or values
        out[name] = float(values[-1] if reduce == "last" else min(values) if reduce == "min" else max(values))
    return out


class MetricsReader:
    """One run's metrics from every source its spec names: ``stdout_line`` is the process's stdout callback,
    ``poll`` reads the JSONL file (also the ``ABLATE_METRICS`` file a script may append to)."""

    def __init__(self, spec: CommandSpec, metrics_file: Path | None = None):
        self.spec = spec
        self.stream = Stream()
        self._parser: StdoutRegex | KeyValueLines | None = (
            StdoutRegex(spec.metrics.pattern) if spec.metrics.pattern is not None
            else KeyValueLines() if spec.metrics.stdout is True else None)
        self._feed = self._parser.feed if self._parser is not None else None
        self.jsonl = JsonlTail(metrics_file) if metrics_file is not None else None
        self.lines = 0
        self._head: list[str] = []  # the output's first lines, for a failure message
        self._head_chars = 0

    def stdout_line(self, line: str) -> None:
        """Feed one line of the command's stdout."""
        self.lines += 1
        if self._head_chars < HEAD_CHARS:
            self._head.append(line)
            self._head_chars += len(line) + 3
        if self._feed is not None:
            record = self._feed(line)
            if record is not None:
                self.stream.add(record)

    def poll(self) -> None:
        """Read what the JSONL file gained since the last poll."""
        if self.jsonl is not None:
            self.stream.extend(self.jsonl.poll())

    def summary(self) -> dict[str, float]:
        """The run's value of each metric (``trainer.summary``: last unless told min or max)."""
        return summarize(self.stream.series, self.spec.summary)

    def failure(self) -> str | None:
        """Why the run failed although its command may have exited 0: the objective never appeared. None when
        it did."""
        metric = self.spec.objective.metric
        if metric in self.stream.series:
            return None
        why: list[str] = []
        if isinstance(self._parser, StdoutRegex):
            why.append("the pattern matched no line" if self._parser.matched == 0 else
                       f"the pattern matched {self._parser.matched} lines but its group {metric!r} never had "
                       f"a number")
        elif isinstance(self._parser, KeyValueLines):
            why.append(f"no line such as '{metric}: 2.31' appeared")
        if self.spec.metrics.jsonl is not None and self.jsonl is not None:
            why.append(f"{self.jsonl.path} never had {metric!r} ({self.jsonl.lines} lines)")
        if self.spec.metrics.mlflow:
            why.append(f"the MLflow run has no {metric!r}")
        return f"the objective {metric!r} was never reported: {'; '.join(why)}; {self.output_began()}"

    def output_began(self) -> str:
        """``the output began: '...'`` (the first few hundred characters), or that there was none."""
        if not self._head:
            return "the command printed nothing on stdout"
        head = " | ".join(self._head)
        more = len(head) > HEAD_CHARS or self.lines > len(self._head)
        return f"the output began: {head[:HEAD_CHARS]!r}" + ("..." if more else "")
