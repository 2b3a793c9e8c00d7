import json
import math

import pytest

from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.limits import INT64_MAX, VALUE_LIMIT
from fleetwatch.contracts.telemetry import parse_reading, reading_payload


def test_a_valid_reading_parses() -> None:
    reading = parse_reading(
        reading_payload(7, 1_700_000_000_000, 1_700_000_000_010, {"temperature": 21.5})
    )
    assert reading.seq == 7
    assert reading.metrics == {"temperature": 21.5}


def test_integer_metric_values_are_accepted_as_numbers() -> None:
    reading = parse_reading(b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"rpm":1200}}')
    assert reading.metrics["rpm"] == 1200.0


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (b"not json", "payload"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1}', "metrics"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{}}', "metrics"),
        (b'{"v":1,"seq":-1,"ts":1,"sent":1,"metrics":{"t":1}}', "seq"),
        (b'{"v":1,"seq":"7","ts":1,"sent":1,"metrics":{"t":1}}', "seq"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":"hot"}}', "metrics.t"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1e999}}', "metrics.t"),
        (b'{"v":2,"seq":1,"ts":1,"sent":1,"metrics":{"t":1}}', "v"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1},"extra":true}', "extra"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"bad name":1}}', "metrics"),
        # a seq beyond a signed 64-bit integer: the scorer once crash-looped on one
        (b'{"v":1,"seq":9223372036854775808,"ts":1,"sent":1,"metrics":{"t":1}}', "seq"),
        (b'{"v":1,"seq":1180591620717411303424,"ts":1,"sent":1,"metrics":{"t":1}}', "seq"),
        # finite but huge: a window's variance of two such values overflows
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1e300}}', "metrics.t"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":-2e15}}', "metrics.t"),
        (b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":1},"firmware":"1.0\\u0000"}', "firmware"),
    ],
)
def test_a_broken_reading_names_the_rule_it_broke(payload: bytes, where: str) -> None:
    with pytest.raises(PayloadError, match=rf"^{where}"):
        parse_reading(payload)


def test_nan_is_refused() -> None:
    payload = json.dumps(
        {"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {"t": math.nan}}
    ).encode()
    with pytest.raises(PayloadError, match=r"metrics\.t"):
        parse_reading(payload)


def test_the_bounds_themselves_are_accepted() -> None:
    body = {"v": 1, "seq": INT64_MAX, "ts": 1, "sent": 1, "metrics": {"t": -VALUE_LIMIT}}
    reading = parse_reading(json.dumps(body).encode())
    assert reading.seq == INT64_MAX
    assert reading.metrics["t"] == -VALUE_LIMIT
