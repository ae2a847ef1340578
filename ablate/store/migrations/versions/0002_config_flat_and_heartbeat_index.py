"""runs.config_flat (the config flattened to dotted paths, filled for existing rows) so the runs table does
not flatten every config at query time; an index for ``stale_runs`` / ``ablate status`` (running runs by
heartbeat).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    # frozen copy of ablate.store.records.flatten as of this revision
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path + "."))
        elif isinstance(value, list):
            out[path] = json.dumps(value, separators=(",", ":"))
        else:
            out[path] = value
    return out


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("config_flat", sa.JSON(), nullable=True))
    op.create_index("ix_runs_status_heartbeat", "runs", ["status", "heartbeat"])
    runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("config", sa.JSON),
                    sa.column("config_flat", sa.JSON))
    conn = op.get_bind()
    rows = conn.execute(sa.select(runs.c.run_id, runs.c.config)).all()
    if rows:
        conn.execute(runs.update().where(runs.c.run_id == sa.bindparam("rid")),
                     [{"rid": run_id, "config_flat": _flatten(config or {})} for run_id, config in rows])


def downgrade() -> None:
    op.drop_index("ix_runs_status_heartbeat", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config_flat")
