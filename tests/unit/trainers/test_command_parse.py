"""A command run's metrics (ablate/trainers/command/parse.py): each parser's records, the JSONL tail, the
summary, why a run that never reported its objective failed, the work per line, and the example script's real
output read back to the values it printed."""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from ablate.trainers.command import parse
from ablate.trainers.command.params import merge
from ablate.trainers.command.parse import JsonlTail, KeyValueLines, MetricsReader, StdoutRegex, summarize
from ablate.trainers.command.process import run
from ablate.trainers.command.render import RunValues, render
from ablate.trainers.command.spec import CommandSpec, load_spec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "own-trainer"
REGEX = r"step (?P<step>\d+): train (?P<train_loss>[\d.]+), val (?P<val_loss>[\d.]+)"
OBJECTIVE = {"metric": "val_loss", "better": "lower"}


def spec_of(metrics: dict[str, object], **fields: object) -> CommandSpec:
    return load_spec({"command": "train {args}", "metrics": metrics, "objective": OBJECTIVE, **fields})


def test_regex_records() -> None:
    parser = StdoutRegex(REGEX)
    assert parser.feed("step 100: train 2.31, val 2.40") == (100, {"train_loss": 2.31, "val_loss": 2.40})
    assert parser.feed("iter 100: loss 2.3") is None
    assert parser.feed("step 7: train 1., val nan") is None  # [\d.]+ cannot match nan: no match at all
    optional = StdoutRegex(r"loss (?P<loss>[\d.]+)(, acc (?P<acc>[\d.]+))?")
    assert optional.feed("loss 2.5") == (None, {"loss": 2.5})
    assert optional.feed("loss 2.5, acc 0.75") == (None, {"loss": 2.5, "acc": 0.75})
    assert StdoutRegex(r"loss (?P<loss>[\d.]+)").feed("loss 1.2.3") is None  # not a number: no record
    assert parser.matched == 1


def test_key_value_records() -> None:
    parser = KeyValueLines()
    assert parser.feed("val_loss: 2.31") == (None, {"val_loss": 2.31})
    assert parser.feed("  eval/acc : 0.5 (step 500)") == (500, {"eval/acc": 0.5})
    assert parser.feed("lr: 3e-4 (step 10)") == (10, {"lr": 3e-4})
    assert parser.feed("loss: nan") is not None
    assert parser.feed("loss: -inf") == (None, {"loss": float("-inf")})
    for other in ("Time: 12:30", "loading: 50%", "{'loss': 2.3}", "step 100: train 2.31, val 2.40", ""):
        assert parser.feed(other) is None, other


def test_jsonl_tail_reads_complete_lines_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.poll() == []  # not there yet
    with open(path, "w") as f:
        f.write('{"step": 1, "val_loss": 2.5, "note": "x", "ok": true}\n{"step": 2, "val_')
        f.flush()
        assert tail.poll() == [(1, {"val_loss": 2.5})]
        f.write('loss": 2.25}\nnot json\n[1, 2]\n\n{"val_loss": 2}\nnot json either\nnot json\n')
        f.flush()
        with caplog.at_level(logging.WARNING):
            assert tail.poll() == [(2, {"val_loss": 2.25}), (None, {"val_loss": 2})]
    assert tail.bad == [3, 4, 7, 8] and tail.lines == 8
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1
    assert f"{path} line 3 is not a JSON object; skipped, and the run goes on" in warned[0]
    path.write_text('{"step": 0, "val_loss": 9}\n')  # started again: read from the start
    assert tail.poll() == [(0, {"val_loss": 9})]


def test_summary_last_min_max() -> None:
    series = {"val": [(0, 3.0), (1, float("nan")), (2, 2.0), (3, 2.5)], "acc": [(0, 0.1), (3, 0.4), (4, 0.3)]}
    assert summarize(series, {}) == {"val": 2.5, "acc": 0.3}
    assert summarize(series, {"val": "min", "acc": "max"}) == {"val": 2.0, "acc": 0.4}
    nan = summarize({"val": [(0, float("nan"))]}, {"val": "min"})["val"]
    assert nan != nan


def test_failure_says_why_and_how_the_output_began() -> None:
    reader = MetricsReader(spec_of({"stdout": REGEX}))
    for line in ("loading data", "iter 0: loss 4.1", "iter 1: loss 3.9"):
        reader.stdout_line(line)
    assert reader.failure() == ("the objective 'val_loss' was never reported: the pattern matched no line; "
                                "the output began: 'loading data | iter 0: loss 4.1 | iter 1: loss 3.9'")
    reader.stdout_line("step 10: train 2.5, val 2.6")
    assert reader.failure() is None and reader.summary() == {"train_loss": 2.5, "val_loss": 2.6}
    silent = MetricsReader(spec_of({"stdout": True}))
    assert silent.failure() == ("the objective 'val_loss' was never reported: no line such as 'val_loss: "
                                "2.31' "
                                "appeared; the command printed nothing on stdout")
    chatty = MetricsReader(spec_of({"stdout": True}))
    for i in range(100):
        chatty.stdout_line(f"line {i} " + "x" * 20)
    said = chatty.failure()
    assert said is not None and said.endswith("...") and len(said) < 500


