"""A device silent for ``score.expire_after_s`` leaves the trainer's state, its parameters are
withdrawn from ``model.params`` with a tombstone, and every reader of that topic takes the
tombstone: the scorer scores it by the baseline again, the API drops its model row, seeding
skips it; a reading after that starts it afresh at version 1."""

from __future__ import annotations

import json

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.model_params import encode_device
from fleetwatch.contracts.settings import TopicSettings
from fleetwatch.models import params
from fleetwatch.serving.materialiser import batch_of
from fleetwatch.serving.store.ingest import write
from fleetwatch.serving.tables import ModelRow
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    MemoryStore,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.trainer.expiry import arm_timer, forget_due, note
from fleetwatch.streaming.trainer.learning import learn_device
from fleetwatch.streaming.trainer.processor import (
    UPDATE_COLUMNS,
    _bucket_trainer,
    latest_params,
    seeds,
)
from fleetwatch.streaming.trainer.seen_state import decode_seen, encode_seen, new_seen
from tests.unit.api_support import memory_store
from tests.unit.test_api_materialiser import FakeMessage
from tests.unit.test_device_buckets import frame
from tests.unit.test_scorer_isolation import STRICT, records

DAY = 86_400_000
EXPIRE = 30 * DAY
T0 = 1_763_700_000_000


def test_the_timer_waits_for_the_earliest_device_and_forgets_only_those_due() -> None:
    seen = new_seen()
    note(seen, [("a", T0), ("b", T0 + 5 * DAY)])
    note(seen, [("a", T0 - DAY)])  # an older reading does not move "last heard" back
    assert seen["devices"] == {"a": T0, "b": T0 + 5 * DAY}
    assert arm_timer(seen, EXPIRE) == T0 + EXPIRE
    assert arm_timer(seen, EXPIRE) is None  # registered already
    assert decode_seen(encode_seen(seen)) == seen

    texts = {"a": "pa", "b": "pb"}
    assert forget_due(texts, seen, T0 + EXPIRE - 1, EXPIRE) == []
    assert seen["timer_ms"] is None  # the timer that fired is spent
    assert forget_due(texts, seen, T0 + EXPIRE, EXPIRE) == ["a"]
    assert texts == {"b": "pb"}
    assert seen["devices"] == {"b": T0 + 5 * DAY}
    assert arm_timer(seen, EXPIRE) == T0 + 5 * DAY + EXPIRE
    forget_due(texts, seen, T0 + 5 * DAY + EXPIRE, EXPIRE)
    assert texts == {}
    assert arm_timer(seen, EXPIRE) is None  # nothing left to wait for


