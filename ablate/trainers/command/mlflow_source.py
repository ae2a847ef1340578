"""A command's metrics read from the MLflow run ablate opened for it (``metrics: {mlflow: true}``): the script
gets ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID``, so ``mlflow.start_run()`` logs into that run, and
``MlflowTail`` reads back what it logged, as records of the run's stream.

``poll()`` returns the points logged since the last poll, each metric's history read from the step after the
last one read. Metrics the stream already has from another source (what ablate itself mirrors into the same
run from stdout or JSONL) are left out, so no value is counted twice. MLflow is imported when a tail is
made: only a command that reads MLflow pays for it.
"""

from __future__ import annotations

from collections.abc import Collection

from ablate.trainers.command.parse import Record


class MlflowTail:
    """The points a command logs into MLflow run ``run_id`` at ``uri``, read as they come."""

    def __init__(self, uri: str, run_id: str):
        from mlflow.tracking import MlflowClient

        self.client, self.run_id = MlflowClient(tracking_uri=uri), run_id
        self._last: dict[str, int] = {}  # metric -> the last step read

    def poll(self, skip: Collection[str] = ()) -> list[Record]:
        """New points of every metric but those in ``skip``, by step (a step's metrics in one record)."""
        keys = [k for k in self.client.get_run(self.run_id).data.metrics if k not in skip]
        by_step: dict[int, dict[str, float]] = {}
        for key in keys:
            last = self._last.get(key, -1)
            for point in self.client.get_metric_history(self.run_id, key):
                if point.step > last:
                    by_step.setdefault(int(point.step), {})[key] = float(point.value)
                    self._last[key] = max(self._last.get(key, -1), int(point.step))
        return [(step, values) for step, values in sorted(by_step.items())]
