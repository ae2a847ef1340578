"""``ablate run --until-resolved``: seeds added only where a comparison is open, looks that keep the error
rate.

The simulation drives the real loop (``run_looks``) over a real grid's plan, with each run's metric drawn from
a null (or a true effect) instead of trained; the CLI test records finished runs written as ``result.json``
files (nothing trains) and reads what ``ablate run --until-resolved`` added, reported and reused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import UserInputError
from ablate.resolve import UntilResolved, plan_until_resolved, run_looks, verdict_lines

runner = CliRunner()
ARMS = ("baseline", "sdpa-elementwise", "sdpa-headwise", "v-elementwise")


def _grid(tmp_path: Path, seeds: int = 2, arms: tuple[str, ...] = ARMS, name: str = "seq") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nbase:\n  model: {{preset: tiny}}\n  train: {{steps: 2, batch_size: 2}}\n"
                    f"grid:\n  variant: [{', '.join(arms)}]\n  seed: [{', '.join(map(str, range(seeds)))}]\n")
    return path


def _simulate(planner, ids, spec, effects: dict[str, float], rng: np.random.Generator):
    """One pass of the looks with every run's metric drawn: a per-seed offset shared by the arms of a seed
    (what pairing cancels), noise, and ``effects[variant]`` added to that arm."""
    cell_variant = {c.cell: c.axes["variant"] for c in planner.comps} | {c.reference: "baseline"
                                                                            for c in planner.comps}
    offsets: dict[int, float] = {}
    values: dict[str, float] = {}
    for key, runs in ids.items():
        for seed, rid in runs.items():
            o = offsets.setdefault(seed, float(rng.normal(0, 0.5)))
            values[rid] = 9.0 + o + effects.get(cell_variant.get(key, ""), 0.0) + float(rng.normal(0, 0.3))
    asked: list[list[dict]] = []

    def run_round(extra):
        asked.append(extra)
        return 0

    outcome = run_looks(planner, ids, spec, read=lambda rids: {r: values[r] for r in rids},
                        run_round=run_round, say=lambda line: None)
    return outcome, asked


def test_looking_again_keeps_the_family_wise_false_positive_rate_at_5_percent(tmp_path) -> None:
    spec = UntilResolved(max_seeds=8, round=2)
    planner, ids = plan_until_resolved(_grid(tmp_path, arms=ARMS[:3]), (), spec, home=tmp_path / "home")
    assert planner.plan == [2, 4, 6, 8] and len(planner.comps) == 2
    rng = np.random.default_rng(7)
    draws = 1000
    false = sum(bool(_simulate(planner, ids, spec, {}, rng)[0].resolved_at) for _ in range(draws))
    print(f"null: {false}/{draws} families of 2 comparisons with a false resolution over 4 looks")
    assert false / draws <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / draws), false


def test_a_true_effect_resolves_with_power_that_grows_with_the_seeds(tmp_path) -> None:
    from ablate.stats.power import power

    spec = UntilResolved(max_seeds=8, round=2)
    planner, ids = plan_until_resolved(_grid(tmp_path, arms=ARMS[:2]), (), spec, home=tmp_path / "home")
    rng = np.random.default_rng(8)
    effect, sd = -0.5, 0.3 * np.sqrt(2)  # the paired differences' spread: two arms' noise
    at_look = [_simulate(planner, ids, spec, {"sdpa-elementwise": effect}, rng)[0].resolved_at.get(0)
               for _ in range(200)]
    by = [float(np.mean([a is not None and a <= j for a in at_look])) for j in range(4)]
    print("share of the true effect resolved by each look:", [round(b, 3) for b in by])
    assert all(a < b for a, b in zip(by[1:], by[2:], strict=False))  # power grows with n
    # no better than a fixed test at alpha with all the seeds, and not far below the one at the last look's
    # level
    assert by[-1] <= float(power(effect, sd, 8)) + 0.07
    assert by[-1] >= float(power(effect, sd, 8, alpha=0.03)) - 0.1


def test_only_open_comparisons_get_seeds_and_a_resolved_one_keeps_its_own(tmp_path) -> None:
    spec = UntilResolved(max_seeds=6, round=2)
    planner, ids = plan_until_resolved(_grid(tmp_path), (), spec, home=tmp_path / "home")
    outcome, asked = _simulate(planner, ids, spec, {"sdpa-elementwise": -50.0}, np.random.default_rng(1))
    g1 = next(i for i, c in enumerate(planner.comps) if c.axes["variant"] == "sdpa-elementwise")
    assert outcome.resolved_at[g1] == 1  # n=2 cannot resolve at the first look's level; n=4 does
    assert asked[0] == []  # the first look is the file's grid
    seeds = [sorted({e["seed"] for e in extra if e["variant"] == "sdpa-elementwise"}) for extra in asked]
    assert seeds == [[], [2, 3], [2, 3]][:len(asked)]  # resolved at n=4: no more seeds for it
    others = sorted({e["seed"] for e in asked[-1] if e["variant"] == "v-elementwise"})
    assert others == [2, 3, 4, 5] or outcome.resolved_at.get(2) is not None
    assert any("resolved at look 2, n=4 seeds" in line for line in verdict_lines(outcome, spec))


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"metric": "accuracy"}, "unknown metric 'accuracy'"),
    ({"round": 0}, "--round must be at least 1 seed, got 0"),
    ({"compare": ("no-such-arm",)}, "unknown variant 'no-such-arm'"),
    ({"reference": "sdpa-headwise", "max_seeds": 1}, "--max-seeds 1 is below the grid's 2 seeds"),
])
def test_bad_until_resolved_settings_are_one_line(tmp_path, kwargs, text) -> None:
    with pytest.raises(UserInputError, match=text.replace("(", r"\(")):
        plan_until_resolved(_grid(tmp_path), (), UntilResolved(**kwargs), home=tmp_path / "home")


def test_a_plugin_arms_added_seeds_are_written_as_the_grid_writes_them(tmp_path, plugin_dir) -> None:
    """A plugin arm's runs are named by its label (``myattn:CappedSoftmax(cap=5)``), which no grid accepts
    as a variant: its added seeds' include entries carry the arm as written, and expand to its own runs."""
    path = tmp_path / "plug.yaml"
    path.write_text("name: plug\nplugins: [myattn]\nbase:\n  model: {preset: tiny}\n  train: {steps: 2}\n"
                    "grid:\n  variant: [baseline, {arm: 'myattn:CappedSoftmax', args: {cap: 5}}]\n"
                    "  seed: [0, 1]\n")
    label = "myattn:CappedSoftmax(cap=5)"
    spec = UntilResolved(max_seeds=4, compare=(label,))
    planner, ids = plan_until_resolved(path, (), spec, home=tmp_path / "home")
    (comp,) = planner.comps
    assert comp.label == f"{label} vs baseline"
    added = [e for e in planner.most() if isinstance(e["variant"], dict)]
    assert sorted(e["seed"] for e in added) == [2, 3]
    assert all(e["variant"] == {"arm": "myattn:CappedSoftmax", "args": {"cap": 5}} for e in added)
    assert sorted(ids[comp.cell]) == [0, 1, 2, 3] and sorted(ids[comp.reference]) == [0, 1, 2, 3]


