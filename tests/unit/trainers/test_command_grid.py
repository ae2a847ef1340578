"""A command grid file and its runs (ablate/trainers/command/grid.py) and their ids (identity.py), read as
every grid file is (ablate/config/yamlfile.py): the ids' rule, the order and precedence of its sections,
each bad input's one line, and the work of planning 10,000 runs, counted (bench/command_plan.py times it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from work_counts import Work, counting

import ablate.trainers.command.grid as grid_module
import ablate.trainers.command.identity as identity_module
from ablate.errors import ConfigError
from ablate.grid.ids import ID_LENGTH
from ablate.trainers.command.code import CodeIdentity
from ablate.trainers.command.grid import (
    CommandGrid,
    CommandRun,
    expand_command_grid,
    load_command_grid,
    parse_command_grid,
)
from ablate.trainers.command.identity import changed_by_code, digest, identity
from ablate.trainers.command.params import canonical
from ablate.trainers.command.render import RunValues, render

CODE = CodeIdentity("git:0123456789abcdef", "a fixed commit")
TRAINER = r"""trainer:
  command: python train.py --out_dir={run_dir} {args}
  metrics: {stdout: 'val (?P<val_loss>[\d.]+)'}
  objective: {metric: val_loss, better: lower}
"""
TEXT = "name: my-gate\n" + TRAINER + """base:
  max_iters: 2000
  compile: false
  optim: {wd: 0.1}
grid:
  arm:
    baseline: {}
    gated: {gate: true, gate_init: 0.5}
  lr: [3.0e-4, 1.0e-3]
  seed: [0, 1, 2]
