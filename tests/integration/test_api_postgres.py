"""The API store on a real PostgreSQL server: migrations, idempotent upserts, episode folding,
commands (published to the real Kafka of the local stack, on a topic of the test's own) and
webhooks' outbox. The server is ``FLEETWATCH_TEST_POSTGRES_URL`` when set, else a private
cluster that ``deploy/install-postgres.sh`` installs and starts (and this session stops again if
it started it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from fleetwatch.contracts.commands import CommandAck
from fleetwatch.contracts.devices import DeviceSession
from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.serving.app import create_app
from fleetwatch.serving.db import migrate
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import AckRecord, Batch, ModelRecord, prune_readings, write
from fleetwatch.serving.tables import AlertEventRow, AlertRow, ReadingRow, SessionRow
from fleetwatch.serving.webhooks.dispatch import fan_out
from tests.integration.conftest import Isolated
from tests.integration.postgres import fresh_database, postgres_server
from tests.unit.api_support import add_keys, make_alert

pytestmark = pytest.mark.integration

MIGRATIONS = Path(migrate.__code__.co_filename).parent / "migrations" / "versions"
HEAD = max(p.name[:4] for p in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
"""The newest migration's revision (each file's name starts with its revision)."""


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
def pg_url(postgres: str) -> Iterator[str]:
    """A fresh database of its own for each test."""
    with fresh_database(postgres) as url:
        yield url


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    yield s
    s.close()


def test_migrations_apply_once_and_again_harmlessly(store: Store) -> None:
    assert store.dialect == "postgresql"
    migrate(store.engine)  # a second start
    with store.engine.connect() as conn:
        assert conn.scalar(text("SELECT version_num FROM alembic_version")) == HEAD


def test_episodes_fold_and_redeliveries_change_nothing(store: Store) -> None:
    opened = make_alert("d1", 1, 1_000)
    resolved = make_alert("d1", 3, 3_000, "resolve", 2, start_ms=1_000)
    updated = make_alert("d1", 2, 2_000, "update", 1, start_ms=1_000)
    for batch in ([resolved], [opened, updated], [opened, updated, resolved]):
        with store.session() as session, session.begin():
            write(session, Batch(alerts=batch), 5)
    with store.session() as session:
        rows = session.scalars(select(AlertRow)).all()
        assert session.scalar(select(func.count()).select_from(AlertEventRow)) == 3
    assert [(r.status, r.state, r.revision) for r in rows] == [("resolve", "resolved", 2)]


def test_sessions_models_and_readings_upsert_and_prune(store: Store) -> None:
    session_record = DeviceSession(
        session_id="s1",
        device_id="d1",
        start_ms=1,
        end_ms=9,
        readings=9,
        first_seq=1,
        last_seq=9,
        end_reason="reboot",
    )
    readings = [
        TelemetryRecord(
            device_id="d1",
            seq=i,
            event_ms=i,
            device_event_ms=i,
            device_sent_ms=i,
            received_ms=i,
            metrics={"t": 1.0},
        )
        for i in range(20)
    ]
    for _ in range(2):
        with store.session() as session, session.begin():
            write(
                session,
                Batch(
                    sessions=[session_record, session_record.model_copy(update={"readings": 3})],
                    models=[
                        ModelRecord(
                            device_id="d1",
                            kind="seasonal",
                            version=4,
                            trained_from_ms=1,
                            trained_to_ms=2,
                            published_ms=3,
                            params={"x": [1.5]},
                        )
                    ],
                    readings=readings,
                ),
                7,
            )
    with store.session() as session, session.begin():
        assert session.scalar(select(SessionRow.readings)) == 9
        assert session.scalar(select(func.count()).select_from(ReadingRow)) == 20
        assert prune_readings(session, ["d1"], keep=5) == 15


def test_commands_and_webhook_outbox_through_the_app(
    store: Store, tmp_path: Path, isolated: Isolated
) -> None:
    keys = add_keys(store)
    settings = Settings(
        run_dir=tmp_path, kafka=isolated.settings.kafka, topics=isolated.topics
    )  # the API's own command publisher, on this test's device.commands topic
    app = create_app(settings, store=store, materialise=False, workers=False)

    def auth(scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {keys[scope]}"}

    with TestClient(app) as client:
        created = client.post(
            "/devices", headers=auth("admin"), json={"device_id": "d1", "tags": ["a"]}
        )
        assert created.status_code == 201
        hook = client.post(
            "/webhooks",
            headers=auth("admin"),
            json={"url": "https://93.184.215.14/x", "tags": ["a"]},
        )
        assert hook.status_code == 201
        command = {
            "headers": auth("operate") | {"Idempotency-Key": "k"},
            "json": {"name": "reboot"},
        }
        first = client.post("/devices/d1/commands", **command)
        assert first.status_code == 201, first.text
        sent = first.json()
        assert sent["status"] == "sent"
        again = client.post("/devices/d1/commands", **command)
        assert again.status_code == 200
        assert again.json()["command_id"] == sent["command_id"]

        # on Kafka, once: the same Idempotency-Key does not publish it again
        records = isolated.read_all(isolated.topics.device_commands, 1)
        assert len(records) == 1, records
        assert records[0].key == b"d1"
        published = json.loads(records[0].value)
        assert (published["command_id"], published["device_id"], published["name"]) == (
            sent["command_id"],
            "d1",
            "reboot",
        )

        with store.session() as session, session.begin():
            ack = CommandAck(command_id=sent["command_id"], status="ok", device_ms=3)
            write(session, Batch(acks=[AckRecord(ack, "d1")]), 9)
        status = client.get(f"/commands/{sent['command_id']}", headers=auth("read"))
        assert status.json()["status"] == "acked"
        alert = make_alert("d1", 1, 1_000)
        assert fan_out(store, [alert]) == 1
        assert fan_out(store, [alert]) == 1
        deliveries = client.get(
            f"/webhooks/{hook.json()['webhook_id']}/deliveries", headers=auth("admin")
        )
        assert deliveries.json()["count"] == 1
        listed = client.get("/devices", headers=auth("read"), params={"tag": "a"}).json()
        assert [d["device_id"] for d in listed["data"]] == ["d1"]
