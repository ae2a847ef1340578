"""8 processes register, update and ingest overlapping runs at once: no errors, nothing lost or doubled."""

from __future__ import annotations

import multiprocessing as mp

from store_data import planned, result, worker

from ablate.store import Store

WORKERS, RUNS, PER_WORKER = 8, 40, 10  # each run is registered, run and ingested by two workers


def test_eight_processes_write_at_once(store_url: str) -> None:
    # the database is empty: the workers' concurrent opens also race to create the schema
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(store_url, i, RUNS, PER_WORKER)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    expected_grids: dict[str, set[str]] = {}
    for i in range(WORKERS):
        runs = {planned((i * PER_WORKER // 2 + k) % RUNS).run_id for k in range(PER_WORKER)}
        expected_grids.setdefault(f"grid{i % 3}", set()).update(runs)
    with Store.open(store_url) as store:
        frame = store.runs_frame()
        assert sorted(frame["run_id"]) == [planned(i).run_id for i in range(RUNS)]
        assert set(frame["status"]) == {"done"}
        for grid, runs in expected_grids.items():
            assert set(store.runs_frame(grid=grid)["run_id"]) == runs
        curves = store.curves()
        assert len(curves) == RUNS * (2 * 40 + 2)
        assert not curves.duplicated(["run_id", "metric", "step"]).any()
        assert len(store.probes()) == RUNS * 4 and len(store.events()) == RUNS
        assert len(store.histograms()) == RUNS * 6
        one = frame.set_index("run_id").loc["run007"]
        assert one["ppl/code"] == result(7).summary["ppl/code"] and one["host"] == "node1"
