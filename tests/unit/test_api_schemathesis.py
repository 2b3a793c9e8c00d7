"""Property-based requests generated from the OpenAPI spec (schemathesis, in-process ASGI):
no operation answers 5xx, and every answer matches the documented schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from fleetwatch.contracts.settings import ApiSettings, Settings, WebhookSettings
from fleetwatch.serving.app import create_app
from tests.unit.api_support import (
    FakeChecker,
    FakePublisher,
    add_keys,
    make_alert,
    memory_store,
)

STORE = memory_store()
KEYS = add_keys(STORE)
APP = create_app(
    Settings(run_dir=Path(".run"), api=ApiSettings(webhooks=WebhookSettings(allow_private=False))),
    store=STORE,
    materialise=False,
    publisher=FakePublisher(),
    workers=False,
    resolver=lambda host, port: ["93.184.215.14"],
    transport=httpx.MockTransport(lambda request: httpx.Response(200)),
    checker=FakeChecker(),
)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # the requests go through the app's own test client: schemathesis's ASGI transport
    # (requests-based) trips over urllib3-future, which another dependency installs
    with TestClient(APP, raise_server_exceptions=False) as client:
        auth = {"Authorization": f"Bearer {KEYS['admin']}"}
        client.post("/devices", json={"device_id": "d1", "tags": ["t"]}, headers=auth)
        from fleetwatch.serving.store.ingest import Batch, write

        with STORE.session() as session, session.begin():
            write(session, Batch(alerts=[make_alert("d1", 1, 1_000)]), 1)
        yield client


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_request_gets_a_server_error(client: TestClient, case: schemathesis.Case[Any]) -> None:
    kwargs = case.as_transport_kwargs(
        base_url="http://testserver", headers={"Authorization": f"Bearer {KEYS['admin']}"}
    )
    request: dict[str, Any] = {
        k: kwargs[k] for k in ("method", "url", "headers", "params") if k in kwargs
    }
    if "json" in kwargs:
        request["json"] = kwargs["json"]
    elif kwargs.get("data") is not None:
        request["content"] = kwargs["data"]
    response = client.request(**request)
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
