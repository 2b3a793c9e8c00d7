"""INSERT … ON CONFLICT for the two dialects the store supports (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from fleetwatch.serving.errors import ServingError


def _insert(session: Session, table: Table) -> Any:
    name = session.get_bind().dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise ServingError(f"the API store supports SQLite and PostgreSQL, not {name}")


def insert_ignore(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows whose key is new; rows already stored are left as they are."""
    if rows:
        session.execute(_insert(session, table).on_conflict_do_nothing(), list(rows))


def upsert(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    update: Sequence[str],
    when: Any = None,
) -> None:
    """Insert rows; for a key already stored, set ``update`` columns from the new row, only where
    ``when(table, excluded)`` (a SQL condition) holds."""
    if not rows:
        return
    stmt = _insert(session, table)
    excluded = stmt.excluded
    condition: ColumnElement[bool] | None = when(table.c, excluded) if when else None
    stmt = stmt.on_conflict_do_update(
        index_elements=list(key),
        set_={c: excluded[c] for c in update},
        where=condition,
    )
    session.execute(stmt, list(rows))
