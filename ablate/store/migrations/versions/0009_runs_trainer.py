"""runs.trainer + runs.trainer_params: which trainer made a run, and a command run's parameters as JSON.

Every row made before is a run of ablate's own model: ``trainer`` stays NULL (the model), so stores made
before open unchanged and nothing retrains. ``trainer_params`` holds a command run's parameters (its seed
left out).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("trainer", sa.String(16), nullable=True))
        batch.add_column(sa.Column("trainer_params", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("trainer_params")
        batch.drop_column("trainer")
