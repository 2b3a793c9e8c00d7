"""Alembic environment: the API passes its own connection (``config.attributes``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from fleetwatch.serving.tables import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # `alembic` run by hand (e.g. `alembic revision --autogenerate`)
    with create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://").connect() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
