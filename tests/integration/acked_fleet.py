"""A fleet publishing at QoS 1, paced, that knows which of its messages the MQTT broker has
acknowledged (its PUBACK: the message is *accepted*), while it runs and after."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import Settings
from tests.integration.conftest import login_as

Message = tuple[Any, str, Callable[[int], bytes]]
"""What to publish: a tag the test recognises it by, the MQTT topic, and the payload made from
the wall clock (ms) at the moment it is published."""


class AckedFleet(threading.Thread):
    """Publishes ``messages`` at ``rate`` a second from one connection (the simulator's
    account) until they run out or :meth:`stop`; paho reconnects on its own when the broker
    goes away, and a message published meanwhile waits for the connection."""

    def __init__(
        self, settings: Settings, messages: Iterable[Message], rate: float, client_id: str
    ) -> None:
        super().__init__()
        self.settings = settings
        self.messages = messages
        self.rate = rate
        self.client_id = client_id
        self.sent: list[tuple[Any, mqtt.MQTTMessageInfo]] = []
        self.payloads: dict[Any, bytes] = {}
        """What was published under each tag."""
        self.published: set[Any] = set()
        """Tags of the messages the broker acknowledged (complete once the thread ended)."""
        self.done = threading.Event()
        self.no_subscriber: set[int] = set()
        """Message ids the broker acknowledged with "no matching subscribers" (MQTT v5 reason
        16): it took them and dropped them."""
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def acknowledged(self) -> int:
        """How many messages, in publishing order, the broker has acknowledged: it acknowledges
        one connection's messages in the order they came, so these are the first ones sent."""
        sent = self.sent[:]
        last = len(sent)
        while last and not _acknowledged(sent[last - 1][1]):
            last -= 1
        return last

    def tags(self, first: int) -> set[Any]:
        return {tag for tag, _ in self.sent[:first]}

    def run(self) -> None:
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv5
        )
        client.max_inflight_messages_set(100)
        client.on_publish = self._on_publish
        login_as(client, self.settings, "sim")
        client.connect(self.settings.mqtt.host, self.settings.mqtt.services_port)
        client.loop_start()
        start = time.monotonic()
        try:
            for i, (tag, topic, payload) in enumerate(self.messages):
                if self._halt.is_set():
                    break
                body = payload(time.time_ns() // 1_000_000)
                self.payloads[tag] = body
                self.sent.append((tag, client.publish(topic, body, qos=1)))
                pace = start + (i + 1) / self.rate - time.monotonic()
                if pace > 0:
                    self._halt.wait(pace)  # publishing at the rate, not waiting for an outcome
            self.done.set()
            deadline = time.monotonic() + 30
            for tag, info in self.sent:
                # a message published while the broker was away says "not connected" here
                with contextlib.suppress(RuntimeError, ValueError):
                    info.wait_for_publish(max(0.01, deadline - time.monotonic()))
                if _acknowledged(info):
                    self.published.add(tag)
        finally:
            self.done.set()
            client.disconnect()
            client.loop_stop()

    def _on_publish(self, _c: object, _u: object, mid: int, reason: Any, _p: object) -> None:
        if getattr(reason, "value", 0) == NO_MATCHING_SUBSCRIBERS:
            self.no_subscriber.add(mid)

    def dropped(self, tags: set[Any]) -> int:
        """How many of the messages under ``tags`` the broker acknowledged as unrouted."""
        return sum(1 for tag, info in self.sent if tag in tags and info.mid in self.no_subscriber)


NO_MATCHING_SUBSCRIBERS = 16


def _acknowledged(info: mqtt.MQTTMessageInfo) -> bool:
    """Whether the broker acknowledged the message (one published while the client was not
    connected says so by raising, and is not, unless it was sent on reconnecting)."""
    try:
        return info.is_published()
    except (RuntimeError, ValueError):
        return False
