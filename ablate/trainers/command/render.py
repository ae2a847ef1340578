"""One run's command line, folder and environment, from the trainer's spec and the run's values.

The command is split as a shell would split it (``shlex``; no shell runs unless ``trainer.shell``), and the
placeholders are filled after the split, so ``{args}`` standing alone becomes one argument per parameter (two
with ``args_style: space``) and a ``{run_dir}`` with spaces stays one argument. ``check`` is the plan-time
look at the disk and PATH; ``render`` is pure but for asking whether ``resume.when`` exists.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import ConfigError
from ablate.trainers.command import template
from ablate.trainers.command.params import Params, flatten, prefixes, render_args, text, with_seed
from ablate.trainers.command.spec import CommandSpec

PARAMS_FILE = "params.json"  # {args_json_file}, in the run's folder
METRICS_FILE = "metrics.jsonl"  # ABLATE_METRICS when metrics.jsonl names no other path
SHELL = "/bin/sh"


@dataclass(frozen=True)
class RunValues:
    """What one run fills in: its id, folder, seed and parameters (base merged with its arm, no seed)."""

    run_id: str
    run_dir: Path
    seed: int
    params: Params
    devices: str | None = None  # "0,1": CUDA_VISIBLE_DEVICES and {devices}; None leaves both alone
    mlflow_tracking_uri: str | None = None
    mlflow_run_id: str | None = None


@dataclass(frozen=True)
class Invocation:
    """A run's command, ready to start: ``argv`` (``/bin/sh -c ...`` under ``shell``), its folder, its whole
    environment, where its JSONL metrics go, and the parameters file to write first (``write_params``)."""

    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    metrics_file: Path
    params_json: str
    params_file: Path | None  # set when the command names {args_json_file}
    resumed: bool


def render(spec: CommandSpec, grid_dir: Path, run: RunValues, *,
           environ: Mapping[str, str] | None = None) -> Invocation:
    """The ``Invocation`` of ``run``: placeholders filled in the command, cwd, env and metrics path.
    ``environ`` is the environment the command inherits (default: this process's)."""
    params = with_seed(run.params, run.seed, spec.seed_arg)
    flat = flatten(params)
    params_json = json.dumps(params, ensure_ascii=False)
    params_file = run.run_dir / PARAMS_FILE
    values = {"run_dir": str(run.run_dir), "run_id": run.run_id, "seed": str(run.seed),
              "devices": run.devices or "", "args_json_file": str(params_file)}

    def value(name: str) -> str:
        if name in values:
            return values[name]
        if name in flat:
            return text(flat[name], spec.args_style)
        if name in prefixes(params):
            return text(_subtree(params, name), spec.args_style)
        raise ConfigError(_unknown(name, flat, params), where="trainer")

    cwd = grid_dir / template.fill(spec.cwd, value) if spec.cwd is not None else grid_dir
    args = render_args(flat, spec.args_style, spec.bools)
    resumed = spec.resume is not None and (cwd / template.fill(spec.resume.when, value)).exists()
    if spec.shell:
        quoted = {**values, "args": shlex.join(args)}
        line = template.fill(spec.command, lambda n: quoted[n] if n == "args" else shlex.quote(value(n)))
        if resumed and spec.resume is not None:
            line += " " + template.fill(spec.resume.args, lambda n: shlex.quote(value(n)))
        argv: list[str] = [SHELL, "-c", line]
    else:
        argv = _fill_words(shlex.split(spec.command), args, value)
        if resumed and spec.resume is not None:
            argv += _fill_words(shlex.split(spec.resume.args), args, value)
    metrics_file = cwd / template.fill(spec.metrics.jsonl, value) if spec.metrics.jsonl is not None \
        else run.run_dir / METRICS_FILE
    env = dict(os.environ if environ is None else environ)
    env["PYTHONUNBUFFERED"] = "1"  # live output from a Python command; trainer.env may say otherwise
    env.update({k: template.fill(v, value) for k, v in spec.env.items()})
    env.update({"ABLATE_RUN_ID": run.run_id, "ABLATE_RUN_DIR": str(run.run_dir), "ABLATE_SEED": str(run.seed),
                "ABLATE_PARAMS": params_json, "ABLATE_METRICS": str(metrics_file)})
    if run.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = run.devices
    if run.mlflow_tracking_uri is not None:
        env["MLFLOW_TRACKING_URI"] = run.mlflow_tracking_uri
    if run.mlflow_run_id is not None:
        env["MLFLOW_RUN_ID"] = run.mlflow_run_id
    uses_file = any("args_json_file" in template.names(t) for _, t in spec.templates())
    return Invocation(tuple(argv), cwd, env, metrics_file, params_json,
                      params_file if uses_file else None, resumed)


def write_params(invocation: Invocation) -> None:
    """Write the parameters file the command names (``{args_json_file}``), if it names one."""
    if invocation.params_file is not None:
        invocation.params_file.parent.mkdir(parents=True, exist_ok=True)
        invocation.params_file.write_text(invocation.params_json + "\n")


def check(spec: CommandSpec, grid_dir: Path, params: Params, *, source: str | None = None,
          environ: Mapping[str, str] | None = None) -> None:
    """The plan-time checks of a command trainer, each a one-line ``ConfigError``: every placeholder is a run
    value or one of ``params``' names (a run's parameters, base merged with its arm), ``cwd`` exists, and the
    program is on PATH (relative to ``cwd`` when it has a slash)."""
    named = with_seed(params, 0, spec.seed_arg)
    known = set(template.RUN_VALUES) | set(flatten(named)) | prefixes(named)
    for field, text_ in spec.templates():
        for name in template.names(text_):
            if name not in known:
                raise ConfigError(f"trainer.{field}: {_unknown(name, flatten(named), named)}", where=source)
    if spec.cwd is not None and template.names(spec.cwd):
        return  # a cwd of each run's own: looked at when the run starts
    cwd = grid_dir / spec.cwd if spec.cwd is not None else grid_dir
    if not cwd.is_dir():
        raise ConfigError(f"trainer.cwd: no such folder {cwd.resolve()} (cwd is relative to the grid file's "
                          f"folder {grid_dir.resolve()})", where=source)
    if spec.shell:
        return  # the shell finds its programs
    program = shlex.split(spec.command)[0]
    if template.names(program):
        return
    env_path = spec.env.get("PATH", (os.environ if environ is None else environ).get("PATH", os.defpath))
    found = _program(program, cwd, env_path)
    if found is None:
        hint = " (put environment variables under trainer.env)" if "=" in program else \
            f" (relative to cwd {cwd.resolve()})" if "/" in program else ""
        raise ConfigError(f"trainer.command: the program {program!r} is not on PATH{hint}; or give "
                          f"trainer.shell: true to run the command through {SHELL}", where=source)


def program_path(spec: CommandSpec, grid_dir: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Where the command's program is (None under ``shell`` or when it is not found)."""
    if spec.shell:
        return None
    cwd = grid_dir / spec.cwd if spec.cwd is not None else grid_dir
    path = spec.env.get("PATH", (os.environ if environ is None else environ).get("PATH", os.defpath))
    return _program(shlex.split(spec.command)[0], cwd, path)


def _program(program: str, cwd: Path, path: str) -> str | None:
    if "/" in program:
        candidate = cwd / program
        return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    return shutil.which(program, path=path)


def _fill_words(words: list[str], args: list[str], value: Callable[[str], str]) -> list[str]:
    out: list[str] = []
    for word in words:
        if word == "{args}":
            out += args
        else:
            out.append(template.fill(word, value))
    return out


def _subtree(params: Params, dotted: str) -> Params:
    node: object = params
    for part in dotted.split("."):
        assert isinstance(node, dict)
        node = node[part]
    assert isinstance(node, dict)
    return node


def _unknown(name: str, flat: Collection[str], params: Params) -> str:
    """``unknown placeholder {x} (did you mean {y}?); allowed: ...`` for a placeholder no value fills."""
    run_values = sorted(template.RUN_VALUES)
    names = sorted((set(flat) | prefixes(params)) - set(template.RUN_VALUES))
    close = difflib.get_close_matches(name, run_values + names, n=1, cutoff=0.6)
    hint = f" (did you mean {{{close[0]}}}?)" if close else ""
    shown = ", ".join(f"{{{n}}}" for n in names[:8]) + (", ..." if len(names) > 8 else "")
    return (f"unknown placeholder {{{name}}}{hint}; allowed: "
            f"{', '.join(f'{{{n}}}' for n in run_values)}, or a parameter{': ' + shown if names else ''}")
