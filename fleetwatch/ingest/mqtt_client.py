"""paho's MQTT client, reading its socket a buffer at a time.

paho reads every packet with three or more ``recv`` calls (one byte of type, the length a byte at
a time, then the body) and handles one packet per ``select``: at thousands of messages a second
that was a third of the gateway's CPU (``bench/gateway.py``). :class:`BufferedClient` reads up
to 64 KiB per ``recv`` and hands paho's packet reader slices of that buffer, and it handles
every packet already buffered before returning to ``select`` (which cannot see bytes held
here); the broker sends at most the receive-maximum of unacknowledged messages, so such a
drain ends. What the client does with a packet is paho's own, unchanged.

It overrides two of paho's internal methods, ``_sock_recv`` and ``loop_read``; the
``paho-mqtt`` version range in pyproject.toml is the range it was checked against.
"""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode

READ_BYTES = 65_536


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
