"""How the API process holds up under load: its heap after start-up, its SQLite pool, where
its hot reads run."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import event, text

from fleetwatch import heap
from fleetwatch.serving.store import Store
from tests.unit.api_support import running_api


def test_the_heap_is_frozen_once_after_start_up(monkeypatch: Any) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(heap, "_settled", False)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    heap.settle()
    heap.settle()
    assert frozen == [1]


def test_starting_the_app_settles_its_heap(monkeypatch: Any, tmp_path: Path) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(heap, "_settled", False)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    for _api in running_api(tmp_path):
        assert frozen == [1]


def test_a_burst_of_readers_reuses_the_connections_of_the_last_burst(tmp_path: Path) -> None:
    """A backlog of requests each holding a session at once must not close and reopen SQLite
    connections (a file open, the pragmas, a cold page cache each) burst after burst."""
    store = Store(f"sqlite:///{tmp_path / 'api.db'}")
    opened: list[object] = []
    event.listen(store.engine, "connect", lambda conn, _record: opened.append(conn))
    try:
        for _ in range(3):
            inside = threading.Barrier(30)

            threads = [threading.Thread(target=_read, args=(store, inside)) for _ in range(30)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert len(opened) <= 30
    finally:
        store.close()


def _read(store: Store, inside: threading.Barrier) -> None:
    with store.session() as session:
        session.execute(text("SELECT 1"))
        inside.wait(timeout=10)


def test_a_sqlite_read_runs_on_the_event_loop_and_any_other_in_the_thread_pool(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'api.db'}")
    try:

        async def reader_thread() -> int:
            return await store.read(threading.get_ident)

        assert asyncio.run(reader_thread()) == threading.get_ident()
        store._inline = False  # as for PostgreSQL
        assert asyncio.run(reader_thread()) != threading.get_ident()
    finally:
        store.close()
