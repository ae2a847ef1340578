"""The first schema: grids, grid membership, runs, scores, step metrics, probes, histograms, events.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None



def upgrade() -> None:
    op.create_table(
        "grids",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_grids"),
        sa.UniqueConstraint("name", name="uq_grids_name"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("variant", sa.String(100), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("model_preset", sa.String(100), nullable=True),
        sa.Column("n_layers", sa.Integer(), nullable=True),
        sa.Column("d_model", sa.Integer(), nullable=True),
        sa.Column("lr", sa.Float(), nullable=True),
        sa.Column("train_steps", sa.Integer(), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=True),
        sa.Column("seq_len", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("started", sa.DateTime(), nullable=True),
        sa.Column("finished", sa.DateTime(), nullable=True),
        sa.Column("heartbeat", sa.DateTime(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(200), nullable=True),
        sa.Column("device", sa.String(200), nullable=True),
        sa.Column("resumed_from", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("mlflow_run_id", sa.String(64), nullable=True),
        sa.Column("slurm_job_id", sa.String(64), nullable=True),
        sa.Column("params", sa.BigInteger(), nullable=True),
        sa.Column("added_params", sa.BigInteger(), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=True),
        sa.Column("tokens", sa.BigInteger(), nullable=True),
        sa.Column("train_loss", sa.Float(), nullable=True),
        sa.Column("val_ppl", sa.Float(), nullable=True),
        sa.Column("loss_spikes", sa.Integer(), nullable=True),
        sa.Column("gate_score", sa.Float(), nullable=True),
        sa.Column("f_attn", sa.Float(), nullable=True),
        sa.Column("m_act", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_index("ix_runs_variant", "runs", ["variant"])
    op.create_table(
        "grid_runs",
        sa.Column("grid_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("axes", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["grid_id"], ["grids.id"], name="fk_grid_runs_grid_id_grids",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_grid_runs_run_id_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("grid_id", "run_id", name="pk_grid_runs"),
    )
    for table, value in (("scores", sa.Float()), ("metrics", sa.Float()), ("probes", sa.Float())):
        extra = {"scores": [], "metrics": ["step"], "probes": ["layer"]}[table]
        op.create_table(
            table,
            sa.Column("run_id", sa.String(64), nullable=False),
            sa.Column("name", sa.String(200), nullable=False),
            *[sa.Column(c, sa.Integer(), nullable=False) for c in extra],
            sa.Column("value", value, nullable=True),
            sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name=f"fk_{table}_run_id_runs",
                                    ondelete="CASCADE"),
            sa.PrimaryKeyConstraint("run_id", "name", *extra, name=f"pk_{table}"),
        )
    op.create_table(
        "histograms",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("layer", sa.Integer(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("edges", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_histograms_run_id_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "name", "layer", name="pk_histograms"),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_events_run_id_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])


def downgrade() -> None:
    for table in ("events", "histograms", "probes", "metrics", "scores", "grid_runs", "runs", "grids"):
        op.drop_table(table)
