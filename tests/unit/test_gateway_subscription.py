"""How the gateway subscribes: plain for one gateway, through the shared group for several,
again on every connection, and a kept session of the other kind moved over."""

from __future__ import annotations

from typing import Any

import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.gateway import Gateway
from fleetwatch.ingest.metrics import GatewayMetrics
from tests.unit.test_gateway_metrics import NOW, FakeClient, Reason

PLAIN = ["devices/+/telemetry", "devices/+/acks"]
SHARED = ["$share/fleetwatch/devices/+/telemetry", "$share/fleetwatch/devices/+/acks"]


class Session:
    def __init__(self, present: bool) -> None:
        self.session_present = present


def connect(settings: Settings, present: bool, retiring: bool = False) -> FakeClient:
    gw = Gateway(settings, clock=lambda: NOW, metrics=GatewayMetrics())
    gw._retiring = retiring
    client: Any = FakeClient()
    gw._on_connect(client, None, Session(present), Reason(), None)
    return client  # type: ignore[no-any-return]


def filters(subscribed: list[Any]) -> list[str]:
    (topics,) = subscribed
    return [topic for topic, _qos in topics]


def test_one_gateway_subscribes_plainly_so_a_broker_restart_keeps_its_subscription() -> None:
    client = connect(Settings(), present=False)
    assert filters(client.subscribed) == PLAIN
    assert client.unsubscribed == [], "a new session has nothing to move over"


@pytest.mark.parametrize(
    "gateway", [{"shared": True}, {"workers": 3}], ids=["shared", "several workers"]
)
def test_several_gateways_share_the_group(gateway: dict[str, Any]) -> None:
    client = connect(Settings(gateway=gateway), present=False)
    assert filters(client.subscribed) == SHARED


def test_a_kept_session_subscribes_again_then_drops_the_other_kind() -> None:
    plain = connect(Settings(), present=True)
    assert filters(plain.subscribed) == PLAIN, "the broker may have lost what it kept"
    assert plain.unsubscribed == [SHARED]
    shared = connect(Settings(gateway={"shared": True}), present=True)
    assert filters(shared.subscribed) == SHARED
    assert shared.unsubscribed == [PLAIN]


def test_a_retiring_worker_unsubscribes_both_kinds_and_subscribes_nothing() -> None:
    client = connect(Settings(), present=True, retiring=True)
    assert client.subscribed == []
    (topics,) = client.unsubscribed
    assert sorted(topics) == sorted(PLAIN + SHARED)
