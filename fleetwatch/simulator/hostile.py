"""Hostile inputs: what broken firmware, dying clocks and attackers send, for proving that a
deployment takes them without losing or bending anything for the rest of the fleet
(``tests/integration/test_hostile_fleet.py``, ``bench/pipeline/hostile.py``).

:func:`mqtt_messages` gives, per hostile case, the MQTT payloads a device of that case
publishes to its own telemetry topic; :func:`raw_records` gives values written to
``telemetry.raw`` past the gateway (a broken or hostile producer with Kafka access).
"""

from __future__ import annotations

import json

from fleetwatch.contracts.telemetry import reading_payload

FLOOD_READINGS, FLOOD_NAMES = 10, 10
"""The metric flood: readings of as many new names each (100 names, beyond the scorer's 64)."""
STORM = 30
"""Copies of one reading in the duplicate storm."""
REFUSED_BY_GATEWAY = ("oversized", "nonutf8", "deep", "nan", "huge", "overflow", "bigseq", "nul")
"""Cases whose every message the gateway dead-letters."""
_YEAR_MS = 365 * 86_400_000


def mqtt_messages(now_ms: int) -> dict[str, list[bytes]]:
    """Hostile case → the payloads its device publishes (each case is one device)."""
    ok = {"t": 21.0}
    future = now_ms + 10 * _YEAR_MS
    return {
        "oversized": [b'{"seq":1,"metrics":{"t":1},"pad":"' + b"x" * 600_000 + b'"}'],
        "nonutf8": [b"\xff\xfe\x00\x81 not text"],
        "deep": [b'{"a":' * 5_000 + b"1" + b"}" * 5_000],
        "nan": [b'{"v":1,"seq":1,"ts":%d,"sent":%d,"metrics":{"t":NaN}}' % (now_ms, now_ms)],
        "huge": [reading_payload(1, now_ms, now_ms, {"t": 1e308})],
        "overflow": [
            b'{"v":1,"seq":1,"ts":%d,"sent":%d,"metrics":{"t":1%s}}' % (now_ms, now_ms, b"0" * 400)
        ],
        "bigseq": [reading_payload(2**70, now_ms, now_ms, ok)],
        "future": [reading_payload(1, future, future, ok)],
        "past": [reading_payload(1, 1_000, 1_000, ok)],
        "nul": [reading_payload(1, now_ms, now_ms, ok, firmware="1.0\x00evil")],
        "badname": [reading_payload(1, now_ms, now_ms, {"no spaces allowed": 1.0})],
        "metricflood": [
            reading_payload(
                i, now_ms + i, now_ms + i, {f"m{i}_{j}": float(j) for j in range(FLOOD_NAMES)}
            )
            for i in range(FLOOD_READINGS)
        ],
        "dupstorm": [reading_payload(7, now_ms, now_ms, ok)] * STORM,
    }


def raw_records(now_ms: int) -> list[bytes]:
    """Values written to ``telemetry.raw`` past the gateway; the scorer dead-letters each."""
    return [
        b"{not json",
        b"[]",
        json.dumps({"seq": 2**70, "event_ms": now_ms, "metrics": {"t": 1.0}}).encode(),
        json.dumps({"seq": 1, "event_ms": now_ms, "metrics": {"t": 1e300}}).encode(),
        json.dumps({"seq": 1, "event_ms": now_ms, "metrics": "t"}).encode(),
    ]