def test_one_seed_is_refused(tmp_path) -> None:
    with pytest.raises(UserInputError, match="needs at least 2 seeds that every compared pair has"):
        plan_until_resolved(_grid(tmp_path, seeds=1), (), UntilResolved(), home=tmp_path / "home")


# ---------------------------------------------------------------- through the CLI
def _ablate(*args: str, home: Path):  # noqa: ANN202
    return runner.invoke(app, [*args, "--home", str(home)])


def _fill(path: Path, home: Path, spec: UntilResolved, effect: dict[str, float]) -> int:
    """Every run the plan may reach, finished with ``val_ppl`` = 9 + a seed's offset + the arm's effect +
    noise; the number of runs written."""
    import dataclasses

    from ablate.grid import expand, load_grid
    from ablate.layout import run_dir
    from ablate.result import RunResult, write_result

    rng = np.random.default_rng(3)
    planner, _ = plan_until_resolved(path, (), spec, home=home)
    grid = load_grid(path)
    widest = expand(dataclasses.replace(grid, include=(*grid.include, *planner.most())))
    for p in widest:
        c = p.config
        ppl = 9.0 + 0.5 * np.sin(c.seed) + effect.get(str(c.variant), 0.0) + rng.normal(0, 0.05)
        write_result(RunResult(run_id=p.run_id, config=c.model_dump(mode="json"), status="done",
                               summary={"steps": 2, "tokens": 8, "train_loss": 2.0, "val_ppl": float(ppl)},
                               metrics={"step": [0, 1], "loss": [3.0, 2.0]}), run_dir(home, p.run_id))
    return len(widest)


def _verdicts(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("val_ppl, ", "  "))]


