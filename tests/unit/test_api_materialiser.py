import json

from fleetwatch.contracts.model_params import encode_device
from fleetwatch.contracts.settings import TopicSettings
from fleetwatch.serving.materialiser import batch_of
from tests.unit.api_support import make_alert

TOPICS = TopicSettings()
KINDS = {TOPICS.alerts: "alerts", TOPICS.device_state: "state", TOPICS.model_params: "models"}
PARAMS = json.dumps(
    {"kind": "seasonal", "schema": 1, "version": 7, "trained_from_ms": 1, "trained_to_ms": 2}
)


class FakeMessage:
    def __init__(self, value: bytes, topic: str = TOPICS.alerts, key: bytes = b"d1") -> None:
        self._value = value
        self._topic = topic
        self._key = key

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return self._key

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


def test_records_that_break_their_contract_are_skipped_not_fatal() -> None:
    good = make_alert("d1", 1, 1_000)
    skipped: list[str] = []
    messages = [
        FakeMessage(good.model_dump_json().encode()),
        FakeMessage(b"{broken"),
        FakeMessage(json.dumps({"alert_id": "x"}).encode()),
        FakeMessage(b"[1, 2]", TOPICS.device_state),
        FakeMessage(b"", TOPICS.model_params),
        FakeMessage(json.dumps({"kind": "seasonal", "version": "7"}).encode(), TOPICS.model_params),
        FakeMessage(json.dumps({"kind": "seasonal", "version": 7}).encode(), TOPICS.model_params),
        FakeMessage(encode_device("d1", PARAMS, 9).encode(), TOPICS.model_params),
    ]
    batch = batch_of(messages, KINDS, skipped.append)  # type: ignore[arg-type]
    assert batch.alerts == [good]
    assert [(m.device_id, m.version) for m in batch.models] == [("d1", 7)]
    assert batch.models[0].params == json.loads(PARAMS)
    assert len(skipped) == 6  # a model.params record without its parameters among them


def test_an_ack_record_carries_the_device_it_came_from() -> None:
    body = {"v": 1, "command_id": "c1", "status": "ok", "detail": "", "device_ms": 5}
    record = {**body, "device_id": "d9", "received_ms": 6}
    message = FakeMessage(json.dumps(record).encode(), TOPICS.device_command_acks)
    kinds = {TOPICS.device_command_acks: "acks"}
    batch = batch_of([message], kinds, lambda topic: None)  # type: ignore[list-item]
    assert [(a.ack.command_id, a.device_id) for a in batch.acks] == [("c1", "d9")]
