"""The gateway's buffered MQTT client parses what paho parses, whatever the reads' boundaries."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from fleetwatch.ingest.mqtt_client import READ_BYTES, BufferedClient


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (128 if n else 0))
        if not n:
            return bytes(out)


def publish_packet(topic: str, mid: int, payload: bytes) -> bytes:
    """An MQTT v5 PUBLISH, QoS 1, no properties."""
    name = topic.encode()
    body = struct.pack("!H", len(name)) + name + struct.pack("!H", mid) + varint(0) + payload
    return bytes([0x32]) + varint(len(body)) + body


@pytest.fixture
def wired() -> Iterator[tuple[BufferedClient, socket.socket, list[mqtt.MQTTMessage]]]:
    client = BufferedClient(
        CallbackAPIVersion.VERSION2, client_id="t", protocol=mqtt.MQTTv5, manual_ack=True
    )
    received: list[mqtt.MQTTMessage] = []
    client.on_message = lambda _c, _u, msg: received.append(msg)
    ours, broker = socket.socketpair()
    ours.setblocking(False)
    client._sock = ours
    yield client, broker, received
    ours.close()
    broker.close()


def read_all(client: BufferedClient) -> None:
    assert client.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS


def test_every_buffered_packet_is_handled_in_one_read(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, received = wired
    packets = [publish_packet(f"fw/d{i}/telemetry", i + 1, b"x" * i) for i in range(50)]
    broker.sendall(b"".join(packets))
    read_all(client)
    assert [(m.topic, m.mid, m.payload) for m in received] == [
        (f"fw/d{i}/telemetry", i + 1, b"x" * i) for i in range(50)
    ]


def test_a_packet_split_across_reads_is_completed_by_the_next(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, received = wired
    first, second = publish_packet("a", 1, b"one"), publish_packet("b", 2, b"two" * 10)
    broker.sendall(first + second[:4])
    read_all(client)
    assert [m.payload for m in received] == [b"one"]
    broker.sendall(second[4:])
    read_all(client)
    assert [m.payload for m in received] == [b"one", b"two" * 10]


def test_packets_larger_than_a_read_and_random_boundaries(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, received = wired
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.choice([0, 5, 300, READ_BYTES + 17])) for _ in range(40)]
    stream = b"".join(publish_packet("t", i + 1, p) for i, p in enumerate(payloads))
    at = 0
    while at < len(stream):
        step = rng.randint(1, 3 * READ_BYTES)
        broker.sendall(stream[at : at + step])
        at += step
        while client.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS:
            if len(received) == len(payloads) or not _readable(client):
                break
    assert [m.payload for m in received] == payloads
    assert [m.mid for m in received] == list(range(1, 41))


def _readable(client: BufferedClient) -> bool:
    """Whether the socket still holds bytes (what a select would report)."""
    try:
        return bool(client._sock.recv(1, socket.MSG_PEEK))  # type: ignore[union-attr, call-arg]
    except BlockingIOError:
        return False


def test_a_new_connection_does_not_read_what_the_old_one_left(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, _ = wired
    broker.sendall(b"leftover bytes of the old connection")
    assert client._sock_recv(3) == b"lef"
    fresh, fresh_broker = socket.socketpair()
    fresh.setblocking(False)
    try:
        client._sock = fresh
        fresh_broker.sendall(b"new")
        assert client._sock_recv(3) == b"new"
        with pytest.raises(BlockingIOError):
            client._sock_recv(1)
    finally:
        fresh.close()
        fresh_broker.close()


def test_a_closed_connection_reads_as_closed(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, _ = wired
    broker.close()
    assert client.loop_read() == MQTTErrorCode.MQTT_ERR_CONN_LOST
