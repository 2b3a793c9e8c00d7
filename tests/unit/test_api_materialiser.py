import json

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.model_params import encode_device
from fleetwatch.contracts.settings import TopicSettings
from fleetwatch.serving import materialiser as materialiser_module
from fleetwatch.serving.materialiser import Materialiser, batch_of
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store.ingest import Batch
from tests.unit.api_support import make_alert, memory_store

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
    refused: list[tuple[FakeMessage, str]] = []
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
    sources: dict[int, object] = {}
    batch = batch_of(messages, KINDS, lambda m, r: refused.append((m, r)), sources)  # type: ignore[arg-type]
    assert batch.alerts == [good]
    assert [(m.device_id, m.version) for m in batch.models] == [("d1", 7)]
    assert batch.models[0].params == json.loads(PARAMS)
    # a model.params record without its parameters among them, each with the reason
    assert [m for m, _ in refused] == messages[1:7]
    assert refused[0][1].startswith("not a valid alerts record: ")
    assert sources == {id(batch.alerts[0]): messages[0], id(batch.models[0]): messages[7]}


def test_an_ack_record_carries_the_device_it_came_from() -> None:
    body = {"v": 1, "command_id": "c1", "status": "ok", "detail": "", "device_ms": 5}
    record = {**body, "device_id": "d9", "received_ms": 6}
    message = FakeMessage(json.dumps(record).encode(), TOPICS.device_command_acks)
    kinds = {TOPICS.device_command_acks: "acks"}
    batch = batch_of([message], kinds, lambda msg, reason: None)  # type: ignore[list-item]
    assert [(a.ack.command_id, a.device_id) for a in batch.acks] == [("c1", "d9")]


def test_a_record_the_store_refuses_is_left_out_and_the_rest_written() -> None:
    store = memory_store()
    materialiser = Materialiser.__new__(Materialiser)  # no consumer: its write step alone
    materialiser.store, materialiser.metrics = store, Metrics()
    dead: list[tuple[object, str]] = []
    materialiser.dead = lambda msg, reason: dead.append((msg, reason))  # type: ignore[assignment]
    good = [make_alert("d1", 1, 1_000), make_alert("d2", 2, 2_000)]
    # a record the contract would now refuse, built past it: SQLite cannot hold its seq
    refused = make_alert("d3", 3, 3_000).model_copy(update={"seq": 2**64})
    source = FakeMessage(b"the record as it was read")
    materialiser._write(Batch(alerts=[good[0], refused, good[1]]), {id(refused): source})  # type: ignore[dict-item]
    assert [m for m, _ in dead] == [source]  # to the dead letters, with the reason
    assert dead[0][1].startswith("the store refuses it: OverflowError")
    with store.session() as session:
        stored = session.execute(text("SELECT device_id FROM alerts ORDER BY device_id"))
        assert [row[0] for row in stored] == ["d1", "d2"]
    unwritable = materialiser.metrics.skipped.labels(topic="unwritable:alerts")
    assert unwritable._value.get() == 1


def test_a_store_that_is_down_fails_the_poll_to_be_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    materialiser = Materialiser.__new__(Materialiser)
    materialiser.store, materialiser.metrics = memory_store(), Metrics()

    def down(*args: object) -> None:
        raise OperationalError("INSERT", {}, Exception("connection refused"))

    monkeypatch.setattr(materialiser_module, "write", down)
    with pytest.raises(OperationalError):
        materialiser._write(Batch(alerts=[make_alert("d1", 1, 1_000)]))


def test_the_alert_contract_bounds_seq() -> None:
    alert = make_alert("d1", 1, 1_000).model_dump()
    with pytest.raises(ValidationError):
        Alert.model_validate({**alert, "seq": 2**63})
    refused: list[object] = []
    too_big = json.dumps({**alert, "seq": 2**63}).encode()
    message = FakeMessage(too_big)
    assert batch_of([message], KINDS, lambda m, r: refused.append(m)).alerts == []  # type: ignore[list-item]
    assert refused == [message]


def test_a_bad_telemetry_record_is_left_to_the_scorer_to_dead_letter() -> None:
    materialiser = Materialiser.__new__(Materialiser)
    materialiser.metrics = Metrics()
    materialiser.kinds = {**KINDS, TOPICS.telemetry_raw: "telemetry"}
    dead: list[object] = []
    materialiser.dead = lambda msg, reason: dead.append(msg)  # type: ignore[assignment]
    bad_reading, bad_alert = FakeMessage(b"{", TOPICS.telemetry_raw), FakeMessage(b"{")
    batch_of([bad_reading, bad_alert], materialiser.kinds, materialiser._refused)  # type: ignore[list-item]
    assert dead == [bad_alert]  # the reading: counted and logged, one dead letter (the scorer's)
    skipped = materialiser.metrics.skipped.labels(topic=TOPICS.telemetry_raw)
    assert skipped._value.get() == 1


def test_a_tombstone_decodes_with_its_sources_kept_to_the_records_read() -> None:
    model = FakeMessage(encode_device("d2", PARAMS, 9).encode(), TOPICS.model_params, b"d2")
    tombstone = FakeMessage(None, TOPICS.model_params, b"d1")  # type: ignore[arg-type]
    sources: dict[int, object] = {}
    batch = batch_of([tombstone, model], KINDS, lambda m, r: None, sources)  # type: ignore[list-item, arg-type]
    assert batch.forgotten == ["d1"]
    assert sources == {id(batch.models[0]): model}
