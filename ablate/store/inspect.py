"""One run, or two side by side, as ``ablate show`` and ``ablate diff`` print them. Reads only; JSON-ready.

- ``show(store, ref)``: the run's identity and lifecycle (with its progress while it trains), its config as
  the fields that differ from the defaults (what its id hashes), its summary metrics, its events (loss spikes,
  resumptions, divergence, pruning), its loss curve, whose points fill in live while the run trains, and its
  provenance (``ablate.provenance``: versions, device, the grid's commit).
- ``diff(store, a, b)``: the config fields whose values differ between two runs (each config re-read by
  today's code, so a field added since one of them ran compares at its default), the provenance that differs
  (a torch upgrade, another device, another commit), and their results side by side.

``ref`` is a run id or the start of one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeGuard

from pydantic import ValidationError

from ablate.config import RunConfig, total_steps
from ablate.grid.ids import minimal
from ablate.provenance import differing
from ablate.store.queries import eta_seconds, result_columns
from ablate.store.records import flatten
from ablate.store.render import _cell

if TYPE_CHECKING:
    from ablate.store.api import Store


LIFECYCLE = ("status", "grid", "variant", "seed", "host", "device", "started", "finished", "heartbeat",
             "heartbeat_step", "resumed_from", "mlflow_run_id", "executor", "job_id", "error")


def _resolved(store: Store, run_id: str) -> tuple[dict[str, Any], dict[str, Any], Any, dict[str, Any]]:
    """``(row, flat config, RunConfig or None, results)`` of one run; the config re-read by today's code when
    it can be; the results are its summary metrics and those its trainer named (``result_columns``)."""
    frame = store.runs_frame(run_ids=[run_id])
    row = {c: _cell(v) for c, v in frame.iloc[0].items()}
    results = {k: row[k] for k in result_columns(frame) if row.get(k) is not None}
    stored = store.run_config(run_id)
    try:
        config = RunConfig.model_validate(stored)
    except (ValidationError, ValueError):
        return row, flatten(stored), None, results
    return row, flatten(config.model_dump(mode="json")), config, results


def show(store: Store, ref: str, *, curve_points: int | None = None) -> dict[str, Any]:
    """Everything ``ablate show`` prints about one run (see the module docstring)."""
    run_id = store.resolve_run(ref)
    row, flat, config, results = _resolved(store, run_id)
    changed = flatten(minimal(config)) if config is not None else flat
    events = store.events(run_ids=[run_id])
    curves = store.curves(run_ids=[run_id], metrics=["loss"])
    curve = [(int(s), float(v)) for s, v in zip(curves["step"], curves["value"], strict=True) if _finite(v)]
    if curve_points and len(curve) > curve_points:  # evenly thinned, the last point kept
        stride = len(curve) / curve_points
        curve = [curve[int(i * stride)] for i in range(curve_points - 1)] + [curve[-1]]
    out = {"run_id": run_id, **{k: row.get(k) for k in LIFECYCLE}, "config": changed,
           "results": results,
           "events": [{"kind": k, "step": int(s), "data": d} for k, s, d in
                      zip(events["kind"], events["step"], events["data"], strict=True)],
           "curve": {"metric": "loss", "points": curve},
           "provenance": store.provenance([run_id]).get(run_id) or {}}
    if row.get("status") == "running" and config is not None:
        out["progress"] = _progress(row, curve, config)
    return out


def _progress(row: dict[str, Any], curve: list[tuple[int, float]], config: RunConfig) -> dict[str, Any]:
    """Where a running run is: its step of its total (the latest of its heartbeat and its curve), and an ETA
    at its latest measured pace, as ``ablate status`` gives it (``queries.eta_seconds``)."""
    total = total_steps(config)
    step = max([row.get("heartbeat_step") or 0, *(s + 1 for s, _ in curve[-1:])])
    tps = row.get("tokens_per_s")
    eta = eta_seconds(total - step, float(tps) if tps else None,
                      config.train.batch_size * config.data.seq_len) if step else None
    return {"step": step, "total": total, "eta_s": eta}


def diff(store: Store, a: str, b: str) -> dict[str, Any]:
    """The config fields that differ between two runs, and their results side by side (see the module
    docstring)."""
    ids = [store.resolve_run(a), store.resolve_run(b)]
    (row_a, flat_a, _, res_a), (row_b, flat_b, _, res_b) = (_resolved(store, rid) for rid in ids)
    fields = sorted(k for k in {*flat_a, *flat_b} if flat_a.get(k) != flat_b.get(k))
    results = []
    for key in dict.fromkeys([*res_a, *res_b]):
        va, vb = row_a.get(key), row_b.get(key)
        delta = vb - va if _number(va) and _number(vb) else None
        results.append({"metric": key, "a": va, "b": vb, "b_minus_a": delta})
    prov = store.provenance(ids)
    return {"a": ids[0], "b": ids[1], "variants": {"a": row_a.get("variant"), "b": row_b.get("variant")},
            "seeds": {"a": row_a.get("seed"), "b": row_b.get("seed")},
            "lifecycle": [{"field": k, "a": row_a.get(k), "b": row_b.get(k)} for k in ("status", "grid",
                                                                                       "error")
                          if row_a.get(k) is not None or row_b.get(k) is not None],
            "config": [{"field": k, "a": flat_a.get(k), "b": flat_b.get(k)} for k in fields],
            "provenance": differing(prov.get(ids[0]), prov.get(ids[1])),
            "results": results}


def _number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _finite(v: Any) -> bool:
    return v is not None and math.isfinite(float(v))
