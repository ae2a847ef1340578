"""Context extension end to end (paper Table 5): training stages, their hand-over and resumption, retrieval
scored with and without YaRN past the training length, stage validation, the Table 5 grid and its report."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from ablate.config import RunConfig
from ablate.errors import ConfigError
from ablate.runner import RunInterrupted, run_one
from ablate.runner.module import lr_factor

S0, S1 = 6, 6  # steps of stage 0 (seq_len 32, theta 1e4) and stage 1 (seq_len 64, theta 1e5)


pytestmark = pytest.mark.usefixtures("module_cache")


def two_stage(**eval_over) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": "tiny"},
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}},
                 "seq_len": 32, "stream_tokens": 20_000},
        "train": {"steps": S0, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 4, "warmup_frac": 0.2},
        "eval": {"heldout_tokens": 256, "probes": False, **eval_over},
        "stages": [{"data": {"seq_len": 64}, "model.rope_theta": 1e5, "train.steps": S1, "train.lr": 5e-3}],
    })


class StageStart:
    """Keeps the weights and RoPE frequencies each stage starts training with."""

    def __init__(self):
        import lightning as L

        class _Hook(L.Callback):
            def on_train_start(hook, trainer, pl_module):  # noqa: N805 - the outer object keeps the record
                self.weights[pl_module.stage] = {
                    k: v.clone() for k, v in pl_module.model.state_dict().items()
                }
                self.inv_freq[pl_module.stage] = pl_module.model.rotary.inv_freq.clone()

        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.inv_freq: dict[int, torch.Tensor] = {}
        self.callback = _Hook()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted two-stage run, with the weights each stage started from."""
    run_dir = tmp_path_factory.mktemp("two-stage")
    seen = StageStart()
    result = run_one(two_stage(), run_dir, run_id="ref", callbacks=[seen.callback])
    return result, run_dir, seen


def test_stage_one_starts_from_stage_zeros_final_weights(reference):
    from ablate.runner.checkpoints import load_run_model
    from ablate.runner.stages import checkpoint_position, stage_start

    result, run_dir, seen = reference
    assert result.status == "done" and result.resumed_from is None and result.events == []
    assert result.metrics["step"] == list(range(S0 + S1))  # steps numbered across stages
    assert result.summary["steps"] == S0 + S1 and result.summary["tokens"] == S0 * 4 * 32 + S1 * 4 * 64
    # a fresh schedule: stage 1 warms up again, to its own learning rate
    stage1 = RunConfig.model_validate({**two_stage().model_dump(), "stages": []}).train.model_copy(
        update={"steps": S1, "lr": 5e-3})
    assert result.metrics["lr"][S0] == pytest.approx(5e-3 * lr_factor(0, stage1))
    assert result.metrics["lr"][S0 - 1] == pytest.approx(1e-2 * 0.1)  # stage 0 ended at its minimum
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt", "stage0-final.ckpt"]
    assert checkpoint_position(run_dir / "checkpoints" / "last.ckpt") == (1, S1)
    assert checkpoint_position(run_dir / "checkpoints" / "stage0-final.ckpt") == (0, S0)
    # stage 1's first step saw exactly stage 0's final weights; only RoPE (no weights) changed
    final0, _ = stage_start(run_dir / "checkpoints" / "stage0-final.ckpt", "RunMonitor")
    assert set(seen.weights) == {0, 1} and seen.weights[1].keys() == final0.keys()
    assert all(torch.equal(seen.weights[1][k], final0[k]) for k in final0)
    assert not all(torch.equal(seen.weights[0][k], final0[k]) for k in final0)  # stage 0 did train
    dk = 16
    expected = [1.0 / theta ** (torch.arange(0, dk, 2, dtype=torch.float32) / dk) for theta in (1e4, 1e5)]
    assert torch.allclose(seen.inv_freq[0], expected[0]) and torch.allclose(seen.inv_freq[1], expected[1])
    # the run directory loads as its last stage
    model, _, config = load_run_model(run_dir)
    assert (config.data.seq_len, config.model.rope_theta, config.stages) == (64, 1e5, [])
    assert torch.allclose(model.rotary.inv_freq, expected[1])


def test_stop_in_stage_one_resumes_from_its_own_checkpoint(reference, tmp_path):
    result, _, _ = reference
    stop = threading.Event()

    def stop_at(row):
        if row["step"] == S0 + 2:
            stop.set()

    with pytest.raises(RunInterrupted, match=f"stopped after step {S0 + 3} of {S0 + S1}"):
        run_one(two_stage(), tmp_path, run_id="s", on_step=stop_at, stop=stop)
    assert not (tmp_path / "result.json").exists()
    resumed = run_one(two_stage(), tmp_path, run_id="s")
    assert resumed.resumed_from == S0 + 3
    assert [(e.kind, e.step) for e in resumed.events] == [("resumed", S0 + 3)]
    assert (
        resumed.metrics["loss"] == result.metrics["loss"]
        and resumed.metrics["step"] == result.metrics["step"]
    )
    assert resumed.summary["val_ppl"] == result.summary["val_ppl"]


