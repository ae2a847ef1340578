"""``ablate runs --format csv`` is written from the query rows without pandas (#27): its bytes are held to
what pandas writes for the same table (``runs_frame(...).to_csv(index=False)``), column kind by column kind
and through the CLI on both backends."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest
from store_data import planned, result
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.store import Store
from ablate.store.queries import _typed
from ablate.store.render import runs_csv

D = datetime
NAN = float("nan")
COLUMNS = {  # what a runs table's column can hold, by the dtype pandas gives it
    "int64": [1, -2, 2**62],
    "ints with NA": [1, None, 3],
    "float64": [0.1, 1e-05, 1e16, 123456789.123, 2.0, float("inf"), 1 / 3],
    "floats with NaN and None": [1.5, NAN, None],
    "ints and floats": [1, 2.5],
    "bool": [True, False],
    "bools with NA": [True, None],
    "bool and int (object)": [True, 1, 2.5],
    "text that needs quoting": ["a,b", 'q"uote', "line\nbreak", ""],
    "text with NA": ["x", None],
    "a mix (object)": [1, "x", 2.5, None],
    "all NA": [None, None],
    "dates (midnight)": [D(2025, 1, 1), None, D(2025, 3, 4)],
    "seconds": [D(2025, 1, 1), D(2025, 1, 1, 1, 2, 3)],
    "milliseconds": [D(2025, 1, 1, 0, 0, 0, 1000), D(2025, 1, 1, 1)],
    "microseconds": [D(2025, 1, 1, 0, 0, 0, 1001), None],
}
TYPED = {  # the columns runs_frame types (seed, heartbeat_step, declared metrics)
    ("Int64", "ints with NA"): [1, None, 3],
    ("Int64", "integral floats"): [1.0, 2.0, None],
    ("Int64", "a fraction: stays float64"): [1.5, 2.0],
    ("float64", "ints"): [1, 2],
    ("float64", "floats with NaN"): [0.5, NAN, None],
}


@pytest.mark.parametrize("values", list(COLUMNS.values()), ids=list(COLUMNS))
def test_a_column_is_spelled_as_pandas_spells_it(values: list) -> None:
    rows = [[v, "x"] for v in values]  # a second column: an empty cell is written bare, as in the table
    frame = pd.DataFrame.from_records([tuple(r) for r in rows], columns=["a", "b"])
    assert runs_csv(["a", "b"], rows, {}) == frame.to_csv(index=False)
    alone = pd.DataFrame.from_records([(v,) for v in values], columns=["a"])  # alone: an empty cell is ""
    assert runs_csv(["a"], [[v] for v in values], {}) == alone.to_csv(index=False)


@pytest.mark.parametrize(("dtype", "values"), [(d, v) for (d, _), v in TYPED.items()],
                         ids=[n for _, n in TYPED])
def test_a_typed_column_is_spelled_as_its_dtype(dtype: str, values: list) -> None:
    frame = pd.DataFrame.from_records([(v, "x") for v in values], columns=["a", "b"])
    frame["a"] = _typed(frame["a"], dtype)
    assert runs_csv(["a", "b"], [[v, "x"] for v in values], {"a": dtype}) == frame.to_csv(index=False)


@pytest.mark.parametrize("values", [[D(2025, 1, 1, tzinfo=None), "x"], [2**64, 1]],
                         ids=["dates and text", "uint64"])
def test_what_it_cannot_promise_is_left_to_pandas(values: list) -> None:
    assert runs_csv(["a"], [[v] for v in values], {}) is None


def test_the_cli_writes_what_the_frame_writes(store: Store, store_url: str) -> None:
    """Runs of different configs (keys some lack, a list, None), a running one, a failed one with an error
    that needs quoting, scores some lack: the CLI's CSV is the frame's, whole, per grid and with --columns."""
    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(4)])
    other = RunConfig(variant="sdpa-elementwise", seed=7, model={"preset": "tiny", "n_layers": 3}).model_dump(
        mode="json")
    other["train"].pop("lr")  # a key the others have (NA here), a float where they have ints, one only it has
    other["train"]["steps"], other["note"] = 5.5, None
    store.register_grid(name="h", text="h",
                        runs=[{"run_id": "odd", "config": other, "stem_id": "odd", "params": 10,
                                                   "added_params": 0}, planned(0)])
    store.ingest(result(0))
    store.ingest(result(1, steps=12))
    store.mark_running(run_id="run002", host="node9", device="cuda:0")
    store.heartbeat(run_id="run002", step=3)
    store.mark_failed(run_id="run003", error='Traceback, "quoted"\nValueError: x, y')
    assert runs_csv(*store.runs_records()) is not None  # written from the rows, not the frame
    runner = CliRunner()
    for args, grid, cols in [((), None, None), (("--grid", "h"), "h", None),
                             (("--columns", "run_id,ppl/*,train.*,started"), None,
                              "run_id,ppl/*,train.*,started")]:
        out = runner.invoke(app, ["runs", "--store", store_url, "--format", "csv", *args])
        assert out.exit_code == 0, out.output
        frame = store.runs_frame(grid=grid)
        if cols:
            from ablate.store.render import pick_columns

            frame = frame[pick_columns(frame, cols.split(","))]
        assert out.stdout == frame.to_csv(index=False)
