"""runs.config_version: the ``CONFIG_VERSION`` a run's id was computed under (``ablate/grid/ids.py``).

Rows from before run ids left defaults out get NULL: ``ablate db rehash`` carries them (their run directories,
rows and MLflow tags) over to today's ids, and ``ablate run`` refuses to start a grid while any remain, so an
upgrade never retrains what is already done.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("config_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config_version")
