"""The compiled path of the telemetry contract holds to the pydantic models: it accepts only
what :class:`Reading` accepts, with the same values, and encodes records byte for byte as
:class:`TelemetryRecord` does."""

import json
import string
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fleetwatch.contracts.limits import INT64_MAX, VALUE_LIMIT
from fleetwatch.contracts.telemetry import (
    CompiledReading,
    Reading,
    TelemetryRecord,
    _Record,
    decode_readings,
    encode,
    encode_record,
)

NOW = 1_800_000_000_000


def by_the_model(payload: bytes) -> Reading | list[Reading] | None:
    """What the gateway's reference path makes of a payload (``None``: refused)."""
    try:
        parsed = json.loads(payload)
        if isinstance(parsed, list):
            return [Reading.model_validate(r, strict=True) for r in parsed]
        return Reading.model_validate(parsed, strict=True)
    except (ValueError, RecursionError, ValidationError):
        return None


def same(compiled: CompiledReading, model: Reading) -> bool:
    return all(
        getattr(compiled, name) == getattr(model, name)
        and type(getattr(compiled, name)) is type(getattr(model, name))
        for name in Reading.model_fields
    ) and all(type(v) is float for v in compiled.metrics.values())


def test_the_compiled_reading_has_the_models_fields_in_order() -> None:
    assert CompiledReading.__struct_fields__ == tuple(Reading.model_fields)
    defaults = dict(
        zip(
            reversed(CompiledReading.__struct_fields__),
            reversed(CompiledReading.__struct_defaults__),
            strict=False,
        )
    )
    assert defaults == {
        n: f.default for n, f in Reading.model_fields.items() if not f.is_required()
    }


def test_the_wire_record_has_the_models_fields_in_order() -> None:
    assert _Record.__struct_fields__ == tuple(TelemetryRecord.model_fields)


numbers = (
    st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=False)
    | st.sampled_from([0, -1, 1, INT64_MAX, INT64_MAX + 1, 10**14 - 1, 10**14, 1.0, True, False])
)
names = st.text(alphabet=string.ascii_letters + "0_.-\n é\x00", min_size=0, max_size=6)
labels = st.text(alphabet="ab\n\x00é😀", max_size=66) | st.sampled_from(["a" * 64, "é" * 65])
values = numbers | st.none() | labels | st.sampled_from([VALUE_LIMIT, -VALUE_LIMIT, 1e16])
times = st.integers(0, 10**14 - 1) | st.sampled_from([0, 10**14 - 1])
good = st.fixed_dictionaries(
    {
        "v": st.just(1),
        "seq": st.integers(0, INT64_MAX),
        "ts": times,
        "sent": times,
        "metrics": st.dictionaries(
            st.from_regex(r"\A[A-Za-z][A-Za-z0-9_.-]{0,5}\Z"),
            st.floats(-VALUE_LIMIT, VALUE_LIMIT) | st.integers(-(10**15), 10**15),
            min_size=1,
            max_size=3,
        ),
    },
    optional={
        "firmware": st.text(max_size=64) | st.none(),
        "status": st.text(max_size=64) | st.none(),
        "device_id": st.from_regex(r"\A[a-z0-9][a-z0-9_.-]{0,4}\Z") | st.none(),
    },
)
fields = st.sampled_from(
    ["v", "seq", "ts", "sent", "metrics", "firmware", "status", "device_id", "other"]
)
broken_metrics = st.dictionaries(names, values, max_size=3) | st.sampled_from(
    [{f"m{i}": 1 for i in range(n)} for n in (64, 65)]
)
device_ids = st.text(alphabet="ab9-_.:\n", max_size=5) | st.sampled_from(["a" * 128, "a" * 129])


@st.composite
def readings(draw: st.DrawFn) -> dict[str, Any]:
    """A valid reading, or one with a field changed to something near or past its rules."""
    reading = draw(good)
    if draw(st.booleans()):
        field = draw(fields)
        reading[field] = draw(
            {"metrics": broken_metrics, "device_id": device_ids, "status": labels}.get(
                field, values
            )
        )
    return reading


