"""A small fleet for the rules' integration tests: devices writing readings straight to
``telemetry.raw`` at wall-clock event times, each at a temperature the test sets."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from confluent_kafka import Producer


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Fleet:
    """Two devices sending a reading every 200 ms of wall time, stamped with it (the record's
    timestamp is the event time), each at the temperature set for it; a device set to None is
    silent."""

    def __init__(self, producer: Producer, topic: str, devices: list[str]) -> None:
        self.producer, self.topic = producer, topic
        self.temperature: dict[str, float | None] = dict.fromkeys(devices, 21.0)
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seq += 1
            at = now_ms()
            for device, temperature in list(self.temperature.items()):
                if temperature is None:
                    continue
                value = {
                    "v": 1,
                    "device_id": device,
                    "seq": self.seq,
                    "event_ms": at,
                    "device_event_ms": at,
                    "device_sent_ms": at,
                    "received_ms": at,
                    "clock_offset_ms": 0,
                    "metrics": {"temperature": temperature, "rpm": 1000.0},
                }
                self.producer.produce(
                    self.topic, json.dumps(value).encode(), key=device.encode(), timestamp=at
                )
            self.producer.flush(10)
            self._stop.wait(0.2)

    def __enter__(self) -> Fleet:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
