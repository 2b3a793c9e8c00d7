"""The trainer's per-device step, called directly: versions, no-change, round trip, the record
format, and the anomaly policy (a long level shift becomes the new normal when, and only when,
the device was started with a time for it)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.model_params import decode, encode_device
from fleetwatch.models import params
from fleetwatch.models.batch import Batch
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.registry import CombinedDetector, Tuning, default_detector, load_params
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.streaming.trainer.learning import canonical, learn_device, learn_update
from fleetwatch.streaming.trainer.processor import latest_params

INTERVAL_MS = 5 * 60_000
PER_DAY = 288


def readings(
    start: int, n: int, shift: float = 0.0, seed: int = 0, humidity_shift: float | None = None
) -> pd.DataFrame:
    """Long-form readings every 5 minutes: a daily temperature cycle and a humidity that
    follows it, plus noise; ``shift`` moves both levels (humidity by ``humidity_shift`` when
    given)."""
    rng = np.random.default_rng([seed, start])
    i = np.arange(start, start + n)
    daily = np.sin(2 * np.pi * i / PER_DAY)
    t = np.repeat(i.astype(np.int64) * INTERVAL_MS, 2)
    values = np.empty(2 * n)
    values[0::2] = 21.0 + 2.0 * daily + shift + rng.normal(0.0, 0.3, n)
    h_shift = shift if humidity_shift is None else humidity_shift
    values[1::2] = 50.0 - 3.0 * daily + h_shift + rng.normal(0.0, 0.5, n)
    metric = np.tile(np.array(["temperature", "humidity"], dtype=object), n)
    return pd.DataFrame({"event_ms": t, "metric": metric, "value": values})


def train(
    previous: str | None,
    start: int,
    n: int,
    batch: int,
    shift: float = 0.0,
    humidity_shift: float | None = None,
) -> str:
    """Learn ``n`` readings from ``start`` in mini-batches of ``batch``, as the job would."""
    current = previous
    for lo in range(start, start + n, batch):
        part = readings(lo, min(batch, start + n - lo), shift, humidity_shift=humidity_shift)
        updated = learn_device(current, part)
        assert updated is not None
        current = updated
    assert current is not None
    return current


def test_a_new_device_starts_from_the_default_detector_at_version_one() -> None:
    first = learn_device(None, readings(0, 12))
    assert first is not None
    p = json.loads(first)
    assert (p["kind"], p["version"]) == (default_detector().kind, 1)
    assert (p["trained_from_ms"], p["trained_to_ms"]) == (0, 11 * INTERVAL_MS)


def test_versions_increase_by_one_per_batch_and_the_range_widens() -> None:
    one = learn_device(None, readings(0, 12))
    two = learn_device(one, readings(12, 12))
    assert one is not None
    assert two is not None
    p = json.loads(two)
    assert p["version"] == 2
    assert (p["trained_from_ms"], p["trained_to_ms"]) == (0, 23 * INTERVAL_MS)


def test_an_empty_batch_changes_nothing() -> None:
    one = learn_device(None, readings(0, 12))
    assert learn_device(one, readings(0, 0)) is None
    assert learn_device(None, readings(0, 0)) is None


def test_parameters_round_trip_and_learning_is_incremental() -> None:
    """Batch by batch through JSON equals one detector learning the same batches in memory."""
    via_json = train(None, 0, 3 * PER_DAY, 24)
    detector = default_detector()
    for lo in range(0, 3 * PER_DAY, 24):
        detector.learn(readings(lo, 24))
    assert via_json == params.dumps(detector.to_params())
    assert params.dumps(load_params(json.loads(via_json)).to_params()) == via_json


def test_without_a_new_normal_time_a_long_shift_of_one_sensor_stays_an_alert() -> None:
    """Two normal days, then a whole day of temperature shifted by +8 (humidity normal), for a
    device started with ``new_normal_after_s`` off: the trainer keeps the shifted readings out
    of the baseline (the detector's own pre-batch alerts), so they still alert at the end and
    the expected level has not moved to the fault."""
    never = params.dumps(default_detector(Tuning(new_normal_after_s=None)).to_params())
    warm = train(never, 0, 2 * PER_DAY, 12)
    faulty = train(warm, 2 * PER_DAY, PER_DAY, 12, shift=8.0, humidity_shift=0.0)
    after = load_params(json.loads(faulty))
    assert json.loads(faulty)["version"] == json.loads(warm)["version"] + PER_DAY // 12

    probe = readings(3 * PER_DAY, 24, shift=8.0, humidity_shift=0.0)
    temperature = np.asarray(probe["metric"] == "temperature")
    scores = after.score(probe)
    assert scores.alert[temperature].mean() > 0.9
    expected = np.asarray(scores.expected, dtype=float)[temperature]
    assert np.all(np.abs(expected - np.asarray(probe["value"])[temperature]) > 5.0)

    # back to normal: the level detector's average lets go of the fault within its lag (about
    # 2 / lam readings), and nothing alerts after that
    back = readings(3 * PER_DAY, 96, seed=7)
    normal = after.score(back)
    late = np.asarray(back["event_ms"]) >= int(back["event_ms"].min()) + 20 * INTERVAL_MS
    assert not normal.alert[late].any()
    assert normal.alert.mean() < 0.15

    # the control: the same day learned without the gate has become normal
    ungated = load_params(json.loads(warm))
    for lo in range(2 * PER_DAY, 3 * PER_DAY, 12):
        batch = readings(lo, 12, shift=8.0, humidity_shift=0.0)
        ungated.learn(batch, exclude=np.zeros(len(batch), dtype=bool))
    assert ungated.score(probe).alert[temperature].mean() < 0.5


def test_by_default_the_level_member_takes_a_lasting_shift_as_its_new_normal() -> None:
    """The same day-long shift, with the default ``new_normal_after_s`` (600 s, and at least 30
    readings: 2.5 hours here): the level member no longer alerts on it, and alerts on the
    return from it."""
    warm = train(None, 0, 2 * PER_DAY, 12)
    after = load_params(json.loads(train(warm, 2 * PER_DAY, PER_DAY, 12, 8.0, 0.0)))
    assert isinstance(after, CombinedDetector)
    level = next(m for m in after.detectors if m.kind == "level")
    probe = readings(3 * PER_DAY, 24, shift=8.0, humidity_shift=0.0)
    temperature = np.asarray(probe["metric"] == "temperature")
    assert not level.score(probe).alert[temperature].any()
    back = readings(3 * PER_DAY, 48, seed=7)
    returned = level.score(back).alert[np.asarray(back["metric"] == "temperature")]
    assert returned[24:].all(), "once its average has moved"


def test_a_lasting_new_state_of_the_whole_device_is_learned() -> None:
    """Every metric moves at once and stays (a machine switched to another operating state):
    alerted on at first, learned once all metrics have alerted for ``adapt_s``."""
    warm = train(None, 0, 2 * PER_DAY, 12)
    first = load_params(json.loads(warm)).score(readings(2 * PER_DAY, 12, shift=8.0))
    assert first.alert.mean() > 0.9
    moved = train(warm, 2 * PER_DAY, PER_DAY, 12, shift=8.0)
    probe = readings(3 * PER_DAY, 24, shift=8.0)
    assert load_params(json.loads(moved)).score(probe).alert.mean() < 0.1


def machine(start_s: int, n: int, on: bool, seed: int) -> pd.DataFrame:
    """A machine's vibration and speed every second: running (4 ± 1, 1480 ± 4 rpm) or
    stopped (0.15 + 0.03·|noise|, 0 rpm), like the simulator's vibration sensor."""
    rng = np.random.default_rng([seed, start_s])
    noise = rng.normal(size=(2, n))
    rms = 4.0 + 1.0 * noise[0] if on else 0.15 + 0.03 * np.abs(noise[0])
    rpm = 1480.0 + 4.0 * noise[1] if on else np.zeros(n)
    t = np.repeat(np.arange(start_s, start_s + n, dtype=np.int64) * 1000, 2)
    values = np.column_stack([rms, rpm]).ravel()
    metric = np.tile(np.array(["vibration_rms", "rpm"], dtype=object), n)
    return pd.DataFrame({"event_ms": t, "metric": metric, "value": values})


def test_a_new_state_is_learned_until_every_metric_is_calm_not_until_the_first_is() -> None:
    """A machine that starts for the first time: once it has run for ``adapt_s`` its readings
    are learned, and they go on being learned while any metric still alerts. The vibration's
    band takes in the running level after a few readings, the speed's after many more; were
    the learning to stop with the first calm metric, the speed would alert for as long as the
    machine ran."""
    starts = 193  # not on a batch boundary: the first batch learned holds only 7 readings
    readings = pd.concat([machine(0, starts, False, 0), machine(starts, 1400 - starts, True, 0)])
    p: str | None = None
    for lo in range(0, 1400, 10):
        p = learn_device(p, readings[readings.event_ms // 10_000 == lo // 10])
    assert p is not None
    running = load_params(json.loads(p)).score(machine(1400, 120, on=True, seed=100))
    assert running.alert.mean() < 0.02


def one_metric(start_s: int, n: int, level: float, metric: str = "x") -> pd.DataFrame:
    rng = np.random.default_rng(start_s)
    t = np.arange(start_s, start_s + n, dtype=np.int64) * 1000
    return pd.DataFrame({"event_ms": t, "metric": metric, "value": level + rng.normal(size=n)})


@pytest.mark.parametrize("partner", [None, "y"])
def test_a_lasting_change_of_one_metric_is_never_learned(partner: str | None) -> None:
    """A device of one metric, or one whose batches lately carry only the shifted metric: its
    lasting change is one sensor's, not the whole device's, and stays out however long. (Its
    history is 20 minutes: a younger stream's threshold, drawn toward a heavy tail, sits close
    to a shift of 12 standard deviations, some of whose readings then fall under it and are
    learned.)"""
    p: str | None = None
    for lo in range(0, 1200, 10):
        batch = one_metric(lo, 10, 0.0)
        if partner is not None:
            batch = pd.concat([batch, one_metric(lo, 10, 50.0, partner)])
        p = learn_device(p, batch.sort_values("event_ms", kind="stable"))
    for lo in range(1200, 2400, 10):
        p = learn_device(p, one_metric(lo, 10, 12.0))
    assert p is not None
    detector = load_params(json.loads(p))
    assert isinstance(detector, CombinedDetector)
    assert detector.adapting_until is None
    assert detector.score(one_metric(2400, 60, 12.0)).alert.mean() > 0.9


def test_the_record_lifts_the_header_out_of_the_parameters() -> None:
    p = learn_device(None, readings(0, 12))
    assert p is not None
    record = json.loads(encode_device("d7", p, 123))
    assert set(record) == {
        "device_id",
        "kind",
        "schema",
        "version",
        "trained_from_ms",
        "trained_to_ms",
        "params",
        "published_ms",
    }
    assert (record["device_id"], record["version"], record["published_ms"]) == ("d7", 1, 123)
    assert record["params"] == json.loads(p)
    assert decode(encode_device("d7", p, 123))["params"] == json.loads(p)


def test_the_seed_is_the_highest_version_and_foreign_records_are_skipped() -> None:
    one = learn_device(None, readings(0, 12))
    two = learn_device(one, readings(12, 12))
    assert one is not None
    assert two is not None
    values = [
        encode_device("d", two, 2),
        "{broken",
        json.dumps({"x": 1}),
        encode_device("d", one, 3),
    ]
    assert latest_params("d", values) == two
    assert latest_params("d", ["{}"]) is None
    with pytest.raises(ParamsRecordError):
        decode(json.dumps({"params": 3}))


def test_publishing_with_the_header_gives_the_same_bytes() -> None:
    one = learn_update(None, readings(0, 12))
    assert one is not None
    two = learn_update(one.params_json, readings(12, 12))
    assert two is not None
    for update in (one, two):
        fast = encode_device('d"7,"published_ms":1', update.params_json, 123, update.header)
        assert fast == encode_device('d"7,"published_ms":1', update.params_json, 123)


def test_a_batch_progress_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.streaming.query_loop import log_progress

    progress = {
        "batchId": 3,
        "numInputRows": 200,
        "durationMs": {"triggerExecution": 900, "addBatch": 700},
        "stateOperators": [{"commitTimeMs": 40, "numRowsTotal": 64, "memoryUsedBytes": 5_000_000}],
    }
    with caplog.at_level("INFO", logger="fleetwatch.streaming.query_loop"):
        assert log_progress(None, None, logging.INFO) is None
        assert log_progress(progress, None, logging.INFO) == 3
        assert log_progress(progress, 3, logging.INFO) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "batch 3: 200 rows, 900 ms (addBatch=700); state ?: commit 40 ms, updates ? ms, "
        "64 rows, 5 MB"
    ]


def test_learning_from_the_gates_judgement_gives_the_parameters_of_a_fresh_one() -> None:
    """The level and seasonal members learn a batch from what the gate of ``learn`` judged of it
    (not judged again): the same parameters, float for float, as a batch judged afresh, through
    alerts, a lasting shift of one metric and a move of the whole device."""
    gated = load_params(json.loads(train(None, 0, 2 * PER_DAY, 12)))
    fresh = load_params(json.loads(params.dumps(gated.to_params())))
    assert isinstance(gated, CombinedDetector)
    seasonal, level = gated.detectors[0], gated.detectors[1]
    assert isinstance(seasonal, SeasonalBaseline)
    assert isinstance(level, LevelShiftDetector)
    shifts = [(0.0, None)] * 4 + [(0.0, 3.0)] * 8 + [(8.0, None)] * 12 + [(0.0, None)] * 4
    start = 2 * PER_DAY
    for shift, humidity in shifts:
        frame = readings(start, 12, shift, seed=start, humidity_shift=humidity)
        frame["value"] += np.where(frame.index == 5, 40.0, 0.0)  # a spike in every batch
        batch = Batch.of(frame)
        keep = gated._gate(batch)
        assert level._memo is not None
        assert level._memo[0] is batch
        assert seasonal._gated is not None
        assert seasonal._gated[0] is batch
        gated._learn_batch(batch, keep)
        again = Batch.of(frame)  # another batch: nothing the gate judged is reused
        fresh._learn_batch(again, fresh._gate(Batch.of(frame)))
        assert params.dumps(gated.to_params()) == params.dumps(fresh.to_params())
        start += 12


SPECIAL_FLOATS = [
    0.0,
    -0.0,
    1.0,
    0.1,
    1e-4,
    9.999e-5,
    3.3043707618338716e-05,
    5e-324,
    1e15,
    9999999999999998.0,
    1e16,
    1.2345678901234568e20,
    1.7976931348623157e308,
    -2.5e-7,
    21.000091286448587,
]


@pytest.mark.parametrize(
    "value",
    [
        {"state": {"xs": SPECIAL_FLOATS, "n": [0, -3, 2**63 - 1], "none": None, "ok": True}},
        {"b": 1, "a": {"z": [[0.5, 1e-9]], "y": 't\x01\n"\\'}},  # control characters, sorting
        {"name": "dé", "x": 1.5},  # not ASCII: escaped by json.dumps
        {"name": "d\x7f", "x": 1.5},
        {"big": 2**70, "x": 0.25},  # beyond 64 bits: msgspec refuses
        {"tuple": (1.5, 2.5), "x": np.float64(0.1)},  # a numpy float is a float for json.dumps
        {"p95e": 1.0, "1e5": "1e5"},  # looks like an exponent without being one
    ],
    ids=repr,
)
def test_canonical_parameters_text_is_what_params_dumps_writes(value: dict[str, object]) -> None:
    assert canonical(value) == params.dumps(value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_canonical_parameters_text_refuses_what_params_dumps_refuses(bad: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        params.dumps({"x": [1.0, bad]})
    with pytest.raises(ValueError, match="JSON compliant"):
        canonical({"x": [1.0, bad]})


def test_canonical_parameters_text_of_learned_detectors_and_random_floats() -> None:
    rng = np.random.default_rng(3)
    floats = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-320, 308, 20_000)).tolist()
    floats += (rng.standard_normal(20_000) * 10.0 ** rng.integers(-8, 20, 20_000)).tolist()
    for chunk in range(0, len(floats), 100):
        value = {"state": {"values": floats[chunk : chunk + 100]}}
        assert canonical(value) == params.dumps(value)
    detector = default_detector()
    for start in range(0, 400, 40):
        t = (start + np.arange(40, dtype=np.int64)) * 60_000
        batch = Batch.of(
            pd.DataFrame(
                {
                    "event_ms": np.repeat(t, 2),
                    "metric": np.tile(np.array(["temperature", "humidity"], dtype=object), 40),
                    "value": rng.normal(20.0, 1.0, 80),
                }
            )
        )
        detector.learn(batch)
        new = detector.to_params()
        assert canonical(new) == params.dumps(new)
