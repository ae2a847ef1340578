"""Alembic's environment: always online, on the connection ``ablate.store.migrate`` hands over."""

from __future__ import annotations

from alembic import context

from ablate.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through ablate.store.migrate.upgrade (or `ablate db upgrade`)")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
