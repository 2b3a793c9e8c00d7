"""The store: an engine with an up-to-date schema and a session factory."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from fleetwatch.serving.db import make_engine, migrate, ping

P = ParamSpec("P")
T = TypeVar("T")


class Store:
    """Opening a store applies the migrations it lacks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        migrate(self.engine)
        self.session: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)
        self._inline = self.dialect == "sqlite"

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn``, a short read of this store, for an ``async`` route. SQLite answers a
        hot read from its page cache in tens of microseconds, far less than handing the call
        to a worker thread and back (two thread wake-ups and the GIL passed around every
        statement, each a wait of up to a scheduler slice on a busy machine): it runs right
        here, on the event loop. A database across a network runs in the thread pool."""
        if self._inline:
            return fn(*args, **kwargs)
        return await run_in_threadpool(fn, *args, **kwargs)

    def ping(self) -> None:
        ping(self.engine)

    def close(self) -> None:
        self.engine.dispose()
