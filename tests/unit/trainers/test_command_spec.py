"""The command trainer's grid section (ablate/trainers/command/spec.py): what it accepts, and the one line it
gives for each kind of bad input, naming the field, the wrong value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ablate.errors import ConfigError, UserInputError
from ablate.trainers.command.spec import CommandSpec, load_spec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "own-trainer" / "grid.yaml"
REGEX = r"step (?P<step>\d+): train (?P<train_loss>[\d.]+), val (?P<val_loss>[\d.]+)"
BASE = {"command": "python train.py --out_dir={run_dir} {args}", "metrics": {"stdout": REGEX},
        "objective": {"metric": "val_loss", "better": "lower"}}


def test_the_example_grid_section_loads_with_its_defaults() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())["trainer"]
    spec = load_spec(raw, source=str(EXAMPLE))
    assert spec.metrics.pattern == REGEX
    assert spec.metrics.declared() == {"train_loss", "val_loss"}
    assert (spec.args_style, spec.bools, spec.seed_arg, spec.shell, spec.gpus) == ("equals", "value", "seed",
                                                                                 False, 0)
    assert spec.env == {"OMP_NUM_THREADS": "1"} and spec.cwd is None and spec.code == []
    assert spec.summary_of("val_loss") == "last"


@pytest.mark.parametrize("metrics", [{"stdout": True}, {"jsonl": "{run_dir}/m.jsonl"}, {"mlflow": True},
                                     {"stdout": REGEX, "jsonl": "m.jsonl"}],
                         ids=["key-value", "jsonl", "mlflow", "regex+jsonl"])
def test_open_sources_take_any_objective(metrics: dict[str, object]) -> None:
    spec = load_spec({**BASE, "metrics": metrics, "objective": {"metric": "bleu", "better": "higher"}})
    assert spec.metrics.declared() is None and spec.objective.better == "higher"


def test_every_field_of_the_issue() -> None:
    spec = load_spec({**BASE, "cwd": "../my-repo", "env": {"A": 1, "B": "x"}, "summary": {"val_loss": "min"},
                      "args_style": "space", "bools": "flag", "seed_arg": "training.seed", "shell": True,
                      "resume": {"args": "--init_from=resume", "when": "{run_dir}/ckpt.pt"}, "gpus": 2,
                      "code": ["*.py", "model/**/*.py"]})
    assert spec.env == {"A": "1", "B": "x"}
    assert spec.summary_of("val_loss") == "min" and spec.summary_of("train_loss") == "last"
    assert spec.resume is not None and spec.resume.when == "{run_dir}/ckpt.pt"
    assert [field for field, _ in spec.templates()] == ["command", "cwd", "env.A", "env.B", "resume.args",
                                                        "resume.when"]
    assert isinstance(spec, CommandSpec) and spec.seed_arg == "training.seed"


BAD = [
    ({"metrcs": {}}, r"^grid.yaml: unknown key 'trainer.metrcs' \(did you mean 'metrics'\?\); allowed: "
                     r"args_style"),
    ({"metrics": {"stdout": True, "jsnl": "x"}}, r"unknown key 'trainer.metrics.jsnl' \(did you mean "
                                                 r"'jsonl'\?\); "
                                                 r"allowed: jsonl, mlflow, stdout$"),
    ({"metrics": {"stdout": r"val (?P<val_loss>[\d.]+"}},
     r"^grid.yaml: trainer.metrics.stdout: the regex does not compile \(missing \), unterminated subpattern"),
    ({"metrics": {"stdout": r"val ([\d.]+)"}}, r"trainer.metrics.stdout: the regex names no metric: give "
                                               r"each "
                                               r"metric a named group"),
    ({"objective": {"metric": "val_los", "better": "lower"}},
     r"^grid.yaml: trainer.metrics.stdout: the regex has no group named 'val_los' \(the objective's metric\) "
     r"\(did you mean 'val_loss'\?\); its groups: train_loss, val_loss$"),
    ({"summary": {"bleu": "max"}}, r"trainer.summary.bleu: no source gives the metric; the regex has no "
                                   r"group "
                                   r"named 'bleu'"),
    ({"summary": {"val_loss": "mean"}}, r"trainer.summary.val_loss: Input should be 'last', 'min' or "
                                        r"'max', got "
                                        r"'mean'"),
    ({"objective": {"metric": "val_loss", "better": "less"}},
     r"trainer.objective.better: Input should be 'lower' or 'higher', got 'less'"),
    ({"metrics": {}}, r"trainer.metrics: no source; give stdout \(a regex with named groups, or true\), "
                      r"jsonl"),
    ({"args_style": "posix"}, r"trainer.args_style: Input should be 'equals', 'space' or 'hydra', got "
                              r"'posix'"),
    ({"args_style": "hydra", "bools": "flag"}, r"trainer.bools: 'flag' is for --key switches; hydra takes "
                                               r"key=true"),
    ({"seed_arg": "training..seed"}, r"trainer.seed_arg: a parameter's dotted name \(training.seed\) or "
                                     r"null, "
                                     r"got 'training..seed'"),
    ({"env": {"DEBUG": True}}, r"trainer.env.DEBUG: an environment value is a string or a number, got True "
                               r"\(quote it: 'true'\)"),
    ({"command": "python train.py --flags={args}"}, r"trainer.command: \{args\} stands alone, as a word "
                                                    r"of its "
                                                    r"own, got '--flags=\{args\}'"),
    ({"cwd": "runs/{args}"}, r"trainer.cwd: \{args\} belongs in the command only"),
    ({"command": "python 'train.py"}, r"trainer.command: the command cannot be split as a shell would \(No "
                                      r"closing quotation\)"),
    ({"command": ""}, r"trainer.command: String should have at least 1 character"),
    ({"gpus": -1}, r"trainer.gpus: Input should be greater than or equal to 0, got -1"),
]


@pytest.mark.parametrize(("change", "message"), BAD,
                         ids=[f"{next(iter(c))}-{i}" for i, (c, _) in enumerate(BAD)])
def test_bad_input_is_one_line_naming_the_field(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_spec({**BASE, **change}, source="grid.yaml")
    assert "\n" not in str(caught.value) and isinstance(caught.value, UserInputError)
    assert caught.value.exit_code == 2


def test_a_section_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^g.yaml: trainer: a mapping with at least command, metrics and "
                                          r"objective, got str$"):
        load_spec("python train.py", source="g.yaml")
