"""Whatever arrives, `handle` answers: each reading accepted or dead-lettered with a reason."""

import json
import re
import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetwatch.contracts.identifiers import is_device_id
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.ingest.accept import handle
from fleetwatch.ingest.clock import ClockOffsets

NOW = 1_800_000_000_000
MAX = 2048

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
metric_names = st.text(alphabet=string.ascii_letters, min_size=1, max_size=8)
readings = st.fixed_dictionaries(
    {
        "v": st.sampled_from([1, 1, 1, 2, 0, "1"]),
        "seq": st.integers(-2, 2**40) | st.text(max_size=3),
        "ts": st.integers(NOW - 10**9, NOW + 10**6),
        "sent": st.integers(NOW - 10**6, NOW + 10**6),
        "metrics": st.dictionaries(
            metric_names, st.floats(allow_nan=True, allow_infinity=True) | st.integers(), max_size=4
        ),
    },
    optional={"firmware": st.text(max_size=70), "unknown": json_values},
)
payloads = st.one_of(
    st.binary(max_size=MAX + 64),
    readings.map(lambda r: json.dumps(r).encode()),
    st.lists(readings, min_size=0, max_size=5).map(lambda rs: json.dumps(rs).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
)
topics = st.one_of(
    st.sampled_from(["devices/d1/telemetry", "devices/d-2/telemetry"]),
    st.text(max_size=30),
    st.builds(lambda d: f"devices/{d}/telemetry", st.text(max_size=12)),
)


def expected_records(topic: str, payload: bytes) -> int:
    """How many outputs a message must give: one per reading of a batch, else one."""
    device = re.fullmatch(r"devices/(.*)/telemetry", topic, flags=re.DOTALL)
    if device is None or not is_device_id(device[1]):
        return 1
    try:
        parsed: Any = json.loads(payload)
    except (ValueError, RecursionError):
        return 1
    return (
        len(parsed)
        if isinstance(parsed, list) and 0 < len(parsed) <= 1000 and len(payload) <= MAX
        else 1
    )


@settings(max_examples=600, deadline=None)
@given(topic=topics, payload=payloads)
def test_every_message_ends_in_exactly_the_right_place(topic: str, payload: bytes) -> None:
    out = handle(topic, payload, NOW, "devices", MAX, ClockOffsets())
    readings = len(out.accepted) + sum(dl.readings for dl in out.rejected)
    assert readings == expected_records(topic, payload)
    assert len(out.rejected) <= 1  # a message's rejected readings share one dead letter
    for ok in out.accepted:
        record = TelemetryRecord.model_validate_json(ok.value)
        assert record.metrics
        assert all(abs(v) < float("inf") for v in record.metrics.values())
        assert ok.key == record.device_id.encode()
        assert topic == f"devices/{record.device_id}/telemetry"
    for dl in out.rejected:
        assert dl.reason
        assert dl.value == payload
        assert dict(dl.headers)["fw.reason"] == dl.reason.encode()
