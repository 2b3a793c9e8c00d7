"""A reading on ``telemetry.raw`` has one field list, the contract's: the parser the scorer and
the trainer share reads exactly its fields."""

from __future__ import annotations

from fleetwatch.contracts.telemetry import RECORD_FIELDS, TelemetryRecord
from fleetwatch.streaming.scorer import readings


def test_the_field_list_is_the_records() -> None:
    assert list(RECORD_FIELDS) == list(TelemetryRecord.model_fields)
    assert RECORD_FIELDS["seq"] is int
    assert RECORD_FIELDS["metrics"] == dict[str, float]
    assert RECORD_FIELDS["firmware"] == str | None


def test_the_scorers_parser_reads_the_contracts_fields() -> None:
    integers = tuple(n for n, t in RECORD_FIELDS.items() if t is int and n != "v")
    texts = tuple(n for n, t in RECORD_FIELDS.items() if t == str | None)
    assert integers == readings.INTEGERS
    assert (*integers, *texts) == readings.READING
    # the rest: the version, the record key and the metrics (a row each)
    assert set(RECORD_FIELDS) - set(readings.READING) == {"v", "device_id", "metrics"}


def test_the_scorer_parses_what_the_gateway_writes() -> None:
    record = TelemetryRecord(
        device_id="d1",
        seq=4,
        event_ms=1_000,
        device_event_ms=990,
        device_sent_ms=995,
        received_ms=1_010,
        clock_offset_ms=10,
        metrics={"t": 1.5, "h": 40.0},
        firmware="1.2",
    )
    parsed = readings.readings_by_device(["d1"], [record.model_dump_json(exclude_none=True)])
    assert parsed.skipped == 0
    rows = parsed.by_device["d1"]
    for name in readings.READING:
        assert list(rows[name]) == [getattr(record, name)] * 2
    assert list(rows["metric"]) == ["t", "h"]