def test_regex_is_compiled_once_and_each_line_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of({"stdout": REGEX})  # the spec compiled it to check it; the run's reader compiles it once
    calls = {"compile": 0, "search": 0}
    compile_ = re.compile

    class Counting:
        def __init__(self, pattern: re.Pattern[str]):
            self.groupindex = pattern.groupindex
            self._search = pattern.search

        def search(self, line: str) -> re.Match[str] | None:
            calls["search"] += 1
            return self._search(line)

    def counting_compile(pattern: str, flags: int = 0) -> Counting:
        calls["compile"] += 1
        return Counting(compile_(pattern, flags))

    monkeypatch.setattr(re, "compile", counting_compile)
    reader = MetricsReader(spec)
    for i in range(10_000):
        reader.stdout_line(f"step {i}: train 2.0, val 2.1" if i % 10 == 0 else f"iter {i}")
    assert calls == {"compile": 1, "search": 10_000}
    assert len(reader.stream.series["val_loss"]) == 1_000


def test_key_value_lines_are_matched_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    fullmatch = parse._KEY_VALUE.fullmatch

    class Counting:
        def fullmatch(self, line: str) -> re.Match[str] | None:
            nonlocal calls
            calls += 1
            return fullmatch(line)

    monkeypatch.setattr(parse, "_KEY_VALUE", Counting())
    reader = MetricsReader(spec_of({"stdout": True}))
    for i in range(5_000):
        reader.stdout_line(f"val_loss: {i} (step {i})")
    assert calls == 5_000 and reader.stream.last_step == 4_999


def test_a_clean_jsonl_chunk_is_one_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    loads = json.loads

    def counting(text: str | bytes) -> object:
        nonlocal calls
        calls += 1
        return loads(text)

    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": i, "val_loss": 1.0}) + "\n" for i in range(5_000)))
    monkeypatch.setattr(parse.json, "loads", counting)
    reader = MetricsReader(spec_of({"jsonl": str(path)}), path)
    reader.poll()
    assert calls == 1 and len(reader.stream.series["val_loss"]) == 5_000


def test_jsonl_written_by_a_running_script(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "writes.py"
    script.write_text(
        "import json, os, time\n"
        "with open(os.environ['ABLATE_METRICS'], 'a') as f:\n"
        "    for step in range(5):\n"
        "        f.write(json.dumps({'step': step, 'val_loss': 3.0 - step / 4}) + '\\n'); f.flush()\n"
        "        if step == 2: f.write('oops\\n'); f.flush()\n"
        "        time.sleep(0.05)\n")
    spec = load_spec({"command": f"{shlex.quote(sys.executable)} writes.py", "metrics": {"jsonl": "m.jsonl"},
                      "objective": OBJECTIVE, "summary": {"val_loss": "min"}})
    inv = render(spec, tmp_path, RunValues("r", tmp_path / "run", 0, {}))
    reader = MetricsReader(spec, inv.metrics_file)
    with caplog.at_level(logging.WARNING):
        outcome = run(inv.argv, cwd=inv.cwd, env=inv.env, on_stdout=reader.stdout_line, every=reader.poll,
                      every_s=0.02)
    assert outcome.ok and reader.failure() is None
    assert reader.stream.series["val_loss"] == [(s, 3.0 - s / 4) for s in range(5)]
    assert reader.summary() == {"val_loss": 2.0} and reader.jsonl is not None and reader.jsonl.bad == [4]
    assert sum("line 4 is not a JSON object" in r.getMessage() for r in caplog.records) == 1


def test_the_example_scripts_output_is_stored_as_printed(tmp_path: Path) -> None:
    grid = yaml.safe_load((EXAMPLE / "grid.yaml").read_text())
    raw = grid["trainer"]
    raw["command"] = raw["command"].replace("python", shlex.quote(sys.executable), 1)
    spec = load_spec(raw)
    params = merge({**grid["base"], "max_iters": 20, "eval_interval": 10, "eval_iters": 2},
                   grid["grid"]["arm"]["gated"])
    run_dir = tmp_path / "runs dir" / "gated-0"
    inv = render(spec, EXAMPLE, RunValues("gated-0", run_dir, 0, params))
    assert "--gate=True" in inv.argv and f"--out_dir={run_dir}" in inv.argv
    printed: list[str] = []
    reader = MetricsReader(spec, inv.metrics_file)

    def both(line: str) -> None:
        printed.append(line)
        reader.stdout_line(line)

    outcome = run(inv.argv, cwd=inv.cwd, env=inv.env, on_stdout=both, every=reader.poll)
    assert outcome.ok, (outcome, printed)
    assert (run_dir / "model.pt").is_file()  # --out_dir with a space stayed one argument
    lines = [line for line in printed if line.startswith("step ")]
    expected = {"train_loss": [], "val_loss": []}  # type: dict[str, list[tuple[int | None, float]]]
    for line in lines:  # read back by hand: "step 10: train 2.5097, val 2.4167"
        step, rest = line.removeprefix("step ").split(": ")
        train, val = (part.split(" ")[1] for part in rest.split(", "))
        expected["train_loss"].append((int(step), float(train)))
        expected["val_loss"].append((int(step), float(val)))
    assert [s for s, _ in expected["val_loss"]] == [0, 10, 20]
    assert reader.stream.series == expected
    assert reader.summary() == {name: points[-1][1] for name, points in expected.items()}
    assert reader.failure() is None
