"""A command run's parameters (ablate/trainers/command/params.py): an arm merged into base key by key, one
canonical form for the run's identity, and ``{args}`` in the three conventions."""

from __future__ import annotations

import argparse
import ast
import shlex

import pytest
import yaml

from ablate.errors import ConfigError
from ablate.trainers.command.params import canonical, flatten, merge, render_args, text, with_seed

ISSUE_BASE = {"max_iters": 2000, "n_layer": 4, "compile": False}
ISSUE_GATED = {"gate": True, "gate_init": 0.5}


def test_an_arm_merges_into_base_key_by_key() -> None:
    base = {"optim": {"lr": 1e-3, "wd": 0.1}, "n_layer": 4}
    assert merge(base, {"optim.lr": 3e-4}) == {"optim": {"lr": 3e-4, "wd": 0.1}, "n_layer": 4}
    assert merge(base, {"optim": {"lr": 3e-4}}) == merge(base, {"optim.lr": 3e-4})
    assert merge(base, {}) == base
    assert merge({"optim.lr": 1e-3, "optim.wd": 0.1}, {}) == {"optim": {"lr": 1e-3, "wd": 0.1}}
    assert merge(base, {"optim": 5}) == {"optim": 5, "n_layer": 4}  # a value replaces a mapping


def test_the_issues_arms() -> None:
    assert merge(ISSUE_BASE, {}) == ISSUE_BASE
    gated = merge(ISSUE_BASE, ISSUE_GATED)
    assert list(gated) == ["max_iters", "n_layer", "compile", "gate", "gate_init"]
    args = render_args(flatten(with_seed({**gated, "lr": 3.0e-4}, 2, "seed")), "equals", "value")
    assert args == ["--max_iters=2000", "--n_layer=4", "--compile=False", "--gate=True", "--gate_init=0.5",
                    "--lr=0.0003", "--seed=2"]


@pytest.mark.parametrize(("overrides", "message"), [
    ([1, 2], r"^grid.arm.gated: an arm is a mapping of overrides of base \(\{\} for none\), got list \[1, "
             r"2\]$"),
    ("gate", r"^grid.arm.gated: an arm is a mapping of overrides of base \(\{\} for none\), got str 'gate'$"),
    ({"optim.lr": 1, "optim": {"lr": 2}}, r"^grid.arm.gated: 'optim.lr' is given twice, as 'optim.lr' and as "
                                          r"'optim'; give it once$"),
    ({"optim": "sgd", "optim.lr": 0.1}, r"^grid.arm.gated: 'optim' is given a value and keys under it "
                                        r"\('optim.lr'\): one of them would be lost; give either$"),
    ({"optim.lr": 0.1, "optim": "sgd"}, r"^grid.arm.gated: 'optim' is given a value and keys under it "
                                        r"\('optim.lr'\)"),
    ({"a..b": 1}, r"'a..b' is not a dotted name"),
    ({"when": {1, 2}}, r"^grid.arm.gated.when: a parameter is a number, string, bool, null, list or "
                       r"mapping, got "
                       r"set"),
], ids=["list", "string", "twice", "value-then-keys-under-it", "keys-then-the-value", "empty-part", "a-set"])
def test_bad_arms(overrides: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        merge(ISSUE_BASE, overrides, where="grid.arm.gated")


def test_canonical_form_is_one_per_parameter_set() -> None:
    spellings = [yaml.safe_load(t) for t in ("{optim.lr: 1.0e-2, b: 1}", "{b: 1, optim: {lr: 0.01}}",
                                             "{optim: {lr: 1.0E-2}, b: 1}")]
    spellings.append({"b": 1, "optim": {"lr": 1e-2}})
    forms = {canonical(merge(s, {})) for s in spellings}
    assert len(forms) == 1, forms
    # the script sees 300 and 300.0 differently (argparse's int() refuses "300.0"): two runs
    assert canonical({"max_iters": 300}) != canonical({"max_iters": 300.0})
    assert canonical({"gate": True}) != canonical({"gate": 1})


@pytest.mark.parametrize(("style", "bools", "expected"), [
    ("equals", "value", ["--lr=0.0003", "--gate=True", "--compile=False", "--tag=None",
                         "--optim.betas=[0.9, 0.95]", "--name=a b"]),
    ("space", "value", ["--lr", "0.0003", "--gate", "True", "--compile", "False", "--tag", "None",
                        "--optim.betas", "[0.9, 0.95]", "--name", "a b"]),
    ("equals", "flag", ["--lr=0.0003", "--gate", "--tag=None", "--optim.betas=[0.9, 0.95]", "--name=a b"]),
    ("space", "flag", ["--lr", "0.0003", "--gate", "--tag", "None", "--optim.betas", "[0.9, 0.95]", "--name",
                       "a b"]),
    ("hydra", "value", ["lr=0.0003", "gate=true", "compile=false", "tag=null", "optim.betas=[0.9,0.95]",
                        "name='a b'"]),
])
def test_args_in_each_convention(style: str, bools: str, expected: list[str]) -> None:
    flat = flatten({"lr": 3e-4, "gate": True, "compile": False, "tag": None, "optim": {"betas": [0.9, 0.95]},
                    "name": "a b"})
    assert render_args(flat, style, bools) == expected  # type: ignore[arg-type]


def test_equals_args_read_back_by_argparse_and_literal_eval() -> None:
    params = {"lr": 3e-4, "max_iters": 2000, "gate": True, "betas": [0.9, 0.95], "name": "run one"}
    args = render_args(flatten(params), "equals", "value")
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float)
    p.add_argument("--max_iters", type=int)
    p.add_argument("--gate", type=lambda s: s == "True")
    p.add_argument("--betas", type=ast.literal_eval)
    p.add_argument("--name")
    assert vars(p.parse_args(args)) == params


