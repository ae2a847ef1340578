"""The probes against known answers: decoders with hand-set weights whose attention and residual stream are
known.

Every constructed model keeps its residual stream equal to the token embeddings (attention output projections
and FFN down projections zeroed), so each layer sees the same input and the answers are exact:

- sink heads: the BOS key (token 256 at position 0) and every query meet with a logit of 3600, every other key
  with 0, so a sink head puts all of each query's attention on position 0 (F-Attn 1);
- uniform heads: zero query weights, so every query spreads its attention evenly over its causal prefix and
  gives the first token 1/(t+1); over queries 1..T-1 that is (H_T - 1) / (T - 1) (H_T the T-th harmonic
  number);
- a planted coordinate: one token's embedding (or one layer's FFN output) holds a huge value, which M-Act (the
  largest |activation| of the layer's output hidden state) must return.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from probe_models import BOS, CPU, T, constructed, uniform_share, windows

from ablate.runner.evaluate import Probes, massive, probe


@pytest.mark.parametrize("variant", ["baseline", "sdpa-elementwise", "sdpa-headwise"])
def test_attention_all_on_the_first_token_gives_f_attn_one(variant):
    model = constructed(variant)
    attn = model(torch.from_numpy(windows()[:, :-1]), probe=True).probes[0]["attn"]
    # the construction: every query on position 0
    assert torch.equal(attn[..., 0], torch.ones_like(attn[..., 0]))
    p = probe(model, windows(), hist_bins=10, device=CPU)
    assert p.layers["f_attn"] == [1.0, 1.0]
    assert p.summary()["f_attn"] == 1.0


def test_uniform_attention_gives_the_closed_form():
    """Queries 1..T-1 only: query 0 can attend nowhere but position 0, and counting it would add 1/T."""
    p = probe(constructed(sink_heads=0), windows(), hist_bins=10, device=CPU)
    expected = uniform_share(T)
    assert expected == pytest.approx(float((Fraction(sum(Fraction(1,
                                                                  k) for k in range(1,
                                                                                    T + 1))) - 1) / (T - 1)))
    assert p.layers["f_attn"] == pytest.approx([expected, expected], rel=1e-6)
    assert p.summary()["f_attn"] == pytest.approx(0.1587153, abs=1e-7)  # (H_16 - 1) / 15


@pytest.mark.parametrize("sink_heads", [1, 2, 3])
def test_f_attn_is_the_mean_over_heads(sink_heads):
    p = probe(constructed(sink_heads=sink_heads), windows(), hist_bins=10, device=CPU)
    expected = (sink_heads * 1.0 + (4 - sink_heads) * uniform_share(T)) / 4
    assert p.layers["f_attn"] == pytest.approx([expected, expected], rel=1e-6)


def test_f_attn_does_not_depend_on_how_the_windows_are_batched():
    model = constructed(sink_heads=2)
    one = probe(model, windows(1), hist_bins=10, device=CPU).layers["f_attn"]
    many = probe(model, windows(7, seed=3), hist_bins=10, device=CPU).layers["f_attn"]
    assert one == pytest.approx(many, rel=1e-6)


def test_m_act_finds_a_planted_residual_coordinate():
    model = constructed()
    with torch.no_grad():
        model.embed.weight[42, 5] = -1234.5  # a massive activation: negative, on one token
    rows = windows(4)
    rows[rows == 42] = 7
    assert probe(model, rows, hist_bins=10, device=CPU).layers["m_act"] == [1.0, 1.0]  # token 42 absent
    rows[2, 9] = 42  # once, in the third window, mid-row
    p = probe(model, rows, hist_bins=10, device=CPU)
    assert p.layers["m_act"] == [1234.5, 1234.5]
    assert p.summary()["m_act"] == 1234.5


def test_m_act_is_per_layer_output_and_carried_by_the_residual():
    """A massive FFN output in layer 1 (as the paper's App. A.3 finds in an early layer) enters the residual
    stream there and stays in every later layer's output: the layers before it do not see it."""
    model = constructed(n_layers=4)
    ffn = model.blocks[1].ffn
    with torch.no_grad():  # non-BOS tokens: ffn_norm(x) = n on d-dim 1 -> 10 silu(n) n on d-dim 3
        ffn.gate_proj.weight[0, 1] = ffn.up_proj.weight[0, 1] = 1.0
        ffn.down_proj.weight[3, 0] = 10.0
    n = torch.tensor(1 / 64 + model.cfg.norm_eps).rsqrt()  # the RMS-normed one-hot: 8, less RMSNorm's eps
    big = (10.0 * F.silu(n) * n).item()
    p = probe(model, windows(), hist_bins=10, device=CPU)
    assert p.layers["m_act"] == pytest.approx([1.0, big, big, big], rel=1e-6)
    assert p.summary()["m_act"] == pytest.approx((1.0 + 3 * big) / 4, rel=1e-6)
    assert big == pytest.approx(639.744, abs=1e-3)


def test_massive_is_the_row_max_over_the_row_median_and_where_it_sits():
    """Sun et al.'s criterion on hand-set rows: torch.median's lower median of the T x d values; a zero median
    has no ratio (nan) and the first-token flag still counts."""
    h = torch.tensor([
        [[1.0, -8.0], [2.0, 1.0], [1.0, 1.0]],   # |h| sorted 1 1 1 1 2 8: 8 / 1 on token 0
        [[1.0, 2.0], [3.0, 6.0], [-12.0, 3.0]],  # 1 2 3 3 6 12: lower median 3, 12 / 3 on token 2
        [[0.0, 5.0], [0.0, 0.0], [0.0, 0.0]],    # median 0: no ratio, the max on token 0
    ])
    ratio, first = massive(h)
    assert ratio[:2].tolist() == [8.0, 4.0] and ratio[2].isnan()
    assert first.tolist() == [True, False, True]


def test_massive_probe_on_a_planted_coordinate():
    """Every coordinate 1, BOS's 2 (so each row's max is on the first token, ratio 2), and one token 42
    holding 300 in one window: that row's max leaves the first token and its ratio is 300."""
    model = constructed()
    with torch.no_grad():
        model.embed.weight.fill_(1.0)
        model.embed.weight[BOS] = 2.0
        model.embed.weight[42, 3] = -300.0
    rows = windows(4)
    rows[rows == 42] = 7
    rows[2, 9] = 42
    p = probe(model, rows, hist_bins=10, device=CPU)
    assert p.layers["massive_ratio"] == [76.5, 76.5]  # (2 + 2 + 300 + 2) / 4
    assert p.layers["massive_first"] == [0.75, 0.75]
    assert p.summary()["massive_ratio"] == 76.5 and p.summary()["massive_first"] == 0.75
    one = probe(model, rows[2:3], hist_bins=10, device=CPU)  # batching does not change a row's numbers
    assert one.layers["massive_ratio"] == [300.0, 300.0] and one.layers["massive_first"] == [0.0, 0.0]


def test_massive_summary_is_the_peak_layer_and_its_share():
    p = Probes({"massive_ratio": [3.0, None, 900.0, 40.0], "massive_first": [0.1, 0.2, 0.95, 0.5]}, {}, [])
    assert (p.summary()["massive_ratio"], p.summary()["massive_first"]) == (900.0, 0.95)
    none = Probes({"massive_ratio": [None, None], "massive_first": [0.5, 0.5]}, {}, []).summary()
    assert (none["massive_ratio"], none["massive_first"]) == (None, None)



def run_stored_without_massive(cli, home, grid):
    """A tiny G1 run trained at ``home`` and stored as one trained before massive_ratio and massive_first
    existed (``result.json`` without them, ingested again); its id and the result its training wrote."""
    from tiny_grids import tiny_grid

    from ablate.cli import app
    from ablate.layout import run_dir
    from ablate.result import read_result, write_result
    from ablate.store import Store

    grid.write_text(tiny_grid("reprobe", variants=["sdpa-elementwise"], steps=10))
    ran = cli.invoke(app, ["run", str(grid), "--home", str(home), "--no-mlflow"])
    assert ran.exit_code == 0, ran.output
    with Store.open(home=home) as store:
        (rid,) = store.runs_frame(grid="reprobe")["run_id"]
    trained = read_result(run_dir(home, rid))
    new = ("massive_ratio", "massive_first")
    write_result(trained.model_copy(update={
        "summary": {k: v for k, v in trained.summary.items() if k not in new},
        "probes": {k: v for k, v in trained.probes.items() if k not in new}}), run_dir(home, rid))
    assert cli.invoke(app, ["ingest", str(run_dir(home, rid)), "--home", str(home)]).exit_code == 0
    return rid, trained

@pytest.mark.slow
def test_ablate_probe_measures_a_new_probe_on_a_run_trained_before_it(tmp_path, module_cache):
    """A run stored without massive_ratio (as one trained before the probe existed) gets it from `ablate
    probe`, equal to what its own training measured, and its other probes come out as they were."""
    import json

    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.layout import run_dir
    from ablate.result import read_result
    from ablate.store import Store

    home = tmp_path / "home"
    cli = CliRunner()
    rid, trained = run_stored_without_massive(cli, home, tmp_path / "g.yaml")
    with Store.open(home=home) as store:
        assert "massive_ratio" not in store.runs_frame(grid="reprobe").columns

    out = cli.invoke(app, ["probe", "--grid", "reprobe", "--home", str(home), "--format", "json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    assert row["run_id"] == rid and row["error"] is None and row["warning"] is None
    # a run never mirrored: MLflow is left alone, and nothing is said of it
    assert out.stderr == f"{rid}: probed\n"
    assert not (home / "mlflow.db").exists()
    assert row["summary"]["massive_ratio"] == trained.summary["massive_ratio"] > 1
    again = read_result(run_dir(home, rid))
    assert again.probes == trained.probes and again.histograms == trained.histograms
    # PPL, steps, wall time kept; the probe summary measured as it was
    assert again.summary == trained.summary
    with Store.open(home=home) as store:
        frame = store.runs_frame(grid="reprobe")
    assert frame["massive_ratio"].tolist() == [trained.summary["massive_ratio"]]
    assert frame["massive_first"].tolist() == [trained.summary["massive_first"]]


@pytest.mark.slow
def test_ablate_probe_logs_into_the_runs_own_mlflow_run(tmp_home, module_cache):
    """A run mirrored to MLflow before massive_ratio existed, whose MLflow run also holds an f_attn and a
    per-layer m_act other than its own (as after a change to a probe's code): `ablate probe` logs into that
    same MLflow run, whose values are then the store's."""
    import json
    import math

    from mlflow import MlflowClient
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.store import Store
    from ablate.store.mlflow_mirror import tracking_uri

    home, grid = tmp_home, tmp_home.parent / "g.yaml"
    cli = CliRunner()
    rid, trained = run_stored_without_massive(cli, home, grid)
    # the next `ablate run` mirrors the done run, as it stands, into MLflow
    assert (ran := cli.invoke(app, ["run", str(grid), "--home", str(home)])).exit_code == 0, ran.output
    with Store.open(home=home) as store:
        (mid,) = store.runs_frame(grid="reprobe")["mlflow_run_id"]
    client = MlflowClient(tracking_uri(home))
    before = client.get_run(mid)
    assert "massive_ratio" not in before.data.metrics and "probe/massive_ratio" not in before.data.metrics
    (f_attn,) = client.get_metric_history(mid, "f_attn")
    client.log_metric(mid, "f_attn", f_attn.value + 1, step=f_attn.step)
    client.log_metric(mid, "probe/m_act", -1.0, step=0)

    out = cli.invoke(app, ["probe", rid, "--home", str(home), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["warning"] is None and out.stderr == f"{rid}: probed\n"
    with Store.open(home=home) as store:
        (row,) = store.runs_frame(run_ids=[rid]).to_dict("records")
        stored = store.probes(run_ids=[rid])
    after = client.get_run(mid)
    probed = ("gate_score", "f_attn", "m_act", "massive_ratio", "massive_first")
    assert {k: after.data.metrics.get(k) for k in probed} == {
        k: row[k] for k in probed if not (isinstance(row[k], float) and math.isnan(row[k]))}
    assert row["massive_ratio"] == trained.summary["massive_ratio"] > 1

    def shown(key: str) -> dict[int, float]:  # per step, the value MLflow shows (the one logged last)
        history = sorted(client.get_metric_history(mid, key), key=lambda m: m.timestamp)
        return {m.step: m.value for m in history}

    for name, layers in stored.groupby("name"):
        assert shown(f"probe/{name}") == dict(zip(layers["layer"], layers["value"], strict=True)), name
    assert {"probe/massive_ratio", "probe/massive_first"} <= set(after.data.metrics)
    assert after.info.status == "FINISHED" and after.data.tags["run_id"] == rid
    same = client.search_runs([after.info.experiment_id], filter_string=f"tags.run_id = '{rid}'")
    assert [r.info.run_id for r in same] == [mid]  # the training's MLflow run, not a new one
    assert {a.path for a in client.list_artifacts(mid)} >= {"result.json", "probes.json"}
    logged = json.loads(open(client.download_artifacts(mid, "result.json", str(tmp_home.parent))).read())
    assert logged["summary"]["massive_ratio"] == row["massive_ratio"]

    # MLflow unreachable: the probe is stored all the same, and one line says its MLflow run was not updated
    (tmp_home.parent / "a-file").write_text("not a folder")
    bad = f"sqlite:///{tmp_home.parent}/a-file/mlflow.db"
    out = cli.invoke(app, ["probe", rid, "--home", str(home), "--format", "json"],
                     env={"MLFLOW_TRACKING_URI": bad})
    assert out.exit_code == 0, out.output
    (res,) = json.loads(out.stdout)
    assert res["error"] is None and res["warning"].startswith(f"MLflow run {mid} at {bad} not updated: ")
    assert out.stderr == f"{rid}: probed\nwarning: {res['warning']}\n"


def test_ablate_probe_takes_run_ids_or_a_grid(tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app

    out = CliRunner().invoke(app, ["probe", "--home", str(tmp_path)])
    assert out.exit_code == 2 and "give run ids or --grid NAME (one of the two)" in out.output, out.output
