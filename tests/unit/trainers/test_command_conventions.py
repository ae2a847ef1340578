"""Real training scripts of two more conventions, run as command trainers (the argparse one is the
example, tests/unit/trainers/test_command_parse.py): a Hydra app (``args_style: hydra``, ``key=value`` with
nested keys) and a Hugging Face ``Trainer`` script (``TrainingArguments`` flags, its metrics the log lines the
Trainer prints). Each is rendered from a ``CommandSpec``, run in its process group and parsed as it prints;
every stored value equals what the script printed, read back by hand. The scripts: tests/fixtures/scripts/."""

from __future__ import annotations

import ast
import json
import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ablate.trainers.command.params import merge
from ablate.trainers.command.parse import MetricsReader
from ablate.trainers.command.process import CommandOutcome, run
from ablate.trainers.command.render import Invocation, RunValues, render
from ablate.trainers.command.spec import CommandSpec, load_spec

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "scripts"
PYTHON = shlex.quote(sys.executable)
DEADLINE_S = 300.0  # a failsafe for a hung script only: each run takes seconds, even on a loaded machine

# the Hydra app's lines: "step 10: train_loss 0.83125 val_loss 0.91210"
HYDRA_LINE = r"step (?P<step>\d+): train_loss (?P<train_loss>[\d.]+) val_loss (?P<val_loss>[\d.]+)"

# the Trainer's log lines are Python dicts, {'loss': '5.357', 'grad_norm': '1.671', 'learning_rate':
# '0.000875', 'epoch': '0.2857'} and {'eval_loss': '5.198', ...}: transformers 5 prints each float as a
# string ('{:.4g}'), 4.x as a float, so the quotes are optional. They carry no step: the records have none.
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)"
TRAINER_LOG = (rf"\{{'loss': '?(?P<loss>{_NUMBER})'?, 'grad_norm': '?(?P<grad_norm>{_NUMBER})'?, "
               rf"'learning_rate': '?(?P<learning_rate>{_NUMBER})'?"
               rf"|\{{'eval_loss': '?(?P<eval_loss>{_NUMBER})'?")


def files_under(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def run_and_read(spec: CommandSpec, inv: Invocation) -> tuple[CommandOutcome, list[str], MetricsReader]:
    """Run ``inv`` as ablate does, its stdout fed to the spec's parser as it comes: the outcome, every line
    printed, and the reader. A run past ``DEADLINE_S`` is stopped (its whole group) and fails the test."""
    printed: list[str] = []
    reader = MetricsReader(spec, inv.metrics_file)
    deadline = time.monotonic() + DEADLINE_S

    def both(line: str) -> None:
        printed.append(line)
        reader.stdout_line(line)

    def every() -> None:
        reader.poll()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the script ran past {DEADLINE_S:.0f} s; it printed: {printed[-5:]}")

    outcome = run(inv.argv, cwd=inv.cwd, env=inv.env, on_stdout=both, every=every, every_s=0.5)
    return outcome, printed, reader


@pytest.fixture
def hydra_app() -> Iterator[Path]:
    """The Hydra app's folder, held to be left as it was: Hydra writes only into ``hydra.run.dir``."""
    folder = SCRIPTS / "hydra_app"
    before = files_under(folder)
    yield folder
    assert files_under(folder) == before, "the run wrote into the app's folder (the command's cwd)"


def test_a_hydra_app_gets_nested_overrides_and_its_losses_are_stored_as_printed(
        tmp_path: Path, hydra_app: Path) -> None:
    spec = load_spec({"command": f"{PYTHON} hydra_train.py hydra.run.dir={{run_dir}} {{args}}",
                      "args_style": "hydra", "env": {"OMP_NUM_THREADS": "1"},
                      "metrics": {"stdout": HYDRA_LINE},
                      "objective": {"metric": "val_loss", "better": "lower"}})
    base: dict[object, object] = {"train": {"steps": 30, "log_every": 10}, "optim.lr": 3e-3}
    arm = {"optim": {"betas": [0.8, 0.95], "weight_decay": 1e-05}, "model.bias": False,
           "model.activation": "tanh", "run_name": "lr=3e-3, gated"}  # a string Hydra would misread unquoted
    run_dir = tmp_path / "runs dir" / "gated-1"
    inv = render(spec, hydra_app, RunValues("gated-1", run_dir, 1, merge(base, arm)))
    overrides = list(inv.argv[3:])
    assert inv.argv[2] == f"hydra.run.dir={run_dir}"
    assert overrides == ["train.steps=30", "train.log_every=10", "optim.lr=0.003", "optim.betas=[0.8,0.95]",
                         "optim.weight_decay=1e-05", "model.bias=false", "model.activation=tanh",
                         "run_name='lr=3e-3, gated'", "seed=1"]

    outcome, printed, reader = run_and_read(spec, inv)
    assert outcome.ok and outcome.exit_code == 0, (outcome, printed)

    # Hydra's cfg holds every override, nested and typed: as the app printed it, and as Hydra recorded it
    trained_with = {"seed": 1, "run_name": "lr=3e-3, gated",
                    "model": {"hidden": 16, "activation": "tanh", "bias": False},
                    "optim": {"lr": 0.003, "betas": [0.8, 0.95], "weight_decay": 1e-05},
                    "train": {"steps": 30, "batch_size": 32, "log_every": 10}}
    config_lines = [line.removeprefix("config ") for line in printed if line.startswith("config ")]
    assert [json.loads(line) for line in config_lines] == [trained_with]
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text()) == trained_with
    assert yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) == overrides
    assert "run lr=3e-3, gated done after 30 steps" in (run_dir / "hydra_train.log").read_text()

    expected: dict[str, list[tuple[int | None, float]]] = {"train_loss": [], "val_loss": []}
    for line in printed:  # read back by hand: "step 10: train_loss 0.83125 val_loss 0.91210"
        if line.startswith("step "):
            step, rest = line.removeprefix("step ").split(": ")
            words = rest.split(" ")
            for name, value in zip(words[::2], words[1::2], strict=True):
                expected[name].append((int(step), float(value)))
    assert [s for s, _ in expected["val_loss"]] == [10, 20, 30]
    assert reader.stream.series == expected
    assert reader.summary() == {name: points[-1][1] for name, points in expected.items()}
    assert reader.failure() is None