def test_a_cut_between_stages_starts_the_next_stage(reference, tmp_path):
    result, _, _ = reference

    def crash(row):
        if row["step"] == S0:  # stage 1's first step, before any checkpoint of it
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        run_one(two_stage(), tmp_path, run_id="c", on_step=crash)
    final0 = tmp_path / "checkpoints" / "stage0-final.ckpt"
    final0.unlink()  # as if cut between stage 0's last checkpoint and its copy
    resumed = run_one(two_stage(), tmp_path, run_id="c")
    assert final0.is_file() and resumed.resumed_from == S0
    assert [(e.kind, e.step) for e in resumed.events] == [("resumed", S0)]
    assert resumed.metrics["loss"] == result.metrics["loss"]


@pytest.mark.parametrize("factor", ["auto", 4.0], ids=["auto", "static-4"])
def test_yarn_scores_use_the_yarn_rope_on_the_same_weights(reference, factor):
    from ablate.ablations import build_model
    from ablate.runner.checkpoints import load_run_model
    from ablate.runner.stages import benchmark_scores, yarn_rope
    from ablate.runner.tasks import evaluate_tasks

    _, run_dir, _ = reference
    model, tok, final = load_run_model(run_dir)
    cfg = final.model_copy(update={"eval": final.eval.model_copy(
        update={"benchmarks": ["mqar"], "bench_multiples": [0.5, 2.0], "yarn_factor": factor})})
    scores = benchmark_scores(model, tok, cfg, seed=0, device="cpu")
    keys = {"bench/mqar@32", "bench/mqar@128", "bench/mqar"}
    assert set(scores) == keys | {f"{k}/yarn" for k in keys}
    assert all(0 <= v <= 100 for v in scores.values())
    assert scores["bench/mqar/yarn"] == pytest.approx(
        (scores["bench/mqar@32/yarn"] + scores["bench/mqar@128/yarn"]) / 2
    )
    # the YaRN scores are those of a model built with YaRN at that factor over the final length (64), same
    # weights
    for length in (32, 128):
        f = max(1.0, length / 64) if factor == "auto" else factor
        built = build_model(model.cfg.model_copy(update={"rope_yarn_factor": f,
                                                         "rope_yarn_original_len": 64}))
        built.load_state_dict(model.state_dict())
        own = evaluate_tasks(built.eval(), tok, [f"mqar@{length}"], seed=0)[f"bench/mqar@{length}"]
        assert scores[f"bench/mqar@{length}/yarn"] == own
    if factor == "auto":  # at or below the training length there is nothing to scale
        assert scores["bench/mqar@32/yarn"] == scores["bench/mqar@32"]
    # and the swap does change the model's outputs past the training length, and is undone after
    idx = torch.randint(0, 256, (2, 128))
    with torch.no_grad():
        plain = model(idx).logits
        with yarn_rope(model, 2.0, 64):
            scaled = model(idx).logits
        after = model(idx).logits
    assert not torch.allclose(plain, scaled, atol=1e-4) and torch.equal(plain, after)


@pytest.mark.parametrize(("stage", "match"), [
    ({"data.seq_len": 4}, r"stages\.1\.data\.seq_len: Input should be greater than or equal to 8, got 4"),
    ({"model.n_layers": 4}, r"stages\.1: 'model\.n_layers' cannot change between stages"),
    ({"train.stpes": 4}, r"stages\.1: unknown key 'train\.stpes' \(did you mean 'train\.steps'\?\)"),
    ({"data.tokenizer": "bpe"}, r"'data\.tokenizer' cannot change between stages"),
    ({}, r"stages\.1: a stage is a non-empty mapping"),
], ids=["bad-value", "shape-field", "typo", "tokenizer", "empty"])
def test_a_bad_stage_override_names_the_field(tmp_path, stage, match):
    from ablate.grid import expand, load_grid

    path = tmp_path / "grid.yaml"
    path.write_text(json.dumps({"name": "bad", "base": {"stages": [{"train.steps": 5}, stage]},
                                "grid": {"seed": [0]}}))
    with pytest.raises(ConfigError, match=match) as exc:  # the second stage is the bad one
        expand(load_grid(path))
    assert str(exc.value).startswith(f"{path}: base: ")


def test_a_stage_spelled_nested_or_dotted_is_one_run():
    from ablate.grid import run_id

    nested = RunConfig(stages=[{"data": {"seq_len": 512}, "train": {"steps": 20}}])
    dotted = RunConfig(stages=[{"train.steps": 20.0, "data.seq_len": 512}])
    assert nested.stages == [{"data.seq_len": 512, "train.steps": 20}]
    assert run_id(nested) == run_id(dotted) != run_id(RunConfig())


def test_a_staged_runs_progress_counts_every_stage(tmp_path):
    """The progress total (ablate status, show, the pool's display) is the steps of every stage, not stage
    0's."""
    from ablate.config import total_steps
    from ablate.store import Store

    cfg = two_stage()
    assert total_steps(cfg) == total_steps(cfg.model_dump(mode="json")) == S0 + S1
    assert total_steps(RunConfig(train={"steps": 9}).model_dump(mode="json")) == 9
    with Store.open(home=tmp_path) as store:
        store.register_grid(name="g", text="name: g", runs=[{"run_id": "r", "config": cfg, "params": 1,
                                                               "added_params": 0}])
        store.mark_running(run_id="r", host="h", device="cpu")
        store.heartbeat(run_id="r", step=S0 + 2)
        (row,) = store.status_summary()["running"]
    assert (row["step"], row["total_steps"]) == (S0 + 2, S0 + S1)


