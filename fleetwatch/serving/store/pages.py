"""One page of a listing: the rows that match, in order, and how many match in all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

R = TypeVar("R")

Paged = tuple[list[R], int]
"""A page of rows, and how many match in all."""


def page(
    session: Session,
    table: type[R],
    where: Sequence[ColumnElement[bool]],
    order: Sequence[Any],
    limit: int,
    offset: int,
) -> Paged[R]:
    """The rows of ``table`` that match every condition of ``where``, sorted by ``order``:
    ``limit`` of them from ``offset`` on, and how many match in all."""
    total = session.scalar(select(func.count()).select_from(table).where(*where)) or 0
    query = select(table).where(*where).order_by(*order).limit(limit).offset(offset)
    return list(session.scalars(query).all()), total
