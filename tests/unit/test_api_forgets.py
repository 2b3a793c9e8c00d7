"""The API's materialiser takes the scorer's tombstones: one on ``device.state`` deletes the
device's state row, one on ``device.sessions`` under a device id deletes the device's sessions
(under a session id, that session); a record after the tombstone in the same poll (the device
heard again) is kept; a null value without a key is refused, never a crash."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from fleetwatch.contracts.devices import session_id
from fleetwatch.contracts.settings import TopicSettings
from fleetwatch.serving.materialiser import batch_of
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import Batch, write
from fleetwatch.serving.tables import DeviceRow, DeviceStateRow, SessionRow
from tests.unit.api_support import memory_store
from tests.unit.test_api_materialiser import FakeMessage

TOPICS = TopicSettings()
KINDS = {TOPICS.device_state: "state", TOPICS.device_sessions: "sessions"}


def state(device: str, updated_ms: int, status: str = "ok") -> FakeMessage:
    body = {
        "device_id": device,
        "status": status,
        "last_seen_ms": updated_ms - 100,
        "last_received_ms": updated_ms - 90,
        "last_seq": 1,
        "last_values": {"temperature": 21.0},
        "open_alerts": [],
        "params_version": 0,
        "clock_offset_ms": 0,
        "updated_ms": updated_ms,
    }
    return FakeMessage(json.dumps(body).encode(), TOPICS.device_state, device.encode())


def session(device: str, start_ms: int, end_reason: str | None = "gap") -> FakeMessage:
    sid = session_id(device, start_ms)
    body = {
        "session_id": sid,
        "device_id": device,
        "start_ms": start_ms,
        "end_ms": start_ms + 10_000,
        "readings": 10,
        "first_seq": 1,
        "last_seq": 10,
        "end_reason": end_reason,
    }
    return FakeMessage(json.dumps(body).encode(), TOPICS.device_sessions, sid.encode())


def tombstone(topic: str, key: bytes) -> FakeMessage:
    return FakeMessage(None, topic, key)  # type: ignore[arg-type]


def poll(store: Store, messages: list[FakeMessage], refused: list[Any] | None = None) -> Batch:
    kept: list[Any] = [] if refused is None else refused
    batch = batch_of(messages, KINDS, lambda m, r: kept.append((m, r)))  # type: ignore[arg-type]
    with store.session() as s, s.begin():
        write(s, batch, 1)
    return batch


def rows(store: Store) -> tuple[dict[str, str], list[tuple[str, int]], list[str]]:
    with store.session() as s:
        states = {r.device_id: r.status for r in s.scalars(select(DeviceStateRow))}
        sessions = sorted((r.device_id, r.start_ms) for r in s.scalars(select(SessionRow)))
        devices = sorted(r.device_id for r in s.scalars(select(DeviceRow)))
    return states, sessions, devices


def test_the_scorers_tombstones_delete_the_devices_state_and_sessions() -> None:
    store = memory_store()
    poll(
        store,
        [
            state("quiet", 1_000, "silent"),
            state("busy", 1_000),
            session("quiet", 0),
            session("quiet", 50_000),
            session("busy", 0),
        ],
    )
    assert rows(store)[1] == [("busy", 0), ("quiet", 0), ("quiet", 50_000)]

    batch = poll(
        store,
        [tombstone(TOPICS.device_state, b"quiet"), tombstone(TOPICS.device_sessions, b"quiet")],
    )
    assert (batch.gone_states, batch.gone_sessions, len(batch)) == (["quiet"], ["quiet"], 2)
    states, sessions, devices = rows(store)
    assert states == {"busy": "ok"}
    assert sessions == [("busy", 0)]
    assert devices == ["busy", "quiet"]  # the registry keeps the device: its status "unknown"


def test_a_record_after_the_tombstone_in_the_same_poll_is_kept() -> None:
    store = memory_store()
    poll(store, [state("d", 1_000), session("d", 0)])
    poll(
        store,
        [
            state("d", 2_000, "silent"),
            session("d", 0),
            tombstone(TOPICS.device_state, b"d"),
            tombstone(TOPICS.device_sessions, b"d"),
            state("d", 9_000),  # heard again: afresh
            session("d", 900_000, None),
        ],
    )
    states, sessions, _ = rows(store)
    assert states == {"d": "ok"}
    assert sessions == [("d", 900_000)]


def test_a_tombstone_under_a_session_id_deletes_that_session() -> None:
    store = memory_store()
    poll(store, [session("d", 0), session("d", 50_000)])
    poll(store, [tombstone(TOPICS.device_sessions, session_id("d", 0).encode())])
    assert rows(store)[1] == [("d", 50_000)]


def test_a_null_value_without_a_key_is_refused_not_a_crash() -> None:
    refused: list[Any] = []
    keyless = [tombstone(TOPICS.device_state, b""), tombstone(TOPICS.device_sessions, b"")]
    batch = poll(memory_store(), keyless, refused)
    assert len(batch) == 0
    assert [m for m, _ in refused] == keyless
    assert all(reason.startswith("not a valid") for _, reason in refused)
