"""Summary metrics are declared once (ablate/metrics.py): the result file, the store's columns, the runs table
and the docs agree with the declaration, and a new metric is one entry there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import BigInteger, Float, Integer
from store_data import planned, result

from ablate import metrics
from ablate.metrics import COLUMNS, SUMMARY, SummaryMetric, metric
from ablate.result import RunResult
from ablate.store import Store
from ablate.store.schema import Run

ROOT = Path(__file__).resolve().parents[3]
# the runs table's columns that are not summary metrics: identity, config fields for SQL filters, lifecycle
NOT_METRICS = {"run_id", "config", "config_flat", "config_version", "stem_id", "variant", "seed",
               "model_preset", "n_layers", "d_model", "lr", "train_steps", "batch_size", "seq_len", "status",
               "created", "started", "finished", "heartbeat", "step", "host", "device", "error",
               "mlflow_run_id", "executor", "job_id", "provenance", "trainer", "trainer_params"}


@pytest.mark.parametrize("m", COLUMNS, ids=[m.name for m in COLUMNS])
def test_column_metrics_are_nullable_columns_of_their_type(m: SummaryMetric) -> None:
    column = Run.__table__.c[m.name]
    assert column.nullable, f"{m.name}: a run may not have measured it"
    assert isinstance(column.type, (Integer, BigInteger) if m.kind is int else Float)


def test_every_metric_like_column_of_runs_is_declared() -> None:
    assert set(Run.__table__.c.keys()) - NOT_METRICS == {m.name for m in COLUMNS}


def test_declarations_are_well_formed() -> None:
    names = [m.name for m in SUMMARY]
    assert len(names) == len(set(names))
    for m in SUMMARY:
        assert m.kind in (int, float) and m.meaning and m.source
        assert not m.family or not m.column, f"{m.name}: a family's members are scores, not one column"
    assert (
        metric("ppl/code") is metrics.BY_NAME["ppl/"] and metric("ppl/") is None and metric("bench") is None
    )


def test_cli_md_documents_every_metric() -> None:
    text = (ROOT / "docs" / "CLI.md").read_text()
    for m in SUMMARY:
        shown = f"{m.name}<set>" if m.name == "ppl/" else f"{m.name}<task>" if m.name == "bench/" else m.name
        assert f"`{shown}`" in text, f"docs/CLI.md's runs columns do not mention `{shown}`"


def test_result_file_refuses_an_undeclared_summary_key() -> None:
    with pytest.raises(ValueError, match=r"summary keys \['ppl_code'\] are not declared summary metrics; "
                                         r"declare them in ablate/metrics.py"):
        RunResult(run_id="r", config={}, status="done", summary={"ppl_code": 3.0})
    with pytest.raises(ValueError, match="resumed_from"):  # the result's own field, not a summary key
        RunResult(run_id="r", config={}, status="done", summary={"resumed_from": 3})


def test_runs_table_follows_the_declared_order_and_types(store: Store) -> None:
    store.register_grid(name="g", text="g", runs=[planned(0), planned(1)])
    store.ingest(result(0))
    frame = store.runs_frame()
    shown = [c for c in frame.columns if metric(c) is not None]
    assert shown == metrics.order(shown)
    assert shown[:7] == ["params", "added_params", "steps", "tokens", "train_loss", "val_ppl", "ppl/code"]
    assert list(frame.columns[:5]) == ["run_id", "grid", "variant", "seed", "status"]
    for c in shown:
        assert str(frame[c].dtype) == metric(c).dtype, c


def test_a_new_metric_is_one_declaration(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """What engineer F's flops or a new probe metric takes: one entry in SUMMARY, nothing else."""
    new = SummaryMetric("sink_ratio", float, "attention mass on the sink token, mean over layers",
                        "runner (probes)", better="lower")
    at = [m.name for m in SUMMARY].index("m_act") + 1
    monkeypatch.setattr(metrics, "SUMMARY", (*SUMMARY[:at], new, *SUMMARY[at:]))
    monkeypatch.setattr(metrics, "BY_NAME", {m.name: m for m in metrics.SUMMARY})
    store.register_grid(name="g", text="g", runs=[planned(0)])
    res = result(0)
    store.ingest(res.model_copy(update={"summary": {**res.summary, "sink_ratio": 0.25}}))
    frame = store.runs_frame(where="sink_ratio < 0.5")
    assert frame["sink_ratio"].tolist() == [0.25]
    shown = [c for c in frame.columns if metric(c) is not None]
    assert shown[shown.index("m_act") + 1] == "sink_ratio"  # where it was declared


def test_docs_say_where_a_metric_is_added() -> None:
    text = (ROOT / "docs" / "internals.md").read_text()
    assert re.search(r"ablate/metrics\.py", text) and "one entry" in text
