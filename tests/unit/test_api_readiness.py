"""The API's ``/readyz``: ready for reads while Kafka is away (saying what does not work),
not ready only when its database does not answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tests.unit.api_support import Api, running_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def test_ready_with_both_and_nothing_degraded(api: Api) -> None:
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "database": "ok", "kafka": "ok", "degraded": []}


def test_kafka_unreachable_leaves_the_api_ready_for_reads(api: Api) -> None:
    api.publisher.up = False
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert (body["status"], body["database"], body["kafka"]) == ("ready", "ok", "unreachable")
    assert body["degraded"][:3] == ["commands", "quarantine lifts", "materialiser"]
    assert api.get("/devices").status_code == 200  # reads still answer


def test_a_database_that_does_not_answer_is_not_ready(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down() -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(api.store, "ping", down)
    not_ready = api.client.get("/readyz")
    assert not_ready.status_code == 503
    body = not_ready.json()
    assert body["status"] == "not ready"
    assert body["database"] == "unreachable: OperationalError"
