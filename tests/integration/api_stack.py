"""What the API's integration tests share: an admin key in the test's database, an API
process on the test's topics, a Kafka producer, a client that waits for the API."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.keys import create_key
from tests.integration.conftest import Isolated
from tests.polling import wait_until


def admin_key(run_dir: Path) -> str:
    store = Store(Settings(run_dir=run_dir).database_url)
    try:
        with store.session() as session, session.begin():
            _, key = create_key(session, "test-admin", ["admin"], 1)
    finally:
        store.close()
    return key


@dataclass
class ApiProcess:
    base: str
    key: str

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", headers={"X-API-Key": self.key}, timeout=10, **kw)

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return httpx.post(
            f"{self.base}{path}",
            headers={"X-API-Key": self.key} | (headers or {}),
            timeout=30,
            **kw,
        )

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


def start_api(
    isolated: Isolated, key: str, name: str = "api", env: dict[str, str] | None = None
) -> ApiProcess:
    isolated.start(name, "api", env=isolated.env | (env or {}))
    api = ApiProcess(f"http://127.0.0.1:{isolated.api_port}", key)
    wait_until(api.ready, 60, "the API to be ready")
    return api


def produce(isolated: Isolated, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = Producer(client_config(isolated.settings.kafka))
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0, "Kafka did not take every record"
