"""runs.status becomes the RunStatus enum (a CHECK constraint over its values), with ``pruned`` among them.

Before this revision a run stopped by tune's Optuna pruner was stored as ``failed`` with an error text such as
``pruned: stopped by the Optuna pruner at step 5 (val_ppl 812.3); not a crash``. Those rows become ``pruned``:
the error is cleared, the step goes to ``step`` and ``steps``, and the step and value to a ``pruned`` event
(what ``Store.mark_pruned`` writes now).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# frozen copy of ablate.result.RunStatus as of this revision
STATUSES = ("queued", "running", "done", "diverged", "pruned", "failed")
_PRUNED = re.compile(r"^pruned:.*?(?: at step (?P<step>\d+))?(?: \((?P<metric>\S+) "
                     r"(?P<value>[-+0-9.eEinfa]+)\))?;")


def _status(values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(*values, name="run_status", native_enum=False, length=16, create_constraint=True)


def _parse(error: str) -> tuple[int | None, str | None, float | None]:
    m = _PRUNED.match(error)
    if m is None:
        return None, None, None
    step = int(m["step"]) if m["step"] else None
    try:
        value = float(m["value"]) if m["value"] else None
    except ValueError:
        value = None
    return step, m["metric"], value


def upgrade() -> None:
    runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("status", sa.String),
                    sa.column("error", sa.Text), sa.column("step", sa.Integer),
                    sa.column("steps", sa.Integer))
    events = sa.table("events", sa.column("run_id", sa.String), sa.column("kind", sa.String),
                      sa.column("step", sa.Integer), sa.column("data", sa.JSON))
    conn = op.get_bind()
    pruned = conn.execute(sa.select(runs.c.run_id, runs.c.error, runs.c.step, runs.c.steps).where(
        runs.c.status == "failed", runs.c.error.like("pruned:%"))).all()
    for run_id, error, old_step, old_steps in pruned:
        step, metric, value = _parse(error)
        step = step if step is not None else old_step
        conn.execute(runs.update().where(runs.c.run_id == run_id).values(
            status="pruned", error=None, step=step, steps=old_steps if old_steps is not None else step))
        data = {"value": value} | ({"metric": metric} if metric else {})
        conn.execute(events.insert().values(run_id=run_id, kind="pruned", step=step or 0, data=data))
    with op.batch_alter_table("runs") as batch:
        batch.alter_column("status", existing_type=sa.String(16), type_=_status(STATUSES),
                           existing_nullable=False)


def downgrade() -> None:
    runs = sa.table("runs", sa.column("status", sa.String), sa.column("error", sa.Text))
    with op.batch_alter_table("runs") as batch:
        batch.alter_column("status", existing_type=_status(STATUSES), type_=sa.String(16),
                           existing_nullable=False)
    op.get_bind().execute(runs.update().where(runs.c.status == "pruned").values(
        status="failed", error="pruned: stopped by the Optuna pruner; not a crash"))