@settings(max_examples=1500, deadline=None)
@given(body=readings() | st.lists(readings(), max_size=3) | st.just({"v": 1}))
@example(body={"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {"t\n": 1}})
@example(body={"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {"t": 1}, "status": "ok\n"})
@example(body={"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {"t": 1}, "device_id": "d\n"})
def test_the_compiled_path_accepts_only_what_the_model_accepts(body: Any) -> None:
    payload = json.dumps(body).encode()
    compiled = decode_readings(payload)
    model = by_the_model(payload)
    if compiled is None:
        return  # the model words the reason (whether it refuses or takes it)
    assert model is not None, f"accepted on the compiled path only: {payload!r}"
    if isinstance(compiled, list):
        assert isinstance(model, list)
        assert len(compiled) == len(model)
        assert all(same(c, m) for c, m in zip(compiled, model, strict=True))
    else:
        assert isinstance(model, Reading)
        assert same(compiled, model)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":NaN}}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":Infinity}}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1e400}}',
        b'{"v":1,"seq":1.0,"ts":1,"sent":1,"metrics":{"t":1}}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":true}}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1},"x":1}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1},"status":"\\ud800"}',
        b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1}} trailing',
    ],
)
def test_what_json_or_the_model_refuses_the_compiled_path_leaves_to_the_model(
    payload: bytes,
) -> None:
    assert decode_readings(payload) is None


def test_a_byte_order_mark_is_left_to_the_model() -> None:
    payload = b'\xef\xbb\xbf{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1}}'
    assert decode_readings(payload) is None
    assert isinstance(by_the_model(payload), Reading)


metric_values = st.floats(min_value=-VALUE_LIMIT, max_value=VALUE_LIMIT) | st.integers(
    -(10**15), 10**15
)


@settings(max_examples=500, deadline=None)
@given(
    metrics=st.dictionaries(st.text(min_size=1, max_size=8), metric_values, min_size=1),
    firmware=st.none() | st.text(max_size=64),
    status=st.none() | st.text(max_size=64),
    times=st.lists(st.integers(-(2**62), 2**62), min_size=6, max_size=6),
)
@example(
    metrics={"a": 1e15, "b": -0.0, "c": 5e-324, "d": 1e-7, "e": 123456789.125},
    firmware='é"\\\n\x01\x7f\u2028😀',
    status=None,
    times=[0, 1, 2, 3, 4, -5],
)
def test_a_record_is_encoded_byte_for_byte_as_the_model_encodes_it(
    metrics: dict[str, float],
    firmware: str | None,
    status: str | None,
    times: list[int],
) -> None:
    floats = {k: float(v) for k, v in metrics.items()}
    seq, event, device_event, device_sent, received, offset = times
    record = TelemetryRecord(
        device_id="d-1",
        seq=abs(seq),
        event_ms=event,
        device_event_ms=device_event,
        device_sent_ms=device_sent,
        received_ms=received,
        clock_offset_ms=offset,
        metrics=floats,
        firmware=firmware,
        status=status,
    )
    fields = record.model_dump()
    del fields["v"]
    assert encode_record(**fields) == encode(record)


def test_decoding_errors_are_msgspecs_own() -> None:
    """What :func:`decode_readings` catches is all msgspec raises for a payload."""
    with pytest.raises(msgspec.MsgspecError):
        msgspec.json.decode(b"{", type=CompiledReading)


def test_a_metric_name_off_its_pattern_is_refused_however_often_good_names_came() -> None:
    good = b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"temperature":1.0}}'
    assert decode_readings(good) is not None
    assert decode_readings(good) is not None  # the name checked once, then known
    for bad in ("1temperature", "temp erature", "t" * 65, "temperature\n"):
        payload = json.dumps({"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {bad: 1.0}})
        assert decode_readings(payload.encode()) is None, bad
        assert by_the_model(payload.encode()) is None
    batch = b"[" + good + b',{"v":1,"seq":2,"ts":1,"sent":1,"metrics":{"9x":1.0}}]'
    assert decode_readings(batch) is None


def test_a_device_inventing_names_cannot_grow_the_names_known_without_bound() -> None:
    from fleetwatch.contracts import telemetry

    for i in range(telemetry._NAMES_KNOWN + 100):
        payload = b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"m%d":1.0}}' % i
        assert decode_readings(payload) is not None
    assert len(telemetry._checked_names) == telemetry._NAMES_KNOWN
