"""``--where``: the whitelist grammar, its error messages, and SQL in it doing nothing (on both backends)."""

from __future__ import annotations

import pandas as pd
import pytest
from store_data import planned, result

from ablate.errors import UserInputError
from ablate.store import Store
from ablate.store.queries import known_columns
from ablate.store.where import Where


def _fill(store: Store) -> Store:
    store.register_grid(name="g", text="g", runs=[planned(i, lr=3e-3 if i < 3 else 6e-3) for i in range(6)])
    for i in range(4):  # run004, run005 stay queued: no scores
        store.ingest(result(i, lr=3e-3 if i < 3 else 6e-3))
    return store


@pytest.fixture
def filled(store: Store) -> Store:
    return _fill(store)


@pytest.fixture(scope="module")
def frame(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """The runs table of a filled store, read once: the grammar tests evaluate on it (pure, backend-free)."""
    with Store.open(f"sqlite:///{tmp_path_factory.mktemp('where') / 'ablate.db'}") as store:
        return _fill(store).runs_frame()


def _select(frame: pd.DataFrame, expr: str) -> list[str]:
    return list(frame[Where(expr, known_columns(frame)).mask(frame).to_numpy()]["run_id"])


CASES = {
    "string-eq": ("variant == 'sdpa-elementwise'", ["run001", "run004"]),
    "and-dotted": ("variant == 'baseline' and train.lr >= 0.004", ["run003"]),
    "or-not": ("not (seed == 0 or status == 'queued')", ["run003"]),
    "in-list": ("variant in ['sdpa-headwise', 'baseline'] and seed < 1", ["run000", "run002"]),
    "not-in": ("variant not in ('baseline',)", ["run001", "run002", "run004", "run005"]),
    "chain": ("0.001 < train.lr <= 0.003", ["run000", "run001", "run002"]),
    "slash-bare": ("ppl/code < 10", ["run000", "run001"]),
    "slash-col": ("col('ppl/prose') >= 14 and col('bench/arith') > 0", ["run002", "run003"]),
    "missing-is-false": ("ppl/code != 9", ["run000", "run002", "run003"]),
    "is-none": ("gate_score is None", ["run000", "run003", "run004", "run005"]),
    "eq-null": ("steps == null", ["run004", "run005"]),
    "bool-column": ("model.qk_norm and seed == 1", ["run003", "run004", "run005"]),
    "negative": ("seed > -1 and model.gate is not None", []),
}


@pytest.mark.parametrize("expr, expected", CASES.values(), ids=CASES.keys())
def test_where_selects(frame: pd.DataFrame, expr: str, expected: list[str]) -> None:
    assert _select(frame, expr) == expected


def test_runs_frame_applies_where(filled: Store) -> None:
    assert list(filled.runs_frame(where="ppl/code < 10 and train.lr < 0.004")["run_id"]) == ["run000",
                                                                                             "run001"]
    assert list(filled.runs_frame(grid="g", where="status == 'queued'")["run_id"]) == ["run004", "run005"]
    with pytest.raises(UserInputError, match="unknown column 'trian.lr'"):
        filled.runs_frame(where="trian.lr > 0")
    with pytest.raises(UserInputError, match=r"unknown column 'ppl/cod' \(did you mean 'ppl/code'\?\)"):
        filled.runs_frame(where="ppl/cod > 0")


def test_scores_no_run_has_yet_are_not_unknown(store: Store) -> None:
    store.register_grid(name="g", text="g", runs=[planned(0)])  # queued: no ppl/ or bench/ columns yet
    assert store.runs_frame(where="ppl/code < 10 or col('bench/arc-e') > 0").empty
    assert list(store.runs_frame(where="not ppl/code < 10")["run_id"]) == ["run000"]


ERRORS = {
    "unknown-dotted": ("train.lrr > 1", r"unknown column 'train.lrr' \(did you mean 'train.lr'\?\); known "
                                        r"columns: added_params, bench/arith, .*, wall_s, "
                                        r"data.\{.*seq_len.*\}, .*train.\{.*batch_size, .*lr, .*\}"),
    "unknown-slash": ("ppl/cod < 3", r"unknown column 'ppl/cod' \(did you mean 'ppl/code'\?\)"),
    "syntax": ("variant ==", r"not a valid expression"),
    "call": ("__import__('os').system('true')", r"is not allowed here"),
    "attr-of-call": ("variant.lower() == 'x'", r"is not allowed here"),
    "arith": ("seed + 1 > 2", r"'seed \+ 1' is not allowed here"),
    "not-a-comparison": ("'baseline'", r"is not a comparison"),
    "is-value": ("seed is 1", r"'is' compares only with None"),
    "in-scalar": ("seed in 1", r"'in' needs a column on the left and a list"),
    "type": ("variant < 3", r"cannot compare variant with 3"),
    "col-args": ("col(variant) == 1", r"col\(\) takes one column name in quotes"),
}


@pytest.mark.parametrize("expr, message", ERRORS.values(), ids=ERRORS.keys())
def test_where_errors(frame: pd.DataFrame, expr: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        _select(frame, expr)


INJECTIONS = [
    "variant == \"x'; DROP TABLE runs; --\"",
    "variant == 'x' or 1=1; DELETE FROM runs",
    "col('run_id; DROP TABLE metrics') == 1",
    "run_id == '' OR ''=''",
]


@pytest.mark.parametrize("expr", INJECTIONS, ids=["drop-in-string", "statement", "in-col", "or-true"])
def test_sql_in_where_does_nothing(filled: Store, expr: str) -> None:
    before = filled.runs_frame()
    try:
        selected = filled.runs_frame(where=expr)
    except UserInputError:
        selected = None
    else:
        assert selected.empty  # a string that matches no run, nothing more
    after = filled.runs_frame()
    assert after.drop(columns=["heartbeat"]).equals(before.drop(columns=["heartbeat"]))
    assert len(filled.curves()) == 4 * (40 * 2 + 2)
