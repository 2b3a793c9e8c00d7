"""A device the scorer forgets (silent for ``expire_after``) leaves its compacted topics too: a
tombstone (its id as the key, no value) on ``device.state`` and on ``device.sessions``, and
only then — not when it falls silent, nor for a device that never published a record."""

from __future__ import annotations

from fleetwatch.contracts.model_params import encode_device
from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketState,
    MemoryStore,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.output import Role
from fleetwatch.streaming.scorer.processor import OUTPUT_COLUMNS, output_frame, topic_names
from tests.unit.test_device_scoring import T0
from tests.unit.test_scorer_isolation import STRICT, records

TOPICS = Settings().topics
PARAMS = '{"kind":"seasonal","schema":1,"version":1,"trained_from_ms":1,"trained_to_ms":2}'


def heard(device_id: str) -> tuple[BucketState, MemoryStore, int]:
    bucket, store = new_bucket(), MemoryStore()
    rows, texts = records(device_id, 1, 3, 0)
    batch = BucketBatch.of({device_id: rows}, (), {device_id: texts})
    score_bucket(bucket, batch, T0 - 1, T0, STRICT, store)
    last = bucket["devices"][device_id]["last_seen_ms"]
    assert last is not None
    return bucket, store, last


def test_a_forgotten_device_gets_a_tombstone_on_its_state_and_sessions_topics() -> None:
    bucket, store, last = heard("quiet")
    silent = expire_bucket(bucket, last + STRICT.session_gap_ms, T0, STRICT, store)
    assert silent.tombstones == []  # silent: its state says so, it is not gone
    assert {role for _, role, _ in silent.records} == {Role.STATE, Role.SESSIONS}

    gone = expire_bucket(bucket, last + STRICT.expire_after_ms, T0, STRICT, store)
    assert gone.forgotten == 1
    assert gone.tombstones == [("quiet", Role.STATE), ("quiet", Role.SESSIONS)]
    assert gone.records == []

    rows = output_frame(gone.records, topic_names(Settings()), tombstones=gone.tombstones)
    rows = rows.set_axis(OUTPUT_COLUMNS, axis=1)
    assert rows[["topic", "key"]].values.tolist() == [
        [TOPICS.device_state, "quiet"],
        [TOPICS.device_sessions, "quiet"],
    ]
    assert rows["value"].isna().all()  # tombstones: the Kafka sink writes no value
    assert rows["headers"].isna().all()


def test_a_device_never_seen_a_reading_of_is_forgotten_without_tombstones() -> None:
    """Parameters alone hold state, but no state record was ever published of the device."""
    bucket, store = new_bucket(), MemoryStore()
    record = encode_device("params-only", PARAMS, published_ms=T0)
    score_bucket(bucket, BucketBatch.of({}, [("params-only", record)]), T0, T0, STRICT, store)
    assert bucket["devices"]["params-only"]["last_seen_ms"] is None
    out = expire_bucket(bucket, T0 + STRICT.expire_after_ms, T0, STRICT, store)
    assert out.forgotten == 1
    assert out.tombstones == []
