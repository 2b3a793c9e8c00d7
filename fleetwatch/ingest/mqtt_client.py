"""paho's MQTT client, reading and writing its socket a buffer at a time.

paho reads every packet with three or more ``recv`` calls (one byte of type, the length a byte at
a time, then the body) and handles one packet per ``select``: at thousands of messages a second
that was a third of the gateway's CPU (``bench/micro/gateway.py``). :class:`BufferedClient` reads up
to 64 KiB per ``recv`` and hands paho's packet reader slices of that buffer, and it handles
every packet already buffered before returning to ``select`` (which cannot see bytes held
here); the broker sends at most the receive-maximum of unacknowledged messages, so such a
drain ends.

paho also writes each queued packet with a ``send`` of its own. :class:`BufferedClient` joins
the packets queued at the head of the line into one ``send`` (paho keeps the position of a
partial write as for any packet); packets that paho acts on once written — a QoS 0 publish
(``on_publish``) and a disconnect (the socket is closed) — are written on their own, as paho
does. What the client does with a packet is paho's own, unchanged.

It overrides three of paho's internal methods, ``_sock_recv``, ``loop_read`` and
``_packet_write``; the ``paho-mqtt`` version range in pyproject.toml is the range it was
checked against.
"""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode

READ_BYTES = 65_536


def _plain(packet: Any) -> bool:
    """Nothing happens once this packet is written (paho's ``_packet_write``)."""
    command = packet["command"] & 0xF0
    return command != mqtt.DISCONNECT and not (command == mqtt.PUBLISH and packet["qos"] == 0)


class BufferedClient(mqtt.Client):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_buffer = memoryview(b"")
        self._read_socket: object = None

    def _sock_recv(self, bufsize: int) -> bytes:
        buffer = self._read_buffer
        if not buffer or self._read_socket is not self._sock:
            # Nothing buffered, or a new connection (what a lost one left is not its data).
            self._read_buffer = buffer = memoryview(b"")
            data = super()._sock_recv(READ_BYTES)  # raises BlockingIOError when there is none
            if not data:
                return data  # the connection closed
            self._read_socket = self._sock
            buffer = memoryview(data)
        self._read_buffer = buffer[bufsize:]
        return bytes(buffer[:bufsize])

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        while True:
            rc = super().loop_read(max_packets)
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or not self._read_buffer:
                return rc

    def _packet_write(self) -> MQTTErrorCode:
        # Only the thread that writes takes packets off the head; others append at the tail.
        queue = self._out_packet
        if len(queue) > 1 and queue[0]["pos"] == 0 and _plain(queue[0]) and _plain(queue[1]):
            first = queue.popleft()
            parts = [first["packet"]]
            while queue and _plain(queue[0]):
                parts.append(queue.popleft()["packet"])
            joined = b"".join(parts)
            queue.appendleft({**first, "packet": joined, "to_process": len(joined)})
        return super()._packet_write()
