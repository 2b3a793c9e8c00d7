"""The bucket's state value: each device pickled on its own and unpickled only when the batch
reads it, the timers and quarantines kept beside, and the earlier layout (every device inside
one pickle) read as well, scoring as it did."""

from __future__ import annotations

import json
import pickle

from fleetwatch.streaming.scorer.batch_counts import QUARANTINED, quarantined
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketOutput,
    BucketState,
    MemoryStore,
    arm_timer,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.bucket_value import (
    FIELDS,
    Devices,
    dump_bucket,
    load_bucket,
    pack,
    unpack,
)
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.readings import Rows
from tests.unit.test_device_scoring import POLICY, T0, frame, json_types_only


def scored(devices: dict[str, int]) -> BucketState:
    """A bucket whose devices (id → first seq) each scored three readings."""
    bucket = new_bucket()
    readings = {
        d: Rows.of(frame([(s + i, T0 + i * 1000, 21.0 + i) for i in range(3)]))
        for d, s in devices.items()
    }
    score_bucket(bucket, BucketBatch(readings), 0, T0, POLICY, MemoryStore())
    return bucket


def states(bucket: BucketState) -> dict[str, DeviceScoringState]:
    return {d: bucket["devices"][d] for d in sorted(bucket["devices"])}


def old_layout(bucket: BucketState) -> bytes:
    """The bucket as the value held it before each device had a pickle of its own."""
    value = {"devices": states(bucket), "timer_ms": bucket["timer_ms"], "fleet": bucket["fleet"]}
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def records(out: BucketOutput) -> list[tuple[str, str, str]]:
    return [(d, str(role), value) for d, role, value in out.records]


def test_a_device_state_round_trips_through_its_values_in_field_order() -> None:
    state = scored({"a": 1})["devices"]["a"]
    assert tuple(state) == FIELDS
    again = unpack(pack(state))
    assert again == state
    assert list(again) == list(state)
    assert json_types_only(again) == []


def test_the_value_round_trips_and_holds_only_json_types_and_bytes() -> None:
    bucket = scored({"a": 1, "b": 5, "c": 9})
    bucket["fleet"] = {"pumps": 3}
    value = pickle.loads(dump_bucket(bucket))
    assert set(value["devices"]) == {"a", "b", "c"}
    assert all(type(v) is bytes for v in value["devices"].values())
    assert json_types_only({k: v for k, v in value.items() if k != "devices"}) == []
    again = load_bucket(dump_bucket(bucket))
    assert states(again) == states(bucket)
    assert (again["timer_ms"], again["fleet"]) == (bucket["timer_ms"], bucket["fleet"])
    assert again["devices"].timers() == bucket["devices"].timers() != {}


def test_only_the_devices_a_batch_reads_are_unpickled_and_pickled_again() -> None:
    saved = dump_bucket(scored({"a": 1, "b": 5}))
    value = pickle.loads(saved)
    value["devices"]["b"] = b"not a pickle"  # never read: a batch of device a alone succeeds
    bucket = load_bucket(pickle.dumps(value))
    batch = BucketBatch({"a": Rows.of(frame([(4, T0 + 4000, 22.0)]))})
    out = score_bucket(bucket, batch, 0, T0, POLICY, MemoryStore(), pickle.dumps(value))
    assert out.scored == 1
    assert out.failed == 0
    stored = pickle.loads(dump_bucket(bucket))["devices"]
    assert stored["b"] == b"not a pickle"
    assert unpack(stored["a"])["last_seq"] == 4


def test_timers_and_quarantines_follow_the_devices_read_without_unpickling_the_rest() -> None:
    bucket = load_bucket(dump_bucket(scored({"a": 1, "b": 5})))
    devices = bucket["devices"]
    before = devices.timers()
    devices["a"]["timer_ms"] = T0 + 1
    devices["a"]["quarantined_until_ms"] = T0 + 10_000
    assert devices.timers() == {**before, "a": T0 + 1}
    assert devices.quarantined_until() == {"a": T0 + 10_000}
    assert quarantined(7, bucket, T0) == {f"{QUARANTINED}7": 1}
    assert quarantined(7, bucket, T0 + 10_000) == {f"{QUARANTINED}7": 0}
    again = load_bucket(dump_bucket(bucket))["devices"]
    assert again.timers() == {**before, "a": T0 + 1}
    assert again.quarantined_until() == {"a": T0 + 10_000}
    assert arm_timer({"devices": again, "timer_ms": None, "fleet": {}}) == T0 + 1


def test_devices_behave_as_a_mapping_and_forget_a_device_whole() -> None:
    devices = load_bucket(dump_bucket(scored({"a": 1, "b": 5})))["devices"]
    devices["c"] = devices["a"]
    assert sorted(devices) == ["a", "b", "c"]
    assert len(devices) == 3
    assert "b" in devices
    assert "z" not in devices
    assert devices.get("z") is None
    del devices["b"]
    assert sorted(devices) == ["a", "c"]
    assert "b" not in devices.timers()
    assert isinstance(devices, Devices)
    assert devices == {"a": devices["a"], "c": devices["a"]}


def test_a_value_of_the_earlier_layout_scores_as_the_new_one_and_moves_to_it() -> None:
    bucket = scored({"a": 1, "b": 5, "c": 9})
    old, new = load_bucket(old_layout(bucket)), load_bucket(dump_bucket(bucket))
    assert states(old) == states(new)
    later = T0 + 2 * POLICY.session_gap_ms
    batch = BucketBatch({"b": Rows.of(frame([(6, later, 40.0)]))})
    outs = [score_bucket(b, batch, 0, later, POLICY, MemoryStore()) for b in (old, new)]
    assert records(outs[0]) == records(outs[1]) != []
    assert arm_timer(old) == arm_timer(new) is not None
    fired = [expire_bucket(b, later + 1, later, POLICY, MemoryStore()) for b in (old, new)]
    assert records(fired[0]) == records(fired[1])
    silent = [json.loads(v)["status"] for _, role, v in records(fired[0]) if role == "state"]
    assert silent == ["silent", "silent"]  # a and c: b's reading keeps it awake
    moved = pickle.loads(dump_bucket(old))["devices"]
    assert all(type(v) is bytes for v in moved.values())
    assert states(load_bucket(dump_bucket(old))) == states(new)