def test_until_resolved_through_the_cli_adds_seeds_where_open_and_reuses_them(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    path = _grid(tmp_path, arms=("baseline", "sdpa-elementwise", "v-elementwise"))
    spec = UntilResolved(max_seeds=6, round=2)
    assert _fill(path, home, spec, {"sdpa-elementwise": -1.0}) == 3 * 6

    planned = _ablate("plan", str(path), "--until-resolved", "--max-seeds", "6", "--round", "2", home=home)
    assert planned.exit_code == 0, planned.output
    assert "--until-resolved: 2 comparisons, looks at n=2, 4, 6 seeds; at most 12 more runs" in planned.output

    args = ("run", str(path), "--no-mlflow", "--until-resolved", "--max-seeds", "6", "--round", "2")
    ran = _ablate(*args, home=home)
    assert ran.exit_code == 0, ran.output
    assert "sdpa-elementwise vs baseline: -1" in ran.stdout and "resolved at look 2, n=4 seeds" in ran.stdout
    assert "v-elementwise vs baseline" in ran.stdout and "unresolved at n=6 seeds" in ran.stdout
    assert "look 3 of 3 (n=6 seeds" in ran.output
    assert "this run" not in ran.output  # every look found its runs finished: no table of zeros

    from ablate.store import Store

    with Store.open(None, home=home) as store:
        runs = store.runs_frame(grid="seq", current=True)
    seeds = {v: sorted(runs.loc[runs["variant"] == v, "seed"]) for v in ("baseline", "sdpa-elementwise",
                                                                          "v-elementwise")}
    assert seeds == {"baseline": [0, 1, 2, 3, 4, 5], "sdpa-elementwise": [0, 1, 2, 3],
                     "v-elementwise": [0, 1, 2, 3, 4, 5]}
    table = _ablate("report", "table1", "--grid", "seq", "--format", "csv", home=home)
    assert table.exit_code == 0, table.output
    _every_report_reads_the_looks(home)

    again = _ablate(*args, home=home)  # every run reused: the same looks, the same verdicts
    assert again.exit_code == 0 and " to run (" not in again.output, again.output
    assert "this run" not in again.output and "skipped" not in again.output
    assert _verdicts(again.stdout) == _verdicts(ran.stdout) and len(_verdicts(ran.stdout)) == 3

    # the file run again, plain: the seeds the looks added stay in the study, and every report still reads
    # the comparisons as the looks decided them (before, they became runs of an "older configuration")
    plain = _ablate("run", str(path), "--no-mlflow", home=home)
    assert plain.exit_code == 0 and "older configuration" not in plain.output, plain.output
    with Store.open(None, home=home) as store:
        assert store.older_runs("seq") == 0 and len(store.runs_frame(grid="seq", current=True)) == 16
    _every_report_reads_the_looks(home)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_bad_until_resolved_option_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch,
                                                                           command) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    out = _ablate(command, str(_grid(tmp_path)), "--until-resolved", "--metric", "accuracy", home=home)
    assert out.exit_code == 2, out.output
    assert (
        out.output.startswith("error: unknown metric 'accuracy'; allowed: ")
        and "(option --metric)" in out.output
    )
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
    assert not home.exists()


def _every_report_reads_the_looks(home: Path) -> None:
    """What the looks decided is stored, and every report reads it at the look that decided it: G1 resolved
    at look 2 on 4 seeds (though the baseline has 6), G2 open after the last look."""
    import json

    from ablate.store import Store

    with Store.open(None, home=home) as store:
        decided = {d.treatment: d for d in store.decisions("seq")}
    assert set(decided) == {"sdpa-elementwise", "v-elementwise"}
    g1, g2 = decided["sdpa-elementwise"], decided["v-elementwise"]
    assert (g1.look, g1.n, len(g1.runs), g1.plan, g1.family) == (2, 4, 8, (2, 4, 6), 2)
    assert [h.n for h in g1.history] == [2, 4] and g1.p_adj is not None and g1.p_adj < g1.level
    assert (g2.look, g2.n, len(g2.runs), len(g2.history)) == (None, 6, 12, 3)

    t1 = _ablate("report", "table1", "--grid", "seq", home=home).stdout
    row = next(ln for ln in t1.splitlines() if ln.startswith("| SDPA Elementwise G1 |"))
    assert "**-1.0" in row and "(n=4, look 2 of 3)**" in row
    assert "v Elementwise G2 vs baseline (val_ppl): " in t1 and "unresolved after 3 looks, n=6 seeds" in t1
    assert "resolved at look 2 of 3, n=4 seeds" in t1
    compare = _ablate("report", "compare", "--grid", "seq", "--metric", "val_ppl", home=home).stdout
    assert "| **-1.0" in compare and "resolved at look 2 of 3, n=4 seeds: lower, better" in compare
    assert "unresolved after 3 looks, n=6 seeds; needs " in compare
    card = json.loads(_ablate("report", "scorecard", "--grid", "seq", "--format", "json", home=home).stdout)
    beats = next(r for r in card if r["key"] == "g1_beats_baseline")
    assert beats["verdict"] == "holds" and "resolved at look 2 of 3, n=4 seeds" in beats["detail"]
    assert beats["resolved_at_look"] == 2