def test_a_later_stage_is_judged_against_its_own_best_loss(tmp_path):
    """A stage on new data starts far above the previous stage's best loss; that is not a divergence (the rule
    compares a stage's loss with its own best, as the spike rule keeps its own trend)."""
    cfg = RunConfig.model_validate({
        "model": {"preset": "tiny"},
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}], "heldout": {},
                 "seq_len": 32, "stream_tokens": 20_000},
        "train": {"steps": 30, "batch_size": 8, "lr": 1e-2, "diverge_factor": 1.5, "diverge_patience": 3},
        "eval": {"heldout_tokens": 256, "probes": False},
        "stages": [{"data.train": [{"kind": "builtin", "name": "bigram-backcopy"}], "train.steps": 8}],
    })
    result = run_one(cfg, tmp_path, run_id="new-data")
    loss = result.metrics["loss"]
    assert min(loss[:30]) * 1.5 < min(loss[30:33])  # stage 1's first steps: above 1.5 x stage 0's best
    assert result.status == "done" and result.summary["steps"] == 38


@pytest.mark.parametrize("name", ["table5", "table5-paper-scale"])
def test_plan_the_table5_grids(tmp_path, name):
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.config import stage_configs

    res = CliRunner().invoke(app, ["plan", name, "--format", "json", "--home", str(tmp_path)])  # shipped
    assert res.exit_code == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert {r["variant"] for r in runs} == {"baseline", "sdpa-elementwise"}
    for r in runs:
        cfg = RunConfig.model_validate(r["config"])
        first, *later = stage_configs(cfg)
        assert later, "Table 5 extends the context in a later stage"
        last = later[-1]
        assert last.data.seq_len >= 4 * first.data.seq_len and last.model.rope_theta > first.model.rope_theta
        assert cfg.eval.yarn_factor is not None and cfg.eval.benchmarks
    if name == "table5":  # the mixture teaches retrieval, in both stages
        assert all(any(s.kind == "task" for s in c.data.train) for c in (first, last))
    else:
        assert (first.data.seq_len, last.data.seq_len, last.model.rope_theta) == (4096, 32768, 1e6)
        assert cfg.eval.yarn_factor == 4


def test_table5_report_places_plain_and_yarn_scores():
    import pandas as pd

    from ablate.reports.data import catalogue_info
    from ablate.reports.tables import build_table

    rows = []
    for variant, base in (("baseline", 60.0), ("sdpa-elementwise", 70.0)):
        for seed in (0, 1):
            r = {"run_id": f"{variant}-{seed}", "grid": "t5", "variant": variant, "seed": seed,
                 "status": "done", "data.seq_len": 128, "model.rope_yarn_factor": 1.0,
                 "stages": json.dumps([{"data.seq_len": 256, "model.rope_theta": 1e5}])}
            for i, length in enumerate((256, 512, 1024)):  # 1x, 2x, 4x the final training length
                for task, off in (("niah-single", 0.0), ("mqar", 10.0)):
                    r[f"bench/{task}@{length}"] = base - 20 * i + off + seed
                    r[f"bench/{task}@{length}/yarn"] = base - 5 * i + off + seed
            rows.append(r)
    t = build_table(5, pd.DataFrame(rows), catalogue_info(), grid="t5", paper=True)
    assert [c.key for c in t.columns] == ["len/256", "paper:len_32k", "len/512", "paper:len_64k", "len/1024",
                                          "paper:len_128k", "paper:len_4k", "paper:len_8k", "paper:len_16k"]
    assert [c.label for c in t.columns][:6] == ["256 (1x)", "32k (paper)", "512 (2x)", "64k (paper)",
                                                "1k (4x)", "128k (paper)"]
    assert [(r.group, r.label) for r in t.rows] == [("Trained at 256", "Baseline"),
                                                    ("Trained at 256", "SDPA-Gate"),
                                                     ("YaRN Extended", "Baseline"),
                                                     ("YaRN Extended", "SDPA-Gate")]
    # the mean over tasks, then mean ± std over seeds: base - step * i + 5 (task mean) + 0.5 (seed mean)
    assert t.cell("Baseline", "len/256", group="Trained at 256").text == "65.5 ± 0.7"
    assert t.cell("SDPA-Gate", "len/1024", group="Trained at 256").text == "35.5 ± 0.7"
    assert t.cell("Baseline", "len/1024", group="YaRN Extended").text == "55.5 ± 0.7"
    assert t.cell("SDPA-Gate", "len/512", group="YaRN Extended").text == "70.5 ± 0.7"
    assert t.cell("SDPA-Gate", "paper:len_128k", group="YaRN Extended").text == "58.82"
    assert t.cell("Baseline", "paper:len_64k", group="Trained at 256").text == "-"