def packed(device_id: str, start_min: int, n: int, seed: int = 1) -> pd.DataFrame:
    """One packed row (the trainer's operator input) of ``n`` readings a minute apart."""
    long = frame(seed, start_min, n)
    event_ms = (T0 + long["event_ms"]).to_numpy()
    return pd.DataFrame(
        {
            "device_id": [device_id],
            "seq": [long["event_ms"].to_numpy() // 60_000],
            "device_ms": [event_ms],
            "event_ms": [event_ms],
            "metric": [long["metric"].to_numpy()],
            "value": [long["value"].to_numpy()],
        }
    )


def watermark(tester: TwsTester, ms: int) -> pd.DataFrame:
    """Move the watermark to ``ms``: what the timers that fire emit."""
    fired = tester.setWatermark(ms)
    assert isinstance(fired, pd.DataFrame)
    return fired


def trainer() -> TwsTester:
    return TwsTester(
        _bucket_trainer(EXPIRE),
        timeMode="EventTime",
        eventTimeExtractor=lambda row: int(max(row["event_ms"])),
    )


def test_the_trainer_forgets_a_silent_device_with_a_tombstone_and_relearns_it_from_version_1() -> (
    None
):
    tester = trainer()
    first = tester.testInPandas(7, pd.concat([packed("a", 0, 20), packed("b", 0, 20, 2)]))
    assert sorted(first["device_id"]) == ["a", "b"]
    assert set(first["version"]) == {1}
    b_later = T0 + 10 * DAY
    watermark(tester, b_later - 60_000)
    again = tester.testInPandas(7, packed("b", 10 * 24 * 60, 5, 3))
    assert list(again["device_id"]) == ["b"]
    assert list(again["version"]) == [2]

    a_last = T0 + 19 * 60_000  # the newest reading of "a"
    assert watermark(tester, a_last + EXPIRE - 1).empty
    fired = watermark(tester, a_last + EXPIRE)
    assert list(fired.columns) == list(UPDATE_COLUMNS)
    assert list(fired["device_id"]) == ["a"]
    assert fired["value"].isna().all()  # a tombstone: the device's key, no value
    kept = tester.peekValueState("params", 7)
    assert kept is not None
    assert set(json.loads(kept[0])) == {"b"}
    assert set(json.loads(kept[1])["devices"]) == {"b"}

    back = tester.testInPandas(7, packed("a", 31 * 24 * 60, 20))
    assert list(back["device_id"]) == ["a"]
    assert list(back["version"]) == [1]  # afresh, not on top of what it had learned

    b_gone = b_later + 4 * 60_000 + EXPIRE
    assert list(watermark(tester, b_gone)["device_id"]) == ["b"]


def test_seeding_skips_what_came_before_a_tombstone() -> None:
    one = learn_device(None, frame(1, 0, 12))
    two = learn_device(one, frame(1, 12, 12))
    fresh = learn_device(None, frame(2, 0, 12))
    assert one is not None
    assert two is not None
    assert fresh is not None
    assert latest_params("d", [encode_device("d", two, 1), None]) is None
    after = [encode_device("d", two, 1), None, encode_device("d", fresh, 2)]
    assert latest_params("d", after) == fresh
    records = pd.DataFrame(
        {
            "device_id": ["a", "b", "a", "b", "a"],
            "value": [None, encode_device("b", one, 1), encode_device("a", fresh, 3), None, None],
            "offset": [5, 1, 9, 4, 2],  # in offset order: a: tombstone, fresh; b: one, tombstone
        }
    )
    assert dict(seeds(records)) == {"a": fresh}


def test_the_seeded_devices_expire_from_what_their_parameters_learned() -> None:
    two = learn_device(learn_device(None, frame(1, 0, 12)), frame(1, 12, 12))
    assert two is not None
    trained_to = params.loads(two)["trained_to_ms"]
    tester = TwsTester(
        _bucket_trainer(EXPIRE),
        initialStatePandas=[
            (3, pd.DataFrame({"device_id": ["s"], "value": [encode_device("s", two, 1)]}))
        ],
        timeMode="EventTime",
        eventTimeExtractor=lambda row: int(max(row["event_ms"])),
    )
    assert watermark(tester, trained_to + EXPIRE - 1).empty
    assert list(watermark(tester, trained_to + EXPIRE)["device_id"]) == ["s"]


def test_the_scorer_drops_the_parameters_of_a_device_the_trainer_forgot() -> None:
    bucket, store = new_bucket(), MemoryStore()
    old = learn_device(None, frame(1, 0, 30))
    fresh = learn_device(None, frame(2, 0, 30))
    assert old is not None
    assert fresh is not None
    for version in range(1, 6):
        value = encode_device("d", old, 1).replace('"version":1', f'"version":{version}')
        score_bucket(bucket, BucketBatch.of({}, [("d", value)]), T0, T0, STRICT, store)
    assert bucket["devices"]["d"]["params_version"] == 5

    rows, texts = records("d", 1, 2, 0)
    tombstone = BucketBatch.of({"d": rows}, [("d", None)], {"d": texts})
    score_bucket(bucket, tombstone, T0 - 1, T0, STRICT, store)
    assert bucket["devices"]["d"]["params_version"] == 0  # the baseline again
    assert store.params("d") is None

    # version 1 after the tombstone is taken, though the device's versions had reached 5;
    # in one batch, only the records after the tombstone count
    stale = encode_device("d", old, 1).replace('"version":1', '"version":5')
    batch = BucketBatch.of({}, [("d", stale), ("d", None), ("d", encode_device("d", fresh, 2))])
    score_bucket(bucket, batch, T0, T0, STRICT, store)
    assert bucket["devices"]["d"]["params_version"] == 1
    assert store.params("d") == json.dumps(json.loads(fresh), separators=(",", ":"))


def test_the_api_drops_the_model_of_a_device_the_trainer_forgot() -> None:
    topics = TopicSettings()
    kinds = {topics.model_params: "models"}

    def p(version: int) -> str:
        header = {"kind": "seasonal", "schema": 1, "trained_from_ms": 1, "trained_to_ms": 2}
        return json.dumps(header | {"version": version})

    store = memory_store()

    def materialise(*values: bytes | None) -> None:
        messages = [FakeMessage(v, topics.model_params, b"d1") for v in values]  # type: ignore[arg-type]
        skipped: list[str] = []
        batch = batch_of(messages, kinds, skipped.append)  # type: ignore[arg-type]
        assert skipped == []
        with store.session() as session, session.begin():
            write(session, batch, now_ms())

    def version() -> int | None:
        with store.session() as session:
            row = session.get(ModelRow, "d1")
            return None if row is None else int(row.version)

    materialise(encode_device("d1", p(9), 5).encode())
    assert version() == 9
    materialise(None)
    assert version() is None
    materialise(encode_device("d1", p(9), 5).encode())
    materialise(encode_device("d1", p(10), 5).encode(), None, encode_device("d1", p(1), 6).encode())
    assert version() == 1  # a new life's version 1 is the model now
