"""Webhooks: URL rules, Standard Webhooks signatures, matching, retries, dead letters, redrive."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook

from fleetwatch.contracts.settings import WebhookSettings
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store import Store
from fleetwatch.serving.store import webhooks as repo
from fleetwatch.serving.tables import DeliveryRow
from fleetwatch.serving.webhooks.backoff import retry_delay_s
from fleetwatch.serving.webhooks.delivery import Sender
from fleetwatch.serving.webhooks.dispatch import fan_out
from fleetwatch.serving.webhooks.urls import UrlRefused, check_url, pin
from tests.unit.api_support import Api, make_alert, running_api


def fixed(*addresses: str):  # type: ignore[no-untyped-def]
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example.com/x", "http:// or https://"),
        ("https://user:pw@hooks.example.com/x", "credentials"),
        ("https:///x", "no host"),
        ("http://127.0.0.1:8080/x", "non-public"),
        ("http://[::1]/x", "non-public"),
        ("http://10.1.2.3/x", "non-public"),
        ("http://169.254.169.254/latest", "non-public"),
        ("http://hooks.internal/x", "non-public"),
        ("https://example.com:99999/", "not a URL"),
    ],
)
def test_refused_urls_say_why(url: str, why: str) -> None:
    with pytest.raises(UrlRefused, match=why):
        check_url(url, allow_private=False, resolver=fixed("192.168.1.9"))


def test_allowed_urls() -> None:
    assert check_url("https://hooks.example.com/x", False, fixed("93.184.215.14"))
    assert check_url("http://127.0.0.1:9/x", allow_private=True)


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    rng = random.Random(1)
    delays = [retry_delay_s(n, 1.0, 30.0, rng) for n in range(1, 10)]
    for n, d in enumerate(delays, start=1):
        ceiling = min(30.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling
    assert retry_delay_s(1000, 1.0, 30.0, rng) <= 30.0


def add_hook(store: Store, **filters: list[str]) -> str:
    fields: dict[str, object] = {
        "url": "http://receiver.test/hook",
        "description": "",
        "enabled": True,
        "devices": [],
        "tags": [],
        "severities": [],
        "statuses": [],
    }
    fields.update(filters)
    with store.session() as session, session.begin():
        return repo.create(session, fields, 1).webhook_id


def owed(store: Store) -> list[DeliveryRow]:
    with store.session() as session:
        return list(session.query(DeliveryRow).order_by(DeliveryRow.delivery_id))


def test_events_go_to_the_subscriptions_they_match(tmp_path: Path) -> None:
    for api in running_api(tmp_path):
        api.post("/devices", json={"device_id": "d-tagged", "tags": ["site-a"]})
        everything = add_hook(api.store)
        by_tag = add_hook(api.store, tags=["site-a"])
        critical = add_hook(api.store, severities=["critical"])
        resolutions = add_hook(api.store, devices=["d-other"], statuses=["resolve"])
        alerts = [
            make_alert("d-tagged", 1, 1_000),
            make_alert("d-other", 2, 2_000, severity="critical"),
            make_alert("d-other", 3, 3_000, "resolve", 1, start_ms=2_000, severity="critical"),
        ]
        assert fan_out(api.store, alerts) == 3 + 1 + 2 + 1
        assert fan_out(api.store, alerts) == 7  # owed again: same (webhook, id), stored once
        rows = owed(api.store)
        assert len(rows) == 7
        by_hook = {
            h: {r.message_id for r in rows if r.webhook_id == h}
            for h in (everything, by_tag, critical, resolutions)
        }
        ids = [a.event_id for a in alerts]
        assert by_hook[everything] == set(ids)
        assert by_hook[by_tag] == {ids[0]}
        assert by_hook[critical] == {ids[1], ids[2]}
        assert by_hook[resolutions] == {ids[2]}
        body = json.loads(next(r.payload for r in rows if r.message_id == ids[2]))
        assert body["type"] == "alert.resolve"
        assert body["data"]["alert_id"] == alerts[2].alert_id


class Receiver:
    """An httpx transport that answers as told and keeps what it was sent."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        code = self.answers.pop(0) if self.answers else 200
        return httpx.Response(code)


