import json

from fleetwatch.serving.materialiser import decode_alerts
from tests.unit.test_api import make_alert


class FakeMessage:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value

    def topic(self) -> str:
        return "alerts"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


def test_records_that_are_not_alerts_are_skipped_not_fatal() -> None:
    good = make_alert("d1", 1, 1_000)
    messages = [
        FakeMessage(good.model_dump_json().encode()),
        FakeMessage(b"{broken"),
        FakeMessage(json.dumps({"alert_id": "x"}).encode()),
    ]
    alerts, bad = decode_alerts(messages)  # type: ignore[arg-type]
    assert alerts == [good]
    assert bad == 2