def test_hydra_values_are_yaml_literals_that_read_back() -> None:
    values = [True, None, 0.0003, 1e-05, 7, "plain", "true", "1e-3", "null", "two words", "it's", ["a", 1],
              {"k": "v", "n": [1]}]
    for value in values:
        written = text(value, "hydra")
        # PyYAML reads YAML 1.1, where 1e-05 is a string; Hydra quotes with \' where YAML doubles ''
        read = yaml.safe_load(written.replace("\\'", "''")) if written != "1e-05" else 1e-05
        assert read == value, (value, written)
    assert [text(v, "hydra") for v in (float("inf"), float("-inf"), float("nan"))] == ["inf", "-inf", "nan"]


def test_the_seed_goes_in_under_its_name() -> None:
    assert with_seed({"lr": 1}, 3, "seed") == {"lr": 1, "seed": 3}
    assert with_seed({"training": {"steps": 5}}, 3, "training.seed") == {"training": {"steps": 5, "seed": 3}}
    assert with_seed({"lr": 1}, 3, None) == {"lr": 1}
    assert render_args(flatten(with_seed({}, 4, "system.seed")), "space", "value") == ["--system.seed", "4"]
    with pytest.raises(ConfigError, match=r"^base: the parameters set 'seed', the seed's name "
                                          r"\(trainer.seed_arg\): "
                                          r"the seed comes from the grid's seed axis"):
        with_seed({"seed": 1}, 3, "seed")


@pytest.mark.parametrize("value", ["", {}], ids=["empty-string", "empty-mapping"])
def test_a_parameter_that_renders_to_nothing(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^the parameter 'tag' renders to nothing in \{args\} \(its "
                                          r"value is "
                                          r".*\); give it a value or remove it$"):
        render_args(flatten(merge({"tag": value}, {})), "equals", "value")


def test_flag_style_drops_false_and_shell_joins_cleanly() -> None:
    args = render_args({"a": False, "b": True, "c": 1}, "equals", "flag")
    assert args == ["--b", "--c=1"]
    assert shlex.split(shlex.join(args)) == args
