"""Webhooks on the real stack with a real HTTP receiver that is down across several retry
rounds: once it is back it receives every event, signed, each ``webhook-id`` at least once.

Time is compressed honestly: the backoff cap is 1 s instead of 300 s and the receiver is down
for six rounds of retries (about 4 s) instead of 10 minutes — the same situation (down for
several rounds of retries at the cap, events produced while it is down), which the defaults then
resolve within one cap (5 min) of the subscriber's return; nothing is dead-lettered before
``max_age_s`` (24 h), and nothing counts as delivered while the subscriber is down."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.integration.api_stack import admin_key, produce, start_api
from tests.integration.conftest import Isolated, free_port
from tests.polling import wait_until
from tests.unit.api_support import make_alert

ROUNDS_DOWN = 6
"""Failed delivery rounds while the receiver is down (the last ones at the backoff cap)."""
EVENTS = 11


class Receiver:
    """An HTTP server on a fixed port that can be stopped and started again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[tuple[dict[str, str], bytes]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    yield r
    r.stop()


def test_a_subscriber_that_was_down_receives_every_event_once_back(
    isolated: Isolated, receiver: Receiver
) -> None:
    env = {
        "FLEETWATCH_API__WEBHOOKS__ALLOW_PRIVATE": "true",
        "FLEETWATCH_API__WEBHOOKS__BACKOFF_BASE_S": "0.25",
        "FLEETWATCH_API__WEBHOOKS__BACKOFF_CAP_S": "1.0",
    }
    api = start_api(isolated, admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"])), env=env)
    device = f"w{isolated.tag}"
    made = api.post(
        "/webhooks",
        json={"url": f"http://127.0.0.1:{receiver.port}/hook", "devices": [device]},
    )
    assert made.status_code == 201, made.text
    hook, secret = made.json()["webhook_id"], made.json()["secret"]

    # the receiver is down: events arrive and every delivery fails, round after round
    alerts = [make_alert(device, i, 1_000 * i) for i in range(1, 11)]
    alerts += [make_alert(device, 11, 11_000, "resolve", 1, start_ms=1_000)]
    alerts += [make_alert("someone-else", 12, 12_000)]  # filtered out
    produce(
        isolated,
        isolated.topics.alerts,
        [(a.device_id, a.model_dump_json().encode()) for a in alerts],
    )

    def failed_attempts() -> int:
        body = api.get(f"/webhooks/{hook}/deliveries", params={"limit": 1000}).json()
        return sum(d["attempts"] for d in body["data"]) if body["count"] == EVENTS else 0

    wait_until(
        lambda: failed_attempts() >= EVENTS * ROUNDS_DOWN,
        30,
        f"{ROUNDS_DOWN} failed rounds of every delivery",
    )
    for status in ("delivered", "dead"):
        listed = api.get(f"/webhooks/{hook}/deliveries", params={"status": status}).json()
        assert listed["count"] == 0, f"{status} while the subscriber was down: {listed['data']}"
    receiver.start()

    expected = {a.event_id for a in alerts[:-1]}
    wait_until(
        lambda: {h["webhook-id"] for h, _ in receiver.received} >= expected,
        30,
        "every event at the receiver",
    )
    verifier = Webhook(secret)
    for headers, body in receiver.received:
        event = verifier.verify(body, headers)
        assert event["data"]["device_id"] == device
        assert event["type"] in ("alert.open", "alert.resolve")
    delivered = api.get(f"/webhooks/{hook}/deliveries", params={"status": "delivered"}).json()
    assert delivered["count"] == EVENTS
    assert min(d["attempts"] for d in delivered["data"]) >= 3
    detail = api.get(f"/webhooks/{hook}/deliveries/{delivered['data'][0]['delivery_id']}").json()
    assert detail["attempts_log"][0]["status_code"] is None  # connection refused
    assert detail["attempts_log"][-1]["status_code"] == 204
    assert api.get(f"/webhooks/{hook}/deliveries", params={"status": "dead"}).json()["count"] == 0
    metrics = api.get("/metrics").text
    assert 'fleetwatch_api_webhook_deliveries_total{outcome="delivered"} 11.0' in metrics
    assert json.loads(receiver.received[0][1])["data"]["event_id"]
