"""The command line builds each executor's own flags from what the executor declares (``ablate.options``,
``ablate.execute.registry``): a new executor needs no edit of ``ablate/cli``. And ``ablate --help`` stays
light: it imports none of torch, Lightning, MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ablate.cli import run as run_cli
from ablate.execute.registry import EXECUTORS, declared_options
from ablate.options import Option, given
from ablate.resolve import UntilResolved

# a fourth executor, registered before the command line is built (as a plugin's entry would be): its run
# prints the options it was handed
TOY = textwrap.dedent('''
    import json, sys, types
    from ablate.execute.registry import EXECUTORS, Registered
    from ablate.options import Option

    class Toy:
        name = "toy"
        about = "a toy here"

        def run(self, path, sets, options):
            print(json.dumps({"own": options.own, "executor": options.executor}))
            return 0

        def session(self, expanded, options): raise NotImplementedError
        def alive(self, job_ids): return None
        def states(self, job_ids): return None
        def cancel(self, job_ids): return []
        def job_name(self, job_id): return f"toy job {job_id}"

    module = types.ModuleType("toy_executor")
    module.TOY = Toy()
    sys.modules["toy_executor"] = module
    EXECUTORS["toy"] = Registered("toy_executor:TOY", "a toy here", (
        Option("speed", "--toy-speed", int, "how fast it plays", refusal="an option of the toy executor"),
        Option("toys", "--toy", str, "a toy to bring (repeat)", repeat=True),
    ))
    from ablate.cli import main
    sys.argv = ["ablate", *sys.argv[1:]]
    main()
''')


def _ablate(*args: str, prelude: str = TOY, home: str = "") -> subprocess.CompletedProcess[str]:
    env = {"ABLATE_HOME": home} if home else {}
    return subprocess.run([sys.executable, "-c", prelude, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_a_fourth_executor_declares_its_flags_and_gets_their_values(tmp_path) -> None:
    helped = _ablate("run", "--help")
    assert helped.returncode == 0, helped.stderr
    text = " ".join(helped.stdout.split())
    assert "--toy-speed <int> toy: how fast it plays" in text
    assert "--toy <list[str]> toy: a toy to bring (repeat)" in text
    assert "ray (one Ray task per run) or toy (a toy here)" in text  # --executor's help lists it
    assert "--partition <str> slurm: the partition" in text  # the others' are still there

    ran = _ablate("run", "quickstart", "--executor", "toy", "--toy-speed", "3", "--toy", "ball", "--toy",
                  "kite", home=str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {"own": {"speed": 3, "toys": ["ball", "kite"]},
                                                       "executor": "toy"}


def test_a_declared_flag_given_to_another_executor_is_refused_by_its_declaration(tmp_path) -> None:
    ran = _ablate("run", "quickstart", "--toy-speed", "3", home=str(tmp_path))
    assert ran.returncode == 2
    assert "--toy-speed: an option of the toy executor; add --executor toy" in " ".join(ran.stderr.split())


def test_tune_takes_the_options_of_the_executors_that_deal_rounds_only() -> None:
    names = {opt.name for _, opt in declared_options(rounds=True)}
    assert "ray_address" in names and "partition" not in names  # slurm submits whole grids
    assert {opt.name for _, opt in declared_options()} >= {"partition", "nodes", "ray_address"}
    assert not EXECUTORS["slurm"].rounds


def test_given_keeps_only_the_flags_given() -> None:
    opts = [Option("a", "--a", int, "a"), Option("b", "--b", str, "b", repeat=True),
            Option("c", "--c", str, "c")]
    assert given(opts, {"a": 0, "b": [], "c": None}) == {"a": 0}
    with pytest.raises(ValueError, match="--flag"):
        Option("x", "x", str, "no dashes")


def test_the_until_resolved_defaults_are_its_settings_own() -> None:
    spec = UntilResolved()
    assert (run_cli.MAX_SEEDS, run_cli.ROUND, run_cli.METRIC, run_cli.REFERENCE) == (
        spec.max_seeds, spec.round, spec.metric, spec.reference)


HEAVY = textwrap.dedent('''
    import atexit, sys
    atexit.register(lambda: print("HEAVY", sorted(m for m in ("torch", "lightning", "mlflow")
                                                   if m in sys.modules)))
    sys.argv = ["ablate", *sys.argv[1:]]
    from ablate.cli import main
    main()
''')


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["tune", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_library(args) -> None:
    """``ablate --help`` answers at once: none of torch, Lightning, MLflow is imported (its time is measured
    in bench/, not asserted here)."""
    out = _ablate(*args, prelude=HEAVY)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout.splitlines()[-1]
