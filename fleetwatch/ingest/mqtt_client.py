"""paho's MQTT client, reading and writing its socket a buffer at a time.

paho reads every packet with three or more ``recv`` calls (one byte of type, the length a byte at
a time, then the body) and handles one packet per ``select``: at thousands of messages a second
those system calls are a large share of the gateway's CPU. :class:`BufferedClient` reads up
to 64 KiB per ``recv`` and hands paho's packet reader slices of that buffer, and it handles
every packet already buffered before returning to ``select`` (which cannot see bytes held
here); the broker sends at most the receive-maximum of unacknowledged messages, so such a
drain ends.

paho also wakes its network thread for every packet another thread queues (a ``send`` on a
socket pair that breaks the thread's ``select``): the gateway acknowledges each message from
its Kafka delivery reports on the main thread, so that would be a system call per message.
:class:`BufferedClient` wakes it only when the queue was empty: otherwise a wake-up is already
on its way, or the thread is writing
the queue, or it is in ``select`` waiting to write (paho's thread selects for writing while its
queue holds a packet). In the one race left — the thread empties the queue after the check and
before the append — the packet waits for the next packet read or the ``select`` timeout (1 s
in ``loop_forever``), never longer.

paho also writes each queued packet with a ``send`` of its own. :class:`BufferedClient` joins
the packets queued at the head of the line into one ``send`` (paho keeps the position of a
partial write as for any packet); packets that paho acts on once written — a QoS 0 publish
(``on_publish``) and a disconnect (the socket is closed) — are written on their own, as paho
does. What the client does with a packet is paho's own, unchanged.

paho also builds an MQTT v5 ``Properties`` object for every PUBLISH it receives, filling
tables of every property's name and type and clearing each name again, whether the packet has
properties or not. :class:`BufferedClient` decodes a QoS 0 or 1 PUBLISH without properties (what
devices send) itself, giving every such message the same empty ``Properties``; anything else
is paho's to decode, as before.

It overrides five of paho's internal methods, ``_sock_recv``, ``loop_read``, ``_packet_queue``,
``_packet_write`` and ``_handle_publish``; the ``paho-mqtt`` version range in pyproject.toml is
the range it was checked against.
"""

from __future__ import annotations

import contextlib
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

READ_BYTES = 65_536
WAKE = b"0"
"""What paho writes to its socket pair to break its thread's ``select``."""


NO_PROPERTIES = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
"""The properties of every PUBLISH received without any (shared: not to be changed)."""


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

    def _packet_queue(
        self,
        command: int,
        packet: bytes | bytearray,
        mid: int,
        qos: int,
        info: mqtt.MQTTMessageInfo | None = None,
    ) -> MQTTErrorCode:
        # paho's own, but for the wake-up: only when the queue was empty
        queue = self._out_packet
        idle = not queue
        queue.append(
            {
                "command": command,
                "mid": mid,
                "qos": qos,
                "pos": 0,
                "to_process": len(packet),
                "packet": packet,
                "info": info,
            }
        )
        if idle and self._sockpairW is not None:
            with contextlib.suppress(BlockingIOError):
                self._sockpairW.send(WAKE)
        if (
            self._thread is None
            and self._on_socket_register_write is None
            and self._in_callback_mutex.acquire(False)
        ):
            self._in_callback_mutex.release()
            return self.loop_write()
        self._call_socket_register_write()
        return MQTTErrorCode.MQTT_ERR_SUCCESS

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

    def _handle_publish(self) -> MQTTErrorCode:
        # paho's own for a QoS 0 or 1 PUBLISH of MQTT v5 without properties, decoded here
        header: int = self._in_packet["command"]
        packet: bytes | bytearray = self._in_packet["packet"]
        qos = (header & 0x06) >> 1
        start = 2 + int.from_bytes(packet[:2], "big")  # after the topic
        end = start + 2 if qos else start  # after the message id
        if (
            self._protocol != mqtt.MQTTv5
            or qos > 1
            or len(packet) <= end
            or packet[end] != 0  # properties, or a malformed packet: paho's to decode
        ):
            return super()._handle_publish()
        topic = bytes(packet[2:start])
        message = mqtt.MQTTMessage(int.from_bytes(packet[start:end], "big"), topic)
        message.dup = bool(header & 0x08)
        message.qos = qos
        message.retain = bool(header & 0x01)
        message.properties = NO_PROPERTIES
        message.payload = bytes(packet[end + 1 :])
        self._easy_log(
            mqtt.MQTT_LOG_DEBUG,
            "Received PUBLISH (d%d, q%d, r%d, m%d), '%s', properties=%s, ...  (%d bytes)",
            message.dup,
            qos,
            message.retain,
            message.mid,
            topic.decode(errors="replace"),
            NO_PROPERTIES,
            len(message.payload),
        )
        message.timestamp = mqtt.time_func()
        self._handle_on_message(message)
        if qos == 0 or self._manual_ack:
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        return self._send_puback(message.mid)