def test_a_transformers_trainer_script_is_read_from_the_lines_the_trainer_prints(tmp_path: Path) -> None:
    folder = SCRIPTS / "hf_trainer"
    before = files_under(folder)
    spec = load_spec({
        "command": f"{PYTHON} hf_train.py --output_dir={{run_dir}} --report_to=none --save_strategy=no "
                   f"--use_cpu --eval_strategy=steps {{args}}",
        "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        "metrics": {"stdout": TRAINER_LOG}, "objective": {"metric": "eval_loss", "better": "lower"},
        "summary": {"eval_loss": "min"}})
    params = merge({"learning_rate": 1e-3, "max_steps": 8, "logging_steps": 2, "eval_steps": 4,
                    "per_device_train_batch_size": 8}, {"n_embd": 32, "n_layer": 1})
    run_dir = tmp_path / "runs" / "hf-0"
    inv = render(spec, folder, RunValues("hf-0", run_dir, 0, params))
    assert inv.argv[-8:] == ("--learning_rate=0.001", "--max_steps=8", "--logging_steps=2", "--eval_steps=4",
                             "--per_device_train_batch_size=8", "--n_embd=32", "--n_layer=1", "--seed=0")
    assert inv.env["HF_HUB_OFFLINE"] == inv.env["TRANSFORMERS_OFFLINE"] == "1"

    outcome, printed, reader = run_and_read(spec, inv)
    assert outcome.ok and outcome.exit_code == 0, (outcome, printed)
    assert outcome.wall_s > 0  # recorded, never bounded here

    logs = [ast.literal_eval(line) for line in printed if line.startswith("{")]  # read back by hand
    expected: dict[str, list[tuple[int | None, float]]] = {}
    for entry in logs:
        names = ("loss", "grad_norm", "learning_rate") if "loss" in entry else \
            ("eval_loss",) if "eval_loss" in entry else ()
        for name in names:
            expected.setdefault(name, []).append((None, float(entry[name])))
    assert {name: len(points) for name, points in expected.items()} == \
        {"loss": 4, "grad_norm": 4, "learning_rate": 4, "eval_loss": 2}  # max_steps 8: logs at 2, 4, 6, 8
    assert any("train_loss" in entry for entry in logs)  # the last line, which the pattern leaves alone
    assert reader.stream.series == expected
    assert reader.summary()["eval_loss"] == min(v for _, v in expected["eval_loss"])
    assert reader.summary()["loss"] == expected["loss"][-1][1]
    assert reader.failure() is None
    assert files_under(folder) == before  # the Trainer wrote only under --output_dir, if anywhere


@pytest.mark.parametrize("line, values", [
    ("{'loss': '5.357', 'grad_norm': '1.671', 'learning_rate': '0.000875', 'epoch': '0.2857'}",
     {"loss": 5.357, "grad_norm": 1.671, "learning_rate": 0.000875}),
    ("{'loss': 2.3107, 'grad_norm': 0.98, 'learning_rate': 5e-05, 'epoch': 1.0}",  # transformers 4.x
     {"loss": 2.3107, "grad_norm": 0.98, "learning_rate": 5e-05}),
    ("{'loss': 'nan', 'grad_norm': 'inf', 'learning_rate': '1e-05', 'epoch': '3'}",
     {"loss": float("nan"), "grad_norm": float("inf"), "learning_rate": 1e-05}),
    ("{'eval_loss': '5.198', 'eval_runtime': '0.0029', 'epoch': '0.5714'}", {"eval_loss": 5.198}),
    ("{'train_runtime': '0.0647', 'train_loss': '5.241', 'epoch': '1.143'}", None),
], ids=["v5", "v4", "nan-and-exponent", "eval", "summary-line"])
def test_the_trainer_log_pattern(line: str, values: dict[str, float] | None) -> None:
    reader = MetricsReader(load_spec({"command": "train {args}", "metrics": {"stdout": TRAINER_LOG},
                                      "objective": {"metric": "eval_loss", "better": "lower"}}))
    reader.stdout_line(line)
    got = reader.stream.last()
    if values is None:
        assert got == {}
        return
    assert set(got) == set(values)
    for name, value in values.items():  # nan is not equal to itself: compare the texts
        assert repr(got[name]) == repr(value)
    assert re.search(TRAINER_LOG, line) is not None