"""


def parse(text: str = TEXT, source: str = "g.yaml") -> CommandGrid:
    return parse_command_grid(text, source=source)


def runs(text: str = TEXT, code: CodeIdentity = CODE) -> list[CommandRun]:
    return expand_command_grid(parse(text), code=code)


def ids(text: str = TEXT, code: CodeIdentity = CODE) -> list[str]:
    return [r.run_id for r in runs(text, code)]


def test_the_issues_grid_expands_to_arm_by_lr_by_seed_in_file_order():
    planned = runs()
    assert [(r.arm, r.cell, r.seed) for r in planned[:4]] == [
        ("baseline", {"lr": 3e-4}, 0), ("baseline", {"lr": 3e-4}, 1), ("baseline", {"lr": 3e-4}, 2),
        ("baseline", {"lr": 1e-3}, 0)]
    assert len(planned) == 12 and len({r.run_id for r in planned}) == 12
    gated = planned[-1]
    assert (gated.arm, gated.seed) == ("gated", 2)
    assert gated.params == {"max_iters": 2000, "compile": False, "optim": {"wd": 0.1}, "gate": True,
                            "gate_init": 0.5, "lr": 1e-3}  # no seed: render puts it under seed_arg


def test_a_pinned_id_for_a_fixed_grid_and_code():
    """Changing the id rule changes this: bump identity.VERSION and say so (stores keep the old ids)."""
    first = runs()[0]
    assert (first.run_id, first.stem_id) == ("9c55a3318bcb", "c1a656bcd3dd")


def test_ids_are_the_hash_of_the_canonical_json_the_docstring_describes():
    grid = parse()
    for run in expand_command_grid(grid, code=CODE):
        assert run.run_id == digest(canonical(identity(grid.spec, run.params, run.seed, CODE.value)))
        assert run.stem_id == digest(canonical(identity(grid.spec, run.params, run.seed, None)))
        assert len(run.run_id) == ID_LENGTH and re.fullmatch(r"[0-9a-f]+", run.run_id)  # as ablate's own


@pytest.mark.parametrize("lr", ["1e-2", "1.0e-2", "0.01", "1.0E-2", "10e-3"])
def test_one_number_spelled_any_way_is_one_id(lr):
    assert ids(TEXT.replace("3.0e-4", lr)) == ids(TEXT.replace("3.0e-4", "0.01"))


def test_an_int_and_a_float_are_two_commands():
    assert ids(TEXT.replace("max_iters: 2000", "max_iters: 2000.0")) != ids()


def test_key_order_and_dotted_or_nested_spelling_change_no_id():
    reordered = TEXT.replace("  max_iters: 2000\n  compile: false\n  optim: {wd: 0.1}",
                             "  optim.wd: 0.1\n  compile: false\n  max_iters: 2000").replace(
        "{gate: true, gate_init: 0.5}", "{gate_init: 0.5, gate: true}")
    assert ids(reordered) == ids()


def test_renaming_the_grid_or_an_arm_keeps_the_ids():
    renamed = TEXT.replace("name: my-gate", "name: other").replace("gated:", "with_gate:")
    assert ids(renamed) == ids()
    assert [r.arm for r in runs(renamed)][-1] == "with_gate"


@pytest.mark.parametrize(("field", "before", "after"), [
    ("metrics", "metrics: {stdout: 'val (?P<val_loss>[\\d.]+)'}", "metrics: {stdout: true}"),
    ("objective", "better: lower}", "better: higher}\n  summary: {val_loss: min}"),
    ("resume", "objective:", "resume: {args: --resume, when: '{run_dir}/ckpt.pt'}\n  objective:"),
    ("gpus", "objective:", "gpus: 2\n  objective:"),
    ("code", "objective:", "code: ['*.py']\n  objective:"),
])
def test_how_the_output_is_read_and_where_it_runs_change_no_id(field, before, after):
    assert before in TEXT
    assert ids(TEXT.replace(before, after)) == ids(), field


@pytest.mark.parametrize(("field", "before", "after"), [
    ("command", "python train.py", "python3 train.py"),
    ("args_style", "objective:", "args_style: space\n  objective:"),
    ("bools", "objective:", "bools: flag\n  objective:"),
    ("seed_arg", "objective:", "seed_arg: training.seed\n  objective:"),
    ("shell", "objective:", "shell: true\n  objective:"),
    ("env", "objective:", "env: {OMP_NUM_THREADS: '1'}\n  objective:"),
    ("cwd", "objective:", "cwd: ../repo\n  objective:"),
])
def test_what_runs_changes_every_id_and_stem(field, before, after):
    changed = runs(TEXT.replace(before, after))
    old = runs()
    assert not {r.run_id for r in changed} & {r.run_id for r in old}, field
    assert not {r.stem_id for r in changed} & {r.stem_id for r in old}, field


def test_the_code_changes_every_id_but_no_stem_and_plan_can_say_so():
    old, new = runs(), runs(code=CodeIdentity("git:0123456789abcdef+feedface", "dirty"))
    assert [r.stem_id for r in new] == [r.stem_id for r in old]
    assert not {r.run_id for r in new} & {r.run_id for r in old}
    stored = [(r.run_id, r.stem_id) for r in old[:5]]  # five ran under the old code
    changed = changed_by_code([(r.run_id, r.stem_id) for r in new], stored)
    assert changed == {n.run_id: o.run_id for n, o in zip(new[:5], old[:5], strict=True)}
    assert changed_by_code([(r.run_id, r.stem_id) for r in old], stored) == {}  # stored, or never ran


def test_the_seed_is_a_runs_own_so_it_changes_the_stem_too():
    """The stem leaves out only the code: runs of one stem differ in nothing but the code they ran."""
    a, b = runs()[:2]
    assert a.params == b.params and a.seed != b.seed
    assert a.run_id != b.run_id and a.stem_id != b.stem_id


def test_the_seed_axis_may_come_first_and_then_varies_slowest():
    text = TEXT.replace("  seed: [0, 1, 2]\n", "").replace("grid:\n", "grid:\n  seed: [0, 1, 2]\n")
    planned = runs(text)
    assert [r.seed for r in planned[:4]] == [0, 0, 0, 0]
    assert {r.run_id for r in planned} == set(ids())  # the same runs, in another order


def test_an_arm_merges_into_base_and_an_axis_value_replaces_base():
    text = TEXT.replace("gated: {gate: true, gate_init: 0.5}", "gated: {optim: {momentum: 0.9}}").replace(
        "  lr: [3.0e-4, 1.0e-3]", "  max_iters: [100, 200]")
    gated = runs(text)[-1]
    assert gated.params["optim"] == {"wd": 0.1, "momentum": 0.9}  # merged key by key
    assert gated.params["max_iters"] == 200 and gated.cell == {"max_iters": 200}


def test_a_dotted_axis_sets_one_key_of_a_nested_parameter():
    text = TEXT.replace("  lr: [3.0e-4, 1.0e-3]", "  optim.lr: [3.0e-4, 1.0e-3]")
    assert runs(text)[0].params["optim"] == {"wd": 0.1, "lr": 3e-4}


def test_no_arm_is_one_baseline_and_no_seed_is_seed_zero():
    text = "name: g\n" + TRAINER + "grid:\n  lr: [0.1, 0.2]\n"
    planned = runs(text)
    assert [(r.arm, r.seed, r.params) for r in planned] == [("baseline", 0, {"lr": 0.1}),
                                                            ("baseline", 0, {"lr": 0.2})]


def test_exclude_drops_the_runs_matching_every_key_given():
    text = TEXT + "exclude:\n  - {arm: gated, lr: 0.0003}\n  - {seed: 2, arm: baseline}\n"
    kept = [(r.arm, r.cell["lr"], r.seed) for r in runs(text)]
    assert len(kept) == 12 - 3 - 2
    assert ("gated", 3e-4, 0) not in kept and ("baseline", 1e-3, 2) not in kept and ("gated", 1e-3, 2) in kept


def test_exclude_of_every_run_is_refused():
    grid = parse(TEXT + "exclude:\n  - {lr: 3.0e-4}\n  - {lr: 1.0e-3}\n")
    with pytest.raises(ConfigError, match=r"^g.yaml: exclude: exclude removes every run"):
        expand_command_grid(grid, code=CODE)


def test_a_run_renders_into_its_command_with_its_seed(tmp_path):
    grid = parse(TEXT.replace("objective:", "seed_arg: training.seed\n  objective:"))
    run = expand_command_grid(grid, code=CODE)[-1]
    inv = render(grid.spec, tmp_path, RunValues(run.run_id, tmp_path / run.run_id, run.seed, run.params))
    assert inv.argv[:3] == ("python", "train.py", f"--out_dir={tmp_path / run.run_id}")
    assert "--lr=0.001" in inv.argv and "--training.seed=2" in inv.argv and "--gate=True" in inv.argv


def test_load_reads_the_file_and_takes_cwd_from_its_folder(tmp_path):
    path = tmp_path / "sub" / "g.yaml"
    path.parent.mkdir()
    path.write_text(TEXT.replace("objective:", "cwd: repo\n  objective:"))
    grid = load_command_grid(path)
    assert (grid.name, grid.source, grid.code_dir, grid.text) == ("my-gate", str(path), path.parent / "repo",
                                                                  path.read_text())


BASE = "base:\n  max_iters: 2000\n  compile: false\n  optim: {wd: 0.1}\n"
LRS, SEEDS = "[3.0e-4, 1.0e-3]", "[0, 1, 2]"
SEED_ARG = "seed_arg: training.seed\n  objective:"
BAD = [  # (case, the file's text, what the one line says)
    ("not a mapping", "- a\n",
     r"g.yaml: a grid file is a mapping .*got list"),
    ("malformed", "name: [\n",
     r"g.yaml: line 2: malformed YAML"),
    ("a key twice", TEXT + "name: again\n",
     r"g.yaml: .*key 'name' appears twice"),
    ("include", TEXT + "include: []\n",
     r"g.yaml: include: a command grid has no include: give the runs an arm"),
    ("a typo", TEXT.replace("grid:", "grdi:"),
     r"g.yaml: unknown key 'grdi' \(did you mean 'grid'\?\)"),
    ("no name", TEXT.replace("name: my-gate\n", ""),
     r"g.yaml: name: the grid's name, .*got None"),
    ("no trainer", TEXT.replace(TRAINER, ""),
     r"g.yaml: trainer: a mapping .*got NoneType"),
    ("a bad trainer", TEXT.replace("metric: val_loss", "metric: val_los"),
     r"g.yaml: trainer.metrics.stdout: the regex has no group named 'val_los' .*\(did you mean 'val_loss'"),
    ("base not a mapping", TEXT.replace(BASE, "base: [1]\n"),
     r"g.yaml: base: a mapping, got list"),
    ("a base value twice", TEXT.replace("  compile: false", "  optim.wd: 0.2"),
     r"g.yaml: base: 'optim.wd' is given twice, as 'optim.wd' and as 'optim'"),
    ("arm not a mapping", TEXT.replace("  arm:\n", "  arm: [baseline, gated]\n  arms:\n"),
     r"g.yaml: grid.arm: a mapping of named arms, .*got \['baseline', 'gated'\]"),
    ("an arm not a mapping", TEXT.replace("{gate: true, gate_init: 0.5}", "[gate]"),
     r"g.yaml: grid.arm.gated: an arm is a mapping of overrides of base \(\{\} for none\), got list \['gate"),
    ("an axis not a list", TEXT.replace(LRS, "3.0e-4"),
     r"g.yaml: grid.lr: an axis is a non-empty list of the parameter's values .*got 0.0003"),
    ("an empty axis", TEXT.replace(LRS, "[]"),
     r"g.yaml: grid.lr: an axis is a non-empty list"),
    ("a value twice", TEXT.replace(LRS, "[1e-2, 0.01]"),
     r"g.yaml: grid.lr: 0.01 is given twice \(items 0 and 1 are one value\)"),
    ("an axis name", TEXT.replace("  lr:", "  l r:"),
     r"g.yaml: grid: an axis is arm, seed or a parameter's dotted name \(optim.lr\), got 'l r'"),
    ("an empty seed axis", TEXT.replace(SEEDS, "[]"),
     r"g.yaml: grid.seed: a non-empty list of seeds"),
    ("a seed not an int", TEXT.replace(SEEDS, "[0, 1.5]"),
     r"g.yaml: grid.seed\[1\]: a seed is an integer >= 0, got 1.5"),
    ("a negative seed", TEXT.replace(SEEDS, "[-1]"),
     r"g.yaml: grid.seed\[0\]: .*got -1"),
    ("a seed twice", TEXT.replace(SEEDS, "[0, 1, 0]"),
     r"g.yaml: grid.seed\[2\]: the seed 0 is given twice"),
    ("an arm sets an axis", TEXT.replace("gate_init: 0.5}", "gate_init: 0.5, lr: 0.1}"),
     r"g.yaml: grid.arm.gated: the arm sets 'lr', which the grid's axis 'lr' sets too"),
    ("an arm sets inside an axis", TEXT.replace("gate_init: 0.5}", "gate_init: {a: 1}}").replace(
        "  lr:", "  gate_init.a:"),
     r"g.yaml: grid.arm.gated: the arm sets 'gate_init.a', which the grid's axis"),
    ("two axes, one parameter", TEXT.replace("  seed:", "  lr.x: [1]\n  seed:"),
     r"g.yaml: grid: the axes 'lr' and 'lr.x' set the same parameter"),
    ("empty in base", TEXT.replace("compile: false", "tag: ''"),
     r"g.yaml: base: the parameter 'tag' renders to nothing in \{args\} \(its value is ''\)"),
    ("empty in an arm", TEXT.replace("gate_init: 0.5", "extra: {}"),
     r"g.yaml: grid.arm.gated: the parameter 'extra' renders to nothing"),
    ("empty on an axis", TEXT.replace(LRS, "[0.1, '']"),
     r"g.yaml: grid.lr: the parameter 'lr' renders to nothing"),
    ("the seed in base", TEXT.replace("compile: false", "seed: 1"),
     r"g.yaml: base: 'seed' is the seed's name \(trainer.seed_arg\), which the grid's seed axis sets"),
    ("the seed's name on an axis", TEXT.replace("  lr:", "  training.seed:").replace("objective:", SEED_ARG),
     r"g.yaml: grid.training.seed: 'training.seed' is the seed's name"),
    ("two arms alike", TEXT.replace("    gated:", "    control: {compile: false}\n    gated:"),
     r"g.yaml: grid.arm: arm 'baseline' at lr=0.0003 and arm 'control' at lr=0.0003 give the same param"),
    ("exclude not a list", TEXT + "exclude: {arm: gated}\n",
     r"g.yaml: exclude: a list of mappings"),
    ("an empty exclude entry", TEXT + "exclude: [{}]\n",
     r"g.yaml: exclude\[0\]: an entry is a non-empty mapping"),
    ("exclude names no axis", TEXT + "exclude: [{arms: gated}]\n",
     r"g.yaml: exclude\[0\]: unknown axis 'arms' \(did you mean 'arm'\?\); allowed: arm, seed, lr"),
    ("exclude names no value", TEXT + "exclude: [{lr: 0.1}]\n",
     r"g.yaml: exclude\[0\]: lr: 0.1 is none of the axis's values: 0.0003, 0.001"),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in BAD], ids=[c for c, _, _ in BAD])
def test_bad_input_is_one_line_naming_the_file_field_and_value(text, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse(text)
    assert "\n" not in str(caught.value)


def test_a_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match=r"g.yaml: no such grid file"):
        load_command_grid(tmp_path / "g.yaml")


def _grid_text(lrs: int, seeds: int) -> str:
    values = ", ".join(f"{(i + 1) * 1e-4:.6g}" for i in range(lrs))
    return TEXT.replace(LRS, f"[{values}]").replace(SEEDS, f"[{', '.join(str(s) for s in range(seeds))}]")


def _plan(tmp_path: Path, text: str) -> tuple[Work, int]:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with counting() as work:
        for name in ("load_spec", "code_identity", "canonical", "merge", "render_args", "Identifier"):
            work.spy(grid_module, name)
        work.spy(identity_module, "digest")
        planned = expand_command_grid(load_command_grid(path))  # the code identity taken here, of tmp_path
    return work, len(planned)


def test_planning_ten_times_the_seeds_only_hashes_more(tmp_path):
    """10,000 runs (2 arms x 50 lrs x 100 seeds) against 1,000: the spec is validated once, the code's
    identity taken once, each cell's parameters merged, checked and written as canonical JSON once, and a run
    costs its two hashes (id and stem) only."""
    one, n_one = _plan(tmp_path, _grid_text(50, 10))
    ten, n_ten = _plan(tmp_path, _grid_text(50, 100))
    assert (n_one, n_ten) == (1_000, 10_000)
    assert ten.grown(one) == {**dict.fromkeys(ten.grown(one), 0), "digest": 2 * (n_ten - n_one)}
    assert (ten["load_spec"], ten["code_identity"], ten["Identifier"]) == (1, 1, 1)
    assert ten["merge"] == ten["render_args"] == 2 * 50  # once per cell
    assert ten["canonical"] == 2 * 50 + 50  # once per cell, and per axis value (is it given twice?)
    assert not any(k.startswith(("validate", "dump")) for k, v in ten.items() if v)  # no config model per run


def test_more_cells_cost_per_cell_not_per_run(tmp_path):
    few, _ = _plan(tmp_path, _grid_text(5, 20))
    many, _ = _plan(tmp_path, _grid_text(50, 20))
    grown = many.grown(few)
    assert (grown["merge"], grown["canonical"], grown["load_spec"], grown["digest"]) == (90, 135, 0, 2 * 1800)
