"""The API store's engine and its schema: SQLite by default, PostgreSQL (or any SQLAlchemy
URL) by settings; the schema is brought up to date by the packaged Alembic migrations."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from fleetwatch.serving.errors import ServingError

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"


# A file database keeps a connection for every thread that can hold a session at once: the
# request thread pool (anyio's default limiter, 40 threads) and the background workers. With
# SQLAlchemy's default (5, overflow 10) a burst of requests -- the backlog after any stall --
# closes and reopens connections, each reopen a file open, the pragmas below and a cold page
# cache, just when the process is behind. Last in, first out: a quiet process reuses its few
# warm connections.
SQLITE_POOL: dict[str, Any] = {"pool_size": 48, "max_overflow": 16, "pool_use_lifo": True}


def make_engine(url: str) -> Engine:
    """An engine for ``url``. SQLite gets WAL (readers never wait for the materialiser), a busy
    timeout, and foreign keys on; ``sqlite://`` (in memory) one shared connection."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
    memory = url in ("sqlite://", "sqlite:///:memory:")
    if memory:
        kwargs["poolclass"] = StaticPool
    else:
        kwargs |= SQLITE_POOL
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def migrate(engine: Engine) -> None:
    """Apply every migration not applied yet (idempotent)."""
    logging.getLogger("alembic").setLevel(logging.WARNING)
    config = alembic_config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except SQLAlchemyError as exc:
        raise ServingError(f"cannot migrate the API database {engine.url!r}: {exc}") from exc


def ping(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
