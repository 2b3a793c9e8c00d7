"""A device the gateway rate-limits shows so in the API: the materialiser reads the gateway's
``rate_limited`` dead letters (and nothing else of the dead-letter topic, which it never writes
back to), keeps each device's latest run of them without counting a dead letter read twice,
and ``GET /devices/{id}`` says whether the device is being rate-limited now."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.deadletter import KIND, RATE_LIMITED, RATE_LIMITED_RUN_S
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.materialiser import Materialiser, batch_of
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store, now_ms
from fleetwatch.serving.store.devices import rate_limited
from fleetwatch.serving.store.ingest import Batch, RateLimited, write
from tests.unit.api_support import Api, memory_store, running_api

TOPICS = Settings().topics
KINDS = {TOPICS.telemetry_deadletter: "deadletters"}
RUN_MS = RATE_LIMITED_RUN_S * 1000


class DeadLetter:
    def __init__(self, key: bytes, headers: Any, ts: int, offset: int, value: Any = b"{") -> None:
        self._key, self._headers, self._ts, self._offset = key, headers, ts, offset
        self._value = value

    def value(self) -> Any:
        return self._value

    def key(self) -> bytes:
        return self._key

    def headers(self) -> Any:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return 0, self._ts

    def topic(self) -> str:
        return TOPICS.telemetry_deadletter

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def limited(device: str, ts: int, offset: int) -> DeadLetter:
    headers = [("fw.reason", b"over its rate"), ("fw.stage", b"gateway"), (KIND, b"rate_limited")]
    return DeadLetter(device.encode(), headers, ts, offset)


def feed(store: Store, hits: list[RateLimited]) -> None:
    with store.session() as session, session.begin():
        write(session, Batch(rate_limited=hits), 1)


def run_of(store: Store, device: str) -> tuple[int, int, int] | None:
    with store.session() as session:
        row = rate_limited(session, device)
        return None if row is None else (row.since_ms, row.last_ms, row.dead_letters)


def test_only_the_gateways_rate_limited_dead_letters_are_read_and_none_is_refused() -> None:
    refused: list[Any] = []
    messages = [
        limited("flood", 1_000, 1),
        DeadLetter(b"d", [("fw.reason", b"not JSON"), ("fw.stage", b"gateway")], 1_000, 2),
        DeadLetter(b"d", [(KIND, b"json")], 1_000, 3),
        DeadLetter(b"", [(KIND, RATE_LIMITED.encode())], 1_000, 4),  # no device: nothing to show
        DeadLetter(b"d", None, 1_000, 5, value=None),
        DeadLetter(b"d", [(KIND, b"\xff")], 1_000, 6),
    ]
    batch = batch_of(messages, KINDS, lambda m, r: refused.append(m))  # type: ignore[arg-type]
    assert batch.rate_limited == [RateLimited("flood", 1_000, 0, 1)]
    assert refused == []


def test_a_dead_letter_topic_record_is_never_dead_lettered_again() -> None:
    materialiser = Materialiser.__new__(Materialiser)
    materialiser.metrics = Metrics()
    materialiser.kinds = KINDS
    dead: list[object] = []
    materialiser.dead = lambda msg, reason: dead.append(msg)  # type: ignore[assignment]
    materialiser._refused(limited("d", 1, 1), "whatever it was")  # type: ignore[arg-type]
    assert dead == []


def test_a_devices_run_goes_on_until_a_minute_without_one_and_counts_each_once() -> None:
    store = memory_store()
    feed(store, [RateLimited("flood", 1_000 + i * 100, 0, 10 + i) for i in range(5)])
    assert run_of(store, "flood") == (1_000, 1_400, 5)
    # the same poll read again (a crash before its offsets were committed), and one more
    feed(store, [RateLimited("flood", 1_000 + i * 100, 0, 10 + i) for i in range(6)])
    assert run_of(store, "flood") == (1_000, 1_500, 6)
    feed(store, [RateLimited("flood", 1_500 + RUN_MS - 1, 0, 20)])
    assert run_of(store, "flood") == (1_000, 1_500 + RUN_MS - 1, 7)
    # a minute without one: the next starts a new run
    later = 1_500 + 2 * RUN_MS
    feed(store, [RateLimited("flood", later, 0, 30), RateLimited("other", later, 1, 3)])
    assert run_of(store, "flood") == (later, later, 1)
    assert run_of(store, "other") == (later, later, 1)
    assert run_of(store, "quiet") is None


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def test_the_device_says_whether_it_is_being_rate_limited(api: Api) -> None:
    now = now_ms()
    feed(api.store, [RateLimited("flood", now - 2_000 + i, 0, i) for i in range(3)])
    feed(api.store, [RateLimited("earlier", now - 2 * RUN_MS, 0, 1)])
    api.post("/devices", json={"device_id": "flood"})
    api.post("/devices", json={"device_id": "earlier"})
    api.post("/devices", json={"device_id": "calm"})
    flood = api.get("/devices/flood").json()["rate_limited"]
    assert flood == {
        "recently": True,
        "dead_letters": 3,
        "since_ms": now - 2_000,
        "last_ms": now - 1_998,
    }
    assert api.get("/devices/earlier").json()["rate_limited"]["recently"] is False
    assert api.get("/devices/calm").json()["rate_limited"] is None
    assert api.client.delete("/devices/flood", headers=api.as_("admin")).status_code == 204
    assert run_of(api.store, "flood") is None  # it goes with the device
