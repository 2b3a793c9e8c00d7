"""Webhooks are delivered by one API process: the others run with ``api.webhooks.enabled``
off (``FLEETWATCH_API__WEBHOOKS__ENABLED=false``, as deploy/compose.yaml and deploy/k8s/ set
it on every replica but one) and start neither the dispatcher nor the delivery worker, while
still materialising, tracking commands and serving requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetwatch.contracts.settings import Settings
from fleetwatch.serving import app as app_module
from tests.unit.api_support import FakePublisher, add_keys, memory_store


def _recording(name: str, started: list[str]) -> type:
    class Recorded:
        """Stands in for a background worker (no Kafka): records that it was started."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def start(self) -> None:
            started.append(name)

        def stop(self) -> None:
            pass

    return Recorded


def _workers_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, enabled: str
) -> tuple[list[str], int]:
    started: list[str] = []
    for name in ("Materialiser", "Dispatcher", "DeliveryWorker", "CommandTracker"):
        monkeypatch.setattr(app_module, name, _recording(name, started))
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("FLEETWATCH_API__WEBHOOKS__ENABLED", enabled)
    settings = Settings()
    store = memory_store()
    keys = add_keys(store)
    app = app_module.create_app(
        settings, store=store, materialise=True, publisher=FakePublisher(), workers=True
    )
    with TestClient(app) as client:
        status = client.get("/devices", headers={"Authorization": f"Bearer {keys['read']}"})
    return started, status.status_code


def test_the_delivering_process_runs_the_dispatcher_and_the_delivery_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started, status = _workers_started(monkeypatch, tmp_path, "true")
    assert sorted(started) == ["CommandTracker", "DeliveryWorker", "Dispatcher", "Materialiser"]
    assert status == 200


def test_a_replica_with_webhooks_off_delivers_nothing_but_serves_and_materialises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started, status = _workers_started(monkeypatch, tmp_path, "false")
    assert sorted(started) == ["CommandTracker", "Materialiser"]
    assert status == 200
