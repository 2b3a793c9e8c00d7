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
is paho's to decode, as before. Such a PUBLISH that lies whole in the buffer is taken from it
directly, not through paho's packet reader (a state machine of several reads and dictionary
updates per packet), and its message is built without the lock and condition paho's
``MQTTMessage.info`` holds for a message being sent (:class:`ReceivedMessage`). Its
``on_message`` is called as paho calls it; the topic is matched against per-topic callbacks
(``message_callback_add``) only when there are some.

The gateway acknowledges the messages of a whole Kafka poll at once (:meth:`ack_all`): their
PUBACKs are one packet in the queue, one wake-up and one ``send``.

It overrides six of paho's internal methods, ``_sock_recv``, ``loop_read``, ``_packet_queue``,
``_packet_write``, ``_handle_publish`` and ``_handle_on_message``, and reads or sets three of its
internal fields: the reader's state (``_in_packet``), the time of the last bytes received (for
keepalive) and the per-topic callbacks; the ``paho-mqtt`` version range in pyproject.toml is the
range it was checked against.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
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


class ReceivedMessage(mqtt.MQTTMessage):
    """A PUBLISH received: paho's message, but for ``info``. paho gives every message an
    ``MQTTMessageInfo`` (a lock and a condition) to wait on its own publish; a message received
    has nothing to wait for, so it is built only if read."""

    def __init__(
        self, mid: int, topic: bytes, payload: bytes, qos: int, dup: bool, retain: bool
    ) -> None:
        # paho's MQTTMessage.__init__, but for ``info``
        self.timestamp = mqtt.time_func()
        self.state = mqtt.mqtt_ms_invalid
        self.dup = dup
        self.mid = mid
        self._topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = NO_PROPERTIES
        self._info: mqtt.MQTTMessageInfo | None = None

    @property
    def info(self) -> mqtt.MQTTMessageInfo:
        if self._info is None:
            self._info = mqtt.MQTTMessageInfo(self.mid)
        return self._info

    @info.setter
    def info(self, value: mqtt.MQTTMessageInfo) -> None:
        self._info = value


_PUBACK = struct.Struct("!BBH")
"""An MQTT PUBACK without a reason code or properties (success): type, length 2, message id."""


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
            self._read_publishes()
            if not self._read_buffer:
                return rc

    def _read_publishes(self) -> None:
        """Handle the PUBLISH packets that lie whole at the head of the buffer, each as
        ``_handle_publish`` would; stop at the first that is not one (another type, or
        properties: paho's), or not whole, and leave it to paho's reader."""
        sock, buffer = self._sock, self._read_buffer
        if (
            self._protocol != mqtt.MQTTv5
            or self._in_packet["command"] != 0  # paho is within a packet
            or self._read_socket is not sock
        ):
            return
        size, at = len(buffer), 0
        while at < size and self._sock is sock:
            header = buffer[at]
            if header & 0xF0 != mqtt.PUBLISH:
                break
            start, length, shift = at + 1, 0, 0
            while start < size and shift <= 21:  # the remaining length: 1 to 4 bytes
                byte = buffer[start]
                start += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            else:
                break  # not whole yet, or malformed: paho's
            end = start + length
            if end > size or self._publish(header, buffer[start:end]) is None:
                break
            at = end
        if at:
            self._read_buffer = buffer[at:]
            with self._msgtime_mutex:
                self._last_bytes_received = mqtt.time_func()

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
        rc = None
        if self._protocol == mqtt.MQTTv5:
            rc = self._publish(self._in_packet["command"], self._in_packet["packet"])
        return super()._handle_publish() if rc is None else rc

    def _publish(self, header: int, packet: bytes | bytearray | memoryview) -> MQTTErrorCode | None:
        """paho's ``_handle_publish`` for a QoS 0 or 1 PUBLISH of MQTT v5 without properties;
        ``None``, having done nothing, for any other (paho's to decode)."""
        qos = (header & 0x06) >> 1
        start = 2 + int.from_bytes(packet[:2], "big")  # after the topic
        end = start + 2 if qos else start  # after the message id
        if qos > 1 or len(packet) <= end or packet[end] != 0:
            return None  # properties, or a malformed packet
        topic = bytes(packet[2:start])
        mid = int.from_bytes(packet[start:end], "big")
        payload = bytes(packet[end + 1 :])
        message = ReceivedMessage(
            mid, topic, payload, qos, bool(header & 0x08), bool(header & 0x01)
        )
        if self._logger is not None or self.on_log is not None:
            self._easy_log(
                mqtt.MQTT_LOG_DEBUG,
                "Received PUBLISH (d%d, q%d, r%d, m%d), '%s', properties=%s, ...  (%d bytes)",
                message.dup,
                qos,
                message.retain,
                mid,
                topic.decode(errors="replace"),
                NO_PROPERTIES,
                len(payload),
            )
        self._handle_on_message(message)
        if qos == 0 or self._manual_ack:
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        return self._send_puback(mid)

    def _handle_on_message(self, message: mqtt.MQTTMessage) -> None:
        # paho's, but the topic is matched against per-topic callbacks only when there are some
        if self._on_message_filtered._root._children:
            super()._handle_on_message(message)
            return
        on_message = self.on_message
        if on_message is None:
            return
        with self._in_callback_mutex:
            try:
                on_message(self, self._userdata, message)
            except Exception as err:
                self._easy_log(mqtt.MQTT_LOG_ERR, "Caught exception in on_message: %s", err)
                if not self.suppress_exceptions:
                    raise

    def ack_all(self, mids: Sequence[int]) -> MQTTErrorCode:
        """Acknowledge these QoS 1 messages (received with ``manual_ack``): their PUBACKs go
        out together, in this order."""
        if not mids:
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        if self._logger is not None or self.on_log is not None:
            for mid in mids:
                self._easy_log(mqtt.MQTT_LOG_DEBUG, "Sending PUBACK (Mid: %d)", mid)
        pack, command = _PUBACK.pack, mqtt.PUBACK
        packet = b"".join([pack(command, 2, mid) for mid in mids])
        return self._packet_queue(command, packet, mids[-1], 1)
