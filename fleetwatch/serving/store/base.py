"""The store: an engine with an up-to-date schema and a session factory."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session, sessionmaker

from fleetwatch.serving.db import make_engine, migrate, ping


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Store:
    """Opening a store applies the migrations it lacks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        migrate(self.engine)
        self.session: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def ping(self) -> None:
        ping(self.engine)

    def close(self) -> None:
        self.engine.dispose()
