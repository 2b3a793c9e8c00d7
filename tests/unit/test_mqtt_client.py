"""The gateway's buffered MQTT client parses what paho parses, whatever the reads' boundaries."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from fleetwatch.ingest.mqtt_client import READ_BYTES, BufferedClient, ReceivedMessage


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


def _readable(client: mqtt.Client) -> bool:
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


def _queued(client: BufferedClient) -> bytes:
    return b"".join(bytes(p["packet"][p["pos"] :]) for p in client._out_packet)


def _received(broker: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        data += broker.recv(size - len(data))
    return data


@pytest.fixture
def writer(wired):  # type: ignore[no-untyped-def]
    """The wired client with its writes left to the test (as an event loop would) and every
    ``send`` counted."""
    client, broker, _ = wired
    client.on_socket_register_write = lambda _c, _u, _s: None
    sends: list[int] = []
    send = client._sock_send

    def counted(buf: bytes) -> int:
        sends.append(len(buf))
        return int(send(buf))

    client._sock_send = counted
    return client, broker, sends


def test_queued_publishes_and_acks_go_out_in_one_send_in_order(writer) -> None:  # type: ignore[no-untyped-def]
    client, broker, sends = writer
    for i in range(20):
        client.publish(f"fw/d{i}/telemetry", b"x" * i, qos=1)
        client.ack(i + 100, 1)
    expected = _queued(client)
    assert len(client._out_packet) == 40
    assert client.loop_write() == MQTTErrorCode.MQTT_ERR_SUCCESS
    assert sends == [len(expected)]
    assert _received(broker, len(expected)) == expected
    assert not client.want_write()


def test_a_partial_write_resumes_where_the_socket_stopped(writer) -> None:  # type: ignore[no-untyped-def]
    client, broker, sends = writer
    send = client._sock_send
    client._sock_send = lambda buf: send(buf[:7])  # the socket takes 7 bytes at a time
    for i in range(10):
        client.publish("t", bytes([i]) * 30, qos=1)
    expected = _queued(client)
    while client.want_write():
        assert client.loop_write() == MQTTErrorCode.MQTT_ERR_SUCCESS
    assert _received(broker, len(expected)) == expected
    assert len(sends) == -(-len(expected) // 7)


def test_a_qos0_publish_is_written_on_its_own_and_reported(writer) -> None:  # type: ignore[no-untyped-def]
    client, broker, sends = writer
    published: list[int] = []
    client.on_publish = lambda _c, _u, mid, _rc, _p: published.append(mid)
    client.publish("a", b"1", qos=1)
    client.publish("b", b"2", qos=1)
    fire_and_forget = client.publish("c", b"3", qos=0)
    client.publish("d", b"4", qos=1)
    expected = _queued(client)
    client.loop_write()
    assert _received(broker, len(expected)) == expected
    assert len(sends) == 3  # a+b joined, c alone, d
    assert published == [fire_and_forget.mid]
    assert fire_and_forget.is_published()


class _WakeCounter:
    """Stands in for paho's socket pair: counts the wake-ups sent to the network thread."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def close(self) -> None:
        return None


def test_the_network_thread_is_woken_only_for_a_queue_that_was_empty(writer) -> None:  # type: ignore[no-untyped-def]
    client, broker, _ = writer
    wake = _WakeCounter()
    client._sockpairW = wake
    for mid in range(1, 6):  # acknowledgements from another thread, back to back
        client.ack(mid, 1)
    assert len(wake.sent) == 1  # one wake-up: the thread writes the whole queue
    assert len(client._out_packet) == 5
    expected = _queued(client)
    assert client.loop_write() == MQTTErrorCode.MQTT_ERR_SUCCESS  # the thread writes them
    assert _received(broker, len(expected)) == expected
    client.ack(6, 1)  # the queue is empty again: this one wakes it
    assert len(wake.sent) == 2


def publish_body(topic: bytes, qos: int, mid: int, props: bytes, payload: bytes) -> bytes:
    return (
        struct.pack("!H", len(topic))
        + topic
        + (struct.pack("!H", mid) if qos else b"")
        + (varint(len(props)) + props + payload)
    )


@pytest.mark.parametrize("manual_ack", [True, False])
@pytest.mark.parametrize(
    ("header", "body"),
    [
        (0x32, publish_body(b"fw/d1/telemetry", 1, 7, b"", b'{"v":1}')),
        (0x30, publish_body(b"fw/d1/telemetry", 0, 0, b"", b"x")),
        (0x3B, publish_body(b"fw/d1/telemetry", 1, 65535, b"", b"")),  # dup, retain
        (0x32, publish_body("fw/dé/telemetry".encode(), 1, 1, b"", b"\x00\xff")),
        (0x32, publish_body(b"fw/d1/telemetry", 1, 9, b"\x01\x01", b"y")),  # with properties
        (0x32, publish_body(b"", 1, 9, b"\x23\x00\x05", b"y")),  # a topic alias
        (0x34, publish_body(b"fw/d1/telemetry", 2, 3, b"", b"z")),  # QoS 2
        (0x32, b"\x00\x05fw/d"),  # malformed: shorter than its topic
    ],
)
def test_a_publish_is_decoded_as_paho_decodes_it(
    header: int, body: bytes, manual_ack: bool
) -> None:
    """What the client decodes itself (QoS 0 or 1, no properties) and what it leaves to paho
    reach the callback as paho's own client hands them over."""

    def packed(msg: mqtt.MQTTMessage) -> bytes | None:
        return None if msg.properties is None else msg.properties.pack()  # type: ignore[no-untyped-call]

    def receive(cls: type[mqtt.Client]) -> tuple[object, ...]:
        client = cls(
            CallbackAPIVersion.VERSION2, client_id="t", protocol=mqtt.MQTTv5, manual_ack=manual_ack
        )
        got: list[mqtt.MQTTMessage] = []
        client.on_message = lambda _c, _u, msg: got.append(msg)
        client._in_packet = {**client._in_packet, "command": header, "packet": bytearray(body)}
        try:
            rc: object = client._handle_publish()
        except Exception as exc:  # noqa: BLE001 - the same failure is the point
            rc = type(exc)
        return (
            rc,
            [(m.topic, m.mid, m.qos, m.dup, m.retain, m.payload, packed(m)) for m in got],
            [p["packet"] for p in client._out_packet],
        )

    assert receive(BufferedClient) == receive(mqtt.Client)