def test_a_delivery_is_signed_retried_dead_lettered_and_redriven(tmp_path: Path) -> None:
    for api in running_api(tmp_path):
        secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        hook = add_hook(api.store)
        with api.store.session() as session, session.begin():
            from fleetwatch.serving.tables import WebhookRow

            row = session.get(WebhookRow, hook)
            assert row is not None
            row.secret = secret
        fan_out(api.store, [make_alert("d1", 1, 1_000)])
        receiver = Receiver([503, 500, 503])
        settings = WebhookSettings(
            allow_private=True, backoff_base_s=0.001, backoff_cap_s=0.002, max_attempts=3
        )
        sender = Sender(api.store, settings, Metrics(), transport=httpx.MockTransport(receiver))
        for _ in range(3):
            (delivery,) = [d for d in owed(api.store) if d.status == "pending"]
            assert not sender.attempt(delivery).delivered
        (dead,) = owed(api.store)
        assert (dead.status, dead.attempts, dead.last_status_code) == ("dead", 3, 503)

        request = receiver.requests[0]
        headers = {k: v for k, v in request.headers.items()}
        verified = Webhook(secret).verify(request.content, headers)
        assert verified["type"] == "alert.open"
        assert headers["webhook-id"] == dead.message_id
        assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1

        listed = api.get(f"/webhooks/{hook}/deliveries", scope="admin", params={"status": "dead"})
        assert [d["delivery_id"] for d in listed.json()["data"]] == [dead.delivery_id]
        log = api.get(f"/webhooks/{hook}/deliveries/{dead.delivery_id}", scope="admin").json()
        assert [a["status_code"] for a in log["attempts_log"]] == [503, 500, 503]

        redriven = api.post(f"/webhooks/{hook}/dead-letters/redrive", json={})
        assert redriven.json() == {"redriven": 1}
        (again,) = owed(api.store)
        assert (again.status, again.attempts) == ("pending", 0)
        assert sender.attempt(again).delivered
        assert owed(api.store)[0].status == "delivered"
        sender.close()


def test_the_test_event_endpoint_sends_one_signed_event(tmp_path: Path) -> None:
    receiver = Receiver([204])
    settings_api = {"webhooks": WebhookSettings(allow_private=True)}
    from fastapi.testclient import TestClient

    from fleetwatch.contracts.settings import ApiSettings, Settings
    from fleetwatch.serving.app import create_app
    from tests.unit.api_support import FakePublisher, add_keys, memory_store

    store = memory_store()
    keys = add_keys(store)
    app = create_app(
        Settings(run_dir=tmp_path, api=ApiSettings(**settings_api)),
        store=store,
        materialise=False,
        publisher=FakePublisher(),
        workers=False,
        transport=httpx.MockTransport(receiver),
    )
    with TestClient(app) as client:
        api = Api(client, store, FakePublisher(), keys)
        made = api.post("/webhooks", json={"url": "http://127.0.0.1:1/hook"}).json()
        result = api.post(f"/webhooks/{made['webhook_id']}/test").json()
        assert (result["delivered"], result["status_code"]) == (True, 204)
        (request,) = receiver.requests
        assert Webhook(made["secret"]).verify(request.content, dict(request.headers))["type"] == (
            "webhook.test"
        )
        refused = api.post("/webhooks", json={"url": "ftp://x/"})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["body", "url"]


def test_private_targets_are_refused_at_registration_unless_allowed(api_private: Api) -> None:
    refused = api_private.post("/webhooks", json={"url": "http://127.0.0.1:8080/hook"})
    assert refused.status_code == 422
    assert "non-public" in refused.json()["detail"][0]["msg"]


@pytest.fixture
def api_private(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def test_a_delivery_goes_to_the_address_that_was_checked(tmp_path: Path) -> None:
    """The name answers a public address to the check and a private one after it (DNS
    rebinding): the request is bound to the checked address, with the name kept in the Host
    header and as the TLS server name."""
    answers = iter([["93.184.215.14"], ["127.0.0.1"], ["127.0.0.1"]])

    def rebinding(host: str, port: int) -> list[str]:
        return next(answers)

    for api in running_api(tmp_path):
        hook = add_hook(api.store)
        with api.store.session() as session, session.begin():
            from fleetwatch.serving.tables import WebhookRow

            row = session.get(WebhookRow, hook)
            assert row is not None
            row.url = "https://hooks.example.com:8443/in?x=1"
        fan_out(api.store, [make_alert("d1", 1, 1_000)])
        receiver = Receiver([204])
        settings = WebhookSettings(allow_private=False)
        sender = Sender(
            api.store, settings, Metrics(), rebinding, transport=httpx.MockTransport(receiver)
        )
        (delivery,) = owed(api.store)
        assert sender.attempt(delivery).delivered
        (request,) = receiver.requests
        assert str(request.url) == "https://93.184.215.14:8443/in?x=1"
        assert request.headers["host"] == "hooks.example.com:8443"
        assert request.extensions["sni_hostname"] == "hooks.example.com"


@pytest.mark.parametrize(
    ("url", "address", "expected", "host"),
    [
        (
            "http://hooks.example.com/a",
            "93.184.215.14",
            "http://93.184.215.14/a",
            "hooks.example.com",
        ),
        (
            "https://hooks.example.com:443/a",
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
            "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/a",
            "hooks.example.com",
        ),
    ],
)
def test_a_pinned_url_keeps_path_and_name(url: str, address: str, expected: str, host: str) -> None:
    target = pin(url, allow_private=False, resolver=fixed(address))
    assert (target.url, target.headers["Host"]) == (expected, host)
    assert pin("http://127.0.0.1:9/x", allow_private=True).url == "http://127.0.0.1:9/x"
