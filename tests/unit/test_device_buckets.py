"""The trainer's buckets of devices: their state value, seeding with the highest version, and
one bucket's step (each device learns its own readings, exactly as alone)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.model_params import encode_device
from fleetwatch.models import params
from fleetwatch.models.batch import Batch
from fleetwatch.models.errors import ParamsError
from fleetwatch.models.registry import Tuning
from fleetwatch.streaming.trainer.bucket_state import WarmBuckets, decode, encode, merge_newer
from fleetwatch.streaming.trainer.learning import detector_of, learn_device
from fleetwatch.streaming.trainer.processor import FAILED, learn_bucket, seeds


def frame(seed: int, start: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.repeat((start + np.arange(n, dtype=np.int64)) * 60_000, 2)
    metric = np.tile(np.array(["temperature", "humidity"], dtype=object), n)
    values = np.where(metric == "temperature", 21.0, 50.0) + rng.normal(0, 0.5, 2 * n)
    return pd.DataFrame({"event_ms": t, "metric": metric, "value": values})


def test_a_bucket_state_round_trips_and_a_foreign_value_is_refused() -> None:
    bucket = {"b": '{"version":1}', "a": '{"x":"\\"quoted\\""}'}
    assert decode(encode(bucket)) == bucket
    assert decode(None) == {}
    with pytest.raises(ParamsError):
        decode(json.dumps({"a": {"version": 1}}))


def test_each_device_of_a_bucket_learns_as_it_would_alone() -> None:
    first = {"d1": learn_device(None, frame(1, 0, 120)), "d2": None}
    bucket = {k: v for k, v in first.items() if v is not None}
    batches = [("d1", Batch.of(frame(2, 120, 20))), ("d2", Batch.of(frame(3, 0, 20)))]
    rows = learn_bucket(bucket, batches)
    assert list(rows["device_id"]) == ["d1", "d2"]
    assert list(rows["version"]) == [2, 1]
    assert list(rows["batch_from_ms"]) == [120 * 60_000, 0]
    assert list(rows["batch_to_ms"]) == [139 * 60_000, 19 * 60_000]
    for device_id, seed, start in (("d1", 2, 120), ("d2", 3, 0)):
        alone = learn_device(first[device_id], frame(seed, start, 20))
        assert bucket[device_id] == alone
        record = json.loads(str(rows.set_index("device_id").loc[device_id, "value"]))
        assert record["params"] == json.loads(str(alone))
    assert learn_bucket(bucket, []).empty


def test_a_device_learns_at_most_max_metrics_names_those_it_knows_first() -> None:
    bucket = {"d1": str(learn_device(None, frame(1, 0, 120)))}  # temperature, humidity
    rng = np.random.default_rng(5)
    flood = pd.DataFrame(
        {
            "event_ms": np.repeat(np.arange(120, 140, dtype=np.int64) * 60_000, 4),
            "metric": np.tile(np.array(["zz", "temperature", "aa", "humidity"], object), 20),
            "value": rng.normal(21.0, 0.5, 80),
        }
    )
    learn_bucket(bucket, [("d1", Batch.of(flood))], max_metrics=3)
    # the two it knew, then the first new name in time order ("zz" before "aa")
    assert sorted(detector_of(bucket["d1"]).learned_metrics()) == ["humidity", "temperature", "zz"]
    learn_bucket(bucket, [("d1", Batch.of(flood))], max_metrics=4)
    assert len(detector_of(bucket["d1"]).learned_metrics()) == 4


def hyper(text: str, name: str) -> dict[str, float]:
    """The hyperparameter ``name`` of each member of a combined detector's parameters that
    has it."""
    members = json.loads(text)["hyper"]["detectors"]
    return {m["kind"]: m["hyper"][name] for m in members if name in m["hyper"]}


def test_a_new_device_starts_with_the_tuning_it_is_given_and_a_known_one_keeps_its_own() -> None:
    bucket = {"old": str(learn_device(None, frame(1, 0, 120)))}
    batches = [("old", Batch.of(frame(2, 120, 20))), ("new", Batch.of(frame(3, 0, 20)))]
    learn_bucket(bucket, batches, tuning=Tuning(false_alerts_per_day=3.0, new_normal_after_s=900))
    assert hyper(bucket["new"], "false_alerts_per_day") == {"seasonal": 3, "level": 3, "pca": None}
    assert hyper(bucket["new"], "adopt_s") == {"level": 900}
    assert hyper(bucket["old"], "false_alerts_per_day") == {"seasonal": 1, "level": 1, "pca": None}
    assert hyper(bucket["old"], "adopt_s") == {"level": 600}


def test_a_device_whose_learning_fails_is_left_as_it_was_and_the_others_learn() -> None:
    corrupt = '{"kind": "combined", "version": 3}'  # parameters no detector loads
    bucket = {"bad": corrupt, "d1": str(learn_device(None, frame(1, 0, 120)))}
    detectors: dict[str, object] = {}
    batches = [("bad", Batch.of(frame(4, 0, 20))), ("d1", Batch.of(frame(2, 120, 20)))]
    rows = learn_bucket(bucket, batches, detectors)  # type: ignore[arg-type]
    assert list(rows["device_id"]) == ["bad", "d1"]
    failed = rows.iloc[0]
    assert failed["version"] == FAILED  # counted, never written
    assert failed["value"] is None
    assert bucket["bad"] == corrupt
    assert "bad" not in detectors
    assert bucket["d1"] == learn_device(learn_device(None, frame(1, 0, 120)), frame(2, 120, 20))


def test_seeding_keeps_the_highest_version_per_device() -> None:
    one = learn_device(None, frame(1, 0, 12))
    two = learn_device(one, frame(1, 12, 12))
    assert one is not None
    assert two is not None
    records = pd.DataFrame(
        {
            "device_id": ["a", "a", "b", "c"],
            "value": [
                encode_device("a", two, 1),
                encode_device("a", one, 2),
                "{broken",
                encode_device("c", one, 3),
            ],
        }
    )
    bucket = {"c": two}
    merge_newer(bucket, seeds(records))
    assert bucket == {"a": two, "c": two}


def test_a_warm_bucket_learns_exactly_as_one_read_from_its_state_value() -> None:
    """Detectors kept between batches publish the bytes that parameters read back give."""
    warm, cold_value = WarmBuckets(), None
    value: str | None = None
    for step in range(4):
        batches = [(f"d{k}", Batch.of(frame(10 * k + step, 30 * step, 30))) for k in range(3)]
        bucket = warm.take(5, value)
        warm_rows = learn_bucket(bucket.texts, batches, bucket.detectors)
        value = encode(bucket.texts)
        warm.keep(5, value, bucket)
        cold = decode(cold_value)
        cold_rows = learn_bucket(cold, batches)
        cold_value = encode(cold)
        assert value == cold_value
        strip = [v[: v.index(',"published_ms"')] for v in warm_rows["value"]]
        assert strip == [v[: v.index(',"published_ms"')] for v in cold_rows["value"]]
        assert set(bucket.detectors) == {"d0", "d1", "d2"}


def test_a_warm_bucket_is_handed_out_once_and_only_for_the_value_it_wrote() -> None:
    warm = WarmBuckets()
    texts = {"d1": str(learn_device(None, frame(1, 0, 12)))}
    bucket = warm.take(1, encode(texts))
    learn_bucket(bucket.texts, [("d1", Batch.of(frame(1, 12, 12)))], bucket.detectors)
    value = encode(bucket.texts)
    warm.keep(1, value, bucket)
    assert warm.take(1, encode(texts)).detectors == {}  # another value: read from its text
    assert warm.take(1, value).detectors == {}  # taken above, so not kept any more
    warm.keep(1, value, bucket)
    again = warm.take(1, value)
    assert again.detectors is bucket.detectors
    assert again.texts == bucket.texts
    assert warm.take(2, None).texts == {}


def test_a_worker_keeps_only_the_buckets_of_the_partition_of_its_latest_task() -> None:
    warm = WarmBuckets()
    texts = {"d1": str(learn_device(None, frame(1, 0, 12)))}
    value = encode(texts)
    warm.enter(0)
    first, second = warm.take(1, value), warm.take(2, value)
    warm.keep(1, value, first)
    warm.keep(2, value, second)
    warm.enter(0)  # the same partition's next task: both still kept
    assert len(warm) == 2
    assert warm.take(1, value).detectors is first.detectors
    warm.keep(1, value, first)
    warm.enter(1)  # another partition's task: none of partition 0's buckets is kept
    assert len(warm) == 0
    assert warm.take(1, value).detectors is not first.detectors


@pytest.mark.parametrize("device_id", ["d1", "dé-1", "d\x7f", 'd\x01\n"\\', "\u2028"], ids=repr)
def test_a_bucket_state_is_the_standard_librarys_json(device_id: str) -> None:
    """msgspec writes the state value; its bytes are ``json.dumps``' (keys sorted, no spaces,
    non-ASCII and DEL escaped), whatever the device ids, and read back the same."""
    text = learn_device(None, frame(1, 0, 40))
    assert text is not None
    bucket = {device_id: text, "a": '{"x":"\\"quoted\\""}', "z": "{}"}
    value = encode(bucket)
    assert value == json.dumps(dict(sorted(bucket.items())), separators=(",", ":"))
    assert decode(value) == bucket


def test_parameters_text_is_read_as_the_standard_library_reads_it() -> None:
    text = learn_device(None, frame(1, 0, 200))
    assert text is not None
    assert json.dumps(params.loads(text)) == json.dumps(json.loads(text))
    # what msgspec refuses is read (or refused) by the standard parser
    assert params.loads('{"name":"\\ud800","v":NaN}')["name"] == "\ud800"
    with pytest.raises(ParamsError):
        params.loads("[1, 2]")
    with pytest.raises(json.JSONDecodeError):
        params.loads("{")
    assert decode('{"d\\ud800":"{}"}') == {"d\ud800": "{}"}