def test_a_stream_of_publishes_and_other_packets_reaches_the_callbacks_as_paho_hands_it() -> None:
    """PUBLISH packets taken straight from the buffer, and those left to paho's reader (with
    properties, QoS 2, another packet type between them), arrive in order as paho's own client
    hands them over, whatever the reads' boundaries."""
    suback = bytes([0x90, 3]) + struct.pack("!H", 1) + b"\x00"  # SUBACK of a subscribe never sent
    pingresp = bytes([0xD0, 0])
    packets = []
    for i in range(30):
        if i % 7 == 3:
            body = publish_body(b"fw/p/telemetry", 1, i + 1, b"\x01\x01", b"props%d" % i)
            packets.append(bytes([0x32]) + varint(len(body)) + body)
        elif i % 11 == 5:
            body = publish_body(b"fw/q2/telemetry", 2, i + 1, b"", b"qos2")
            packets.append(bytes([0x34]) + varint(len(body)) + body)
        elif i % 13 == 6:
            packets.append(pingresp if i % 2 else suback)
        packets.append(publish_packet(f"fw/d{i}/telemetry", i + 1, b"x" * (i * 37)))
    stream = b"".join(packets)

    def messages(cls: type[mqtt.Client], cuts: list[int]) -> list[tuple[object, ...]]:
        c = cls(CallbackAPIVersion.VERSION2, client_id="t", protocol=mqtt.MQTTv5, manual_ack=True)
        got: list[mqtt.MQTTMessage] = []
        c.on_message = lambda _c, _u, msg: got.append(msg)
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        c._sock = ours
        try:
            for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
                theirs.sendall(stream[start:end])
                while _readable(c) and c.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS:
                    pass
        finally:
            ours.close()
            theirs.close()
        return [(m.topic, m.mid, m.qos, m.payload) for m in got]

    rng = random.Random(3)
    expected = messages(mqtt.Client, [])
    assert len(expected) == 30 + 4  # every PUBLISH but QoS 2's (delivered on their PUBREL)
    for cuts in ([], sorted(rng.sample(range(1, len(stream)), 40)), list(range(1, len(stream)))):
        assert messages(BufferedClient, cuts) == expected


def test_per_topic_callbacks_take_their_messages(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, received = wired
    filtered: list[str] = []
    client.message_callback_add("fw/+/acks", lambda _c, _u, msg: filtered.append(msg.topic))
    broker.sendall(
        publish_packet("fw/d1/acks", 1, b"a") + publish_packet("fw/d1/telemetry", 2, b"t")
    )
    read_all(client)
    assert filtered == ["fw/d1/acks"]
    assert [m.topic for m in received] == ["fw/d1/telemetry"]


def test_a_received_message_builds_its_info_only_when_read(wired) -> None:  # type: ignore[no-untyped-def]
    client, broker, received = wired
    broker.sendall(publish_packet("fw/d1/telemetry", 5, b"x"))
    read_all(client)
    (msg,) = received
    assert isinstance(msg, ReceivedMessage)
    assert isinstance(msg, mqtt.MQTTMessage)
    assert msg._info is None
    assert msg.info.mid == 5
    assert msg.info is msg.info


def test_acknowledgements_handed_together_are_one_packet_one_wake_up_one_send(writer) -> None:  # type: ignore[no-untyped-def]
    client, broker, sends = writer
    wake = _WakeCounter()
    client._sockpairW = wake
    mids = [9, 1, 65535, 300]
    client.ack_all(mids)
    client.ack_all([])
    assert len(wake.sent) == 1
    assert len(client._out_packet) == 1
    expected = b"".join(bytes([0x40, 2]) + struct.pack("!H", mid) for mid in mids)
    assert _queued(client) == expected
    one_by_one = BufferedClient(
        CallbackAPIVersion.VERSION2, client_id="t", protocol=mqtt.MQTTv5, manual_ack=True
    )
    one_by_one.on_socket_register_write = lambda _c, _u, _s: None
    for mid in mids:
        one_by_one.ack(mid, 1)
    assert _queued(one_by_one) == expected, "the bytes paho's ack() writes for each"
    assert client.loop_write() == MQTTErrorCode.MQTT_ERR_SUCCESS
    assert sends == [len(expected)]
    assert _received(broker, len(expected)) == expected
