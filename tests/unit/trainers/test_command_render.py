"""One command run's argv, folder and environment (ablate/trainers/command/render.py), the plan-time checks of
the disk and PATH, and the code's identity (code.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.errors import ConfigError
from ablate.trainers.command.code import code_identity
from ablate.trainers.command.params import merge
from ablate.trainers.command.render import Invocation, RunValues, check, program_path, render, write_params
from ablate.trainers.command.spec import load_spec

REGEX = r"val (?P<val_loss>[\d.]+)"
OBJECTIVE = {"metric": "val_loss", "better": "lower"}
PARAMS = merge({"max_iters": 2000, "n_layer": 4, "compile": False, "optim.lr": 1e-3}, {"gate": True})


def spec_of(command: str, **fields: object):  # noqa: ANN201 - a CommandSpec
    return load_spec({"command": command, "metrics": {"stdout": REGEX}, "objective": OBJECTIVE, **fields})


def run_values(tmp_path: Path, **kw: object) -> RunValues:
    values: dict = {"run_id": "r1", "run_dir": tmp_path / "my runs" / "r1", "seed": 1, "params": PARAMS} | kw
    return RunValues(**values)


def run(inv: Invocation) -> str:
    """What the rendered command prints."""
    done = subprocess.run(inv.argv, cwd=inv.cwd, env=inv.env, capture_output=True, text=True, check=True)
    return done.stdout


def test_the_issues_command(tmp_path: Path) -> None:
    inv = render(spec_of("python train.py --out_dir={run_dir} {args}"), tmp_path, run_values(tmp_path),
                 environ={"PATH": "/usr/bin"})
    assert inv.argv == ("python", "train.py", f"--out_dir={tmp_path}/my runs/r1", "--max_iters=2000",
                        "--n_layer=4", "--compile=False", "--optim.lr=0.001", "--gate=True", "--seed=1")
    assert inv.cwd == tmp_path and inv.params_file is None and not inv.resumed
    assert inv.metrics_file == tmp_path / "my runs" / "r1" / "metrics.jsonl"


def test_the_environment(tmp_path: Path) -> None:
    spec = spec_of("python t.py", env={"OMP_NUM_THREADS": 1, "OUT": "{run_dir}/x", "PYTHONUNBUFFERED": "0"})
    run = run_values(tmp_path, devices="0,1", mlflow_tracking_uri="file:///m", mlflow_run_id="abc")
    env = render(spec, tmp_path, run, environ={"PATH": "/bin", "HOME": "/h"}).env
    assert env["PATH"] == "/bin" and env["HOME"] == "/h" and env["OMP_NUM_THREADS"] == "1"
    assert env["OUT"] == f"{tmp_path}/my runs/r1/x" and env["PYTHONUNBUFFERED"] == "0"
    assert (env["ABLATE_RUN_ID"], env["ABLATE_SEED"], env["ABLATE_RUN_DIR"]) == ("r1", "1", str(run.run_dir))
    assert json.loads(env["ABLATE_PARAMS"]) == {**PARAMS, "seed": 1}
    assert env["ABLATE_METRICS"] == str(run.run_dir / "metrics.jsonl")
    assert (env["CUDA_VISIBLE_DEVICES"], env["MLFLOW_TRACKING_URI"], env["MLFLOW_RUN_ID"]) == ("0,1", "file:///m",
                                                                                             "abc")
    plain = render(spec_of("python t.py"), tmp_path, run_values(tmp_path), environ={})
    assert plain.env["PYTHONUNBUFFERED"] == "1"
    assert not {"CUDA_VISIBLE_DEVICES", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"} & set(plain.env)


@pytest.mark.parametrize(("style", "bools", "seed_arg", "tail"), [
    ("equals", "value", "seed", ["--max_iters=2000", "--compile=False", "--optim.lr=0.001", "--seed=1"]),
    ("space", "flag", "seed", ["--max_iters", "2000", "--optim.lr", "0.001", "--seed", "1"]),
    ("hydra", "value", "training.seed",
     ["max_iters=2000", "compile=false", "optim.lr=0.001", "training.seed=1"]),
    ("equals", "value", None, ["--max_iters=2000", "--compile=False", "--optim.lr=0.001"]),
])
def test_args_conventions_in_the_command(tmp_path: Path, style: str, bools: str, seed_arg: str | None,
                                         tail: list[str]) -> None:
    spec = spec_of("train {args} --tag={seed}", args_style=style, bools=bools, seed_arg=seed_arg)
    params = merge({"max_iters": 2000, "compile": False}, {"optim": {"lr": 1e-3}})
    inv = render(spec, tmp_path, run_values(tmp_path, params=params), environ={})
    assert list(inv.argv) == ["train", *tail, "--tag=1"]


def test_placeholders_fill_after_the_split(tmp_path: Path) -> None:
    spec = spec_of("python 'my script.py' --out {run_dir} --lr={optim.lr} --cfg {args_json_file} "
                   "--json='{\"a\": 1}' {{literal}} {gate}")
    run = run_values(tmp_path)
    inv = render(spec, tmp_path, run, environ={})
    assert inv.argv == ("python", "my script.py", "--out", str(run.run_dir), "--lr=0.001", "--cfg",
                        str(run.run_dir / "params.json"), '--json={"a": 1}', "{literal}", "True")
    assert inv.params_file == run.run_dir / "params.json"
    write_params(inv)
    assert json.loads(inv.params_file.read_text()) == {**PARAMS, "seed": 1}


def test_shell_mode_quotes_what_it_fills(tmp_path: Path) -> None:
    spec = spec_of("cd . && printf '%s\\n' {run_dir} {args} | head -3", shell=True)
    inv = render(spec, tmp_path, run_values(tmp_path, params={"name": "a b; echo pwned"}), environ={})
    assert inv.argv[:2] == ("/bin/sh", "-c")
    out = run(inv)
    assert out.splitlines() == [f"{tmp_path}/my runs/r1", "--name=a b; echo pwned", "--seed=1"]


def test_resume_adds_its_args_once_the_file_exists(tmp_path: Path) -> None:
    spec = spec_of("python train.py {args}", resume={"args": "--init_from=resume --ckpt {run_dir}/ckpt.pt",
                                                     "when": "{run_dir}/ckpt.pt"})
    run = run_values(tmp_path, params={"lr": 0.1})
    assert render(spec, tmp_path, run, environ={}).argv == ("python", "train.py", "--lr=0.1", "--seed=1")
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "ckpt.pt").write_bytes(b"")
    inv = render(spec, tmp_path, run, environ={})
    assert inv.resumed and inv.argv[-3:] == ("--init_from=resume", "--ckpt", str(run.run_dir / "ckpt.pt"))


def test_cwd_and_metrics_paths_are_relative_to_the_grid_and_cwd(tmp_path: Path) -> None:
    spec = load_spec({"command": "python t.py", "cwd": "../repo", "metrics": {"jsonl": "logs/{run_id}.jsonl"},
                      "objective": OBJECTIVE})
    inv = render(spec, tmp_path / "grids", run_values(tmp_path), environ={})
    assert inv.cwd == tmp_path / "grids" / ".." / "repo"
    assert inv.metrics_file == inv.cwd / "logs" / "r1.jsonl" == Path(inv.env["ABLATE_METRICS"])


def test_plan_time_checks(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "trainit"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    env = {"PATH": str(tmp_path / "bin")}
    check(spec_of("trainit {args} --lr {optim.lr} --o {run_dir}"), tmp_path, PARAMS, environ=env)
    check(spec_of("./run.sh {args}"), tmp_path, PARAMS, environ=env)
    assert program_path(spec_of("trainit"), tmp_path, env) == str(tool)
    bad = [
        (spec_of("trainit --lr {optim.lrr}"), r"^g.yaml: trainer.command: unknown placeholder \{optim.lrr\} "
                                              r"\(did you mean \{optim.lr\}\?\); allowed: \{args\}, "
                                              r"\{args_json_file\}, \{devices\}, \{run_dir\}, \{run_id\}, "
                                              r"\{seed\}, "
                                              r"or a parameter: \{compile\}, \{gate\}"),
        (spec_of("trainit", env={"X": "{rundir}"}), r"trainer.env.X: unknown placeholder \{rundir\} \(did "
                                                    r"you mean "
                                                    r"\{run_dir\}\?\)"),
        (spec_of("trainx {args}"), r"^g.yaml: trainer.command: the program 'trainx' is not on PATH; or give "
                                   r"trainer.shell: true"),
        (spec_of("./nope.sh"), r"the program './nope.sh' is not on PATH \(relative to cwd "),
        (spec_of("OMP_NUM_THREADS=1 trainit"), r"the program 'OMP_NUM_THREADS=1' is not on PATH \(put "
                                               r"environment "
                                               r"variables under trainer.env\)"),
        (spec_of("trainit", cwd="missing"), r"^g.yaml: trainer.cwd: no such folder .*/missing \(cwd is "
                                            r"relative "
                                            r"to the grid file's folder "),
    ]
    for spec, message in bad:
        with pytest.raises(ConfigError, match=message):
            check(spec, tmp_path, PARAMS, source="g.yaml", environ=env)
    check(spec_of("cd x && anything {args}", shell=True), tmp_path, PARAMS, environ=env)  # the shell finds it


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_code_identity_follows_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    (repo / ".gitignore").write_text("out/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    clean = code_identity(repo / "sub")
    assert clean.value.startswith("git:") and "+" not in clean.value and "git commit" in clean.about
    (repo / "out").mkdir()
    (repo / "out" / "ckpt.pt").write_bytes(b"x")  # ignored: no change
    assert code_identity(repo / "sub") == clean
    (repo / "notes.py").write_text("x = 1\n")  # untracked, not ignored
    untracked = code_identity(repo / "sub")
    assert untracked.value.startswith(clean.value + "+") and "uncommitted" in untracked.about
    (repo / "notes.py").write_text("x = 2\n")
    assert code_identity(repo / "sub").value != untracked.value
    (repo / "notes.py").unlink()
    (repo / "train.py").write_text("print(2)\n")  # a tracked change
    edited = code_identity(repo)
    assert edited.value not in (clean.value, untracked.value) and edited.value.startswith(clean.value + "+")
    (repo / "train.py").write_text("print(1)\n")
    assert code_identity(repo) == clean


def test_code_identity_of_listed_files_and_outside_a_repository(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("a\n")
    (tmp_path / "pkg" / "m.py").write_text("b\n")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "x.py").write_text("c\n")
    loose = code_identity(tmp_path)
    assert loose.value.startswith("py:")
    assert "no git repository" in loose.about and "2 .py files" in loose.about
    (tmp_path / ".venv" / "lib" / "x.py").write_text("changed\n")  # a virtual environment is not the code
    assert code_identity(tmp_path) == loose
    listed = code_identity(tmp_path, ["train.py"])
    assert listed.value.startswith("files:")
    (tmp_path / "pkg" / "m.py").write_text("changed\n")
    assert code_identity(tmp_path, ["train.py"]) == listed and code_identity(tmp_path) != loose
    with pytest.raises(ConfigError, match=r"trainer.code: 'model/\*\*/\*.py' matches no file in "):
        code_identity(tmp_path, ["train.py", "model/**/*.py"])


def test_a_rendered_command_runs(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text("import json, os, sys\nprint(json.dumps([sys.argv[1:], os.environ['ABLATE_SEED']]))\n")
    spec = spec_of(f"{shlex.quote(sys.executable)} show.py --out={{run_dir}} {{args}}")
    inv = render(spec, tmp_path, run_values(tmp_path, params={"lr": 3e-4, "optim": {"wd": 0.1}}),
                 environ={})
    argv, seed = json.loads(run(inv))
    assert argv == [f"--out={tmp_path}/my runs/r1", "--lr=0.0003", "--optim.wd=0.1", "--seed=1"]
    assert seed == "1"
