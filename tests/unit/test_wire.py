"""Bounded JSON: every reader's decoding refuses hostile records with RecordRejected only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetwatch.contracts import model_params, wire
from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.serving import decode
from fleetwatch.streaming.scorer.readings import NOT_UTF8, readings_by_device

DEEP = b'{"seq":1,"event_ms":5,"metrics":{"t":1.0},"firmware":' + b"[" * 100_000 + b"]" * 100_000
DEEP += b"}"


def test_a_record_nested_a_hundred_thousand_deep_is_refused_before_parsing() -> None:
    objects = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    for value, levels in ((DEEP, 100_001), (DEEP.decode(), 100_001), (objects, 100_000)):
        with pytest.raises(wire.RecordRejected, match=f"nested {levels} levels deep"):
            wire.loads(value)


def test_a_record_that_is_not_a_bounded_json_object_reads_as_none() -> None:
    assert wire.loads_object(b'{"a": [1]}\n') == {"a": [1]}
    for value in (None, b"", b"\n", b"[1]", b"3", b"{", b"\xff", DEEP):
        assert wire.loads_object(value) is None


def test_depth_is_counted_outside_strings_only() -> None:
    text = json.dumps({"firmware": "[" * 500 + '\\"{' * 100, "seq": [[1]]})
    assert wire.depth(text.encode()) == 3
    assert wire.loads(text)["seq"] == [[1]]
    exactly = b"[" * wire.MAX_DEPTH + b"]" * wire.MAX_DEPTH
    assert wire.loads(exactly) is not None
    with pytest.raises(wire.RecordRejected, match="33 levels"):
        wire.loads(b"[" + exactly + b"]")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty record"),
        (None, "empty record"),
        (b"\xff\xfe not text", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b'"' + b"x" * wire.MAX_RECORD_BYTES + b'"', "exceeds"),
    ],
)
def test_each_bound_says_which_it_is(value: bytes | None, reason: str) -> None:
    with pytest.raises(wire.RecordRejected, match=reason):
        wire.loads(value)


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_decode_or_are_refused_with_a_reason(value: bytes) -> None:
    try:
        wire.loads(value)
    except wire.RecordRejected as exc:
        reason = str(exc)
        assert reason.startswith(("empty record", "not JSON", "nested", "record of"))


@given(st.integers(min_value=33, max_value=3_000), st.sampled_from("[{"))
def test_any_deep_nesting_is_refused_by_every_reader(levels: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    inner = (opener + ('"k":' if opener == "{" else "")) * levels + "1" + closer * levels
    value = ('{"seq":1,"event_ms":5,"metrics":{"t":1.0},"firmware":' + inner + "}").encode()
    found = readings_by_device(["d"], [value.decode()])
    assert found.skipped == 1
    assert "nested" in found.refused[0].reason
    with pytest.raises(ValueError, match="nested"):
        decode.decode_alert(value)
    with pytest.raises(ParamsRecordError, match="nested"):
        model_params.decode(value, b"d")


def test_the_scorer_refuses_the_deep_record_and_keeps_the_rest_of_the_bucket() -> None:
    good = json.dumps({"seq": 2, "event_ms": 6, "metrics": {"t": 2.0}})
    found = readings_by_device(["a", "b"], [DEEP.decode(), good], [(0, 10), (0, 11)])
    assert [r.record.source for r in found.refused] == [(0, 10)]
    assert found.refused[0].reason == "nested 100001 levels deep, more than 32"
    assert list(found.by_device) == ["b"]
    assert found.by_device["b"]["seq"].tolist() == [2]


def test_text_that_utf8_cannot_encode_is_refused_and_its_dead_letter_encodes() -> None:
    reading = '{"seq":1,"event_ms":5,"metrics":{"t":1.0},"firmware":"%s"}'
    raw = reading % "\udcff\udcfe"  # bytes that were not UTF-8, as a reader may decode them
    escaped = reading % "\\udcff"  # a lone surrogate written as a JSON escape
    pair = reading % "\\ud83d\\ude00"  # a surrogate pair is a character: accepted
    devices = ["a", "b", "c", "\udcff", "e"]
    found = readings_by_device(devices, [raw, escaped, pair, reading % "x", None])
    assert [r.reason for r in found.refused] == [
        "not JSON: not UTF-8 (a lone surrogate in the text)",
        "not JSON: a string escapes a lone surrogate (not UTF-8)",
        NOT_UTF8,  # a key that is not UTF-8
        NOT_UTF8,  # the job hands a value that is not UTF-8 over as None
    ]
    for refused in found.refused:
        refused.record.text.encode()
        refused.device_id.encode()
    assert list(found.by_device) == ["c"]
    assert found.by_device["c"]["firmware"].tolist() == ["\U0001f600"]


def test_a_label_off_the_contract_refuses_the_reading() -> None:
    reading = '{"seq":1,"event_ms":5,"metrics":{"t":1.0},"firmware":%s}'
    texts = [reading % json.dumps("x" * 65), reading % json.dumps("1.0\x00evil"), reading % "7"]
    found = readings_by_device(["a", "b", "c"], texts)
    reason = "firmware is longer than 64 characters or holds a NUL"
    assert [r.reason for r in found.refused] == [reason, reason]
    assert found.by_device["c"]["firmware"].tolist() == [None]  # not a string: left out


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _same(a: object, b: object) -> bool:
    """Equal, of the same types throughout (1 and 1.0, -0.0 and 0.0 told apart)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return repr(a) == repr(b)
    return type(a) is type(b) and a == b


@given(JSON_VALUES, st.booleans())
def test_a_record_decodes_to_the_standard_librarys_value(value: object, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    if text.count("[") + text.count("{") <= wire.MAX_DEPTH:
        assert _same(wire.loads(text), json.loads(text))
        assert _same(wire.loads(text.encode()), json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a": NaN, "b": Infinity, "c": -Infinity}',
        '{"a": 1e400}',
        '{"a": -0.0, "b": -0, "c": 1E2, "d": 123456789012345678901234567890}',
        ' {"a": "\\u00e9\\ud83d\\ude00"} ',
    ],
)
def test_what_json_reads_beyond_strict_json_reads_as_before(text: str) -> None:
    assert _same(wire.loads(text), json.loads(text))
