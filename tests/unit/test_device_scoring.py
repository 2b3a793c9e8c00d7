"""One device's micro-batches through the scorer's pure core: alerts, late data, duplicates,
sessions and silence."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.alerts import Alert, alert_id
from fleetwatch.contracts.devices import DeviceSession, DeviceState
from fleetwatch.models import params
from fleetwatch.models.base import Detector
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.combiner import CombinedDetector
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.registry import default_detector, load_params
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.streaming.scorer import detectors
from fleetwatch.streaming.scorer.detectors import DetectorCache
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state
from fleetwatch.streaming.scorer.device_step import (
    Output,
    Policy,
    Role,
    expire,
    process,
    wants_timer,
)

T0 = 1_763_700_000_000
POLICY = Policy(
    session_gap_ms=300_000,
    min_readings=1,
    clear_readings=3,
    baseline=FixedBaseline(bands={"temperature": (21.0, 8.0)}),
)


@pytest.fixture(autouse=True)
def fresh_detector_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own cache of loaded parameters: the cache is keyed by device and version,
    and tests train different parameters for device ``d1`` at the same version."""
    monkeypatch.setattr(detectors, "CACHE", DetectorCache())


def frame(rows: list[tuple[int, int, float]], dev_shift: int = 0, **metrics: float) -> pd.DataFrame:
    """(seq, event_ms, temperature) readings in the scorer's long form, each received 20 ms
    after it was taken."""
    out = []
    for seq, event_ms, temp in rows:
        for metric, value in {"temperature": temp, **metrics}.items():
            out.append(
                {
                    "seq": seq,
                    "event_ms": event_ms,
                    "device_event_ms": event_ms + dev_shift,
                    "device_sent_ms": event_ms + dev_shift,
                    "received_ms": event_ms + 20,
                    "clock_offset_ms": -dev_shift,
                    "firmware": "1.0",
                    "status": None,
                    "metric": metric,
                    "value": value,
                }
            )
    return pd.DataFrame(out)


def noisy(seq: int) -> float:
    """A temperature that moves by a few tenths from reading to reading: never stuck."""
    return 21.0 + 0.1 * ((seq * 7) % 5 - 2)


def flushed(readings: pd.DataFrame, received_ms: int) -> pd.DataFrame:
    """``readings`` all received at ``received_ms``: a device's buffer flushed at once."""
    return readings.assign(received_ms=received_ms)


def of(out: Output, role: Role) -> list[dict[str, Any]]:
    return [json.loads(v) for r, v in out.records if r == role]


def run(
    batches: list[pd.DataFrame],
    state: DeviceScoringState | None = None,
    params_json: str | None = None,
    watermark: int = 0,
) -> tuple[DeviceScoringState, list[Output]]:
    outs = []
    for batch in batches:
        state, out = process("d1", state, params_json, batch, watermark, T0 + 10**9, POLICY)
        outs.append(out)
    assert state is not None
    return state, outs


def test_an_episode_opens_once_and_resolves_after_calm_readings() -> None:
    temps = [21.0, 45.0, 46.0, 47.0, 21.0, 22.0, 21.5, 21.0]
    batches = [frame([(i, T0 + i * 1000, t)]) for i, t in enumerate(temps)]
    state, outs = run(batches)
    events = [Alert.model_validate(a) for out in outs for a in of(out, Role.ALERTS)]
    assert [e.status for e in events] == ["open", "resolve"]
    assert {e.alert_id for e in events} == {
        alert_id("d1", "temperature", "fixed-baseline", T0 + 1000)
    }
    assert events[1].start_ms == T0 + 1000
    assert events[1].end_ms == T0 + 3000
    assert [e.revision for e in events] == [0, 1]
    states = [DeviceState.model_validate(s) for out in outs for s in of(out, Role.STATE)]
    assert states[1].status == "alerting"
    assert states[1].open_alerts == [events[0].alert_id]
    assert states[-1].status == "ok"
    # published when something it says changes, not per reading: the newest values wait for
    # the next change or for state_every_ms of event time
    assert len(states) == 3
    assert states[-1].last_values == {"temperature": 21.5}
    assert state["last_values"] == {"temperature": 21.0}
    assert state["episodes"] == []


def test_a_signal_hovering_at_the_alert_level_stays_one_episode() -> None:
    temps = [21.0] + [30.0, 28.0] * 10 + [21.0] * 3
    batches = [frame([(i, T0 + i * 1000, t)]) for i, t in enumerate(temps)]
    _, outs = run(batches)
    events = [a for out in outs for a in of(out, Role.ALERTS)]
    assert [e["status"] for e in events] == ["open", "resolve"]


def test_replaying_the_same_readings_gives_the_same_events() -> None:
    temps = [21.0, 45.0, 60.0, 21.0, 21.0, 21.0]
    rows = [(i, T0 + i * 1000, t) for i, t in enumerate(temps)]
    _, one_by_one = run([frame([r]) for r in rows])
    _, all_at_once = run([frame(rows)])

    def ids(outs: list[Output]) -> list[tuple[str, str, int]]:
        return [
            (a["alert_id"], a["status"], a["revision"]) for o in outs for a in of(o, Role.ALERTS)
        ]

    assert ids(one_by_one) == ids(all_at_once)
    assert len(ids(one_by_one)) >= 2


def test_the_readings_scored_are_counted_as_readings_not_as_their_metrics() -> None:
    """A reading of three metrics is one reading scored, as the gateway counts one accepted
    (the Fleet dashboard shows the two side by side), and its repeat one duplicate."""
    first = frame([(1, T0, 21.0), (2, T0 + 1000, 22.0)], humidity=40.0, pressure=1013.0)
    assert len(first) == 6
    state, outs = run([pd.concat([first, first.iloc[:3]], ignore_index=True)])
    assert outs[0].scored == 2
    assert outs[0].duplicates == 1
    state, outs = run([frame([(3, T0 + 2000, 21.0)], humidity=40.0)], state=state)
    assert outs[0].scored == 1


def test_repeated_readings_are_dropped_within_and_across_batches() -> None:
    first = frame([(1, T0, 21.0), (2, T0 + 1000, 50.0)])
    again = pd.concat([first, first], ignore_index=True)
    state, outs = run([again])
    assert outs[0].duplicates == 2
    assert outs[0].scored == 2
    state, outs = run([first], state=state)
    assert outs[0].duplicates == 2
    assert outs[0].scored == 0
    assert of(outs[0], Role.ALERTS) == []


def test_a_reading_behind_the_watermark_goes_to_late_and_is_not_scored() -> None:
    state, _ = run([frame([(5, T0 + 100_000, 21.0)])])
    _, outs = run([frame([(3, T0 + 1_000, 90.0)])], state=state, watermark=T0 + 50_000)
    late = of(outs[0], Role.LATE)
    assert outs[0].late == 1
    assert late[0]["record"]["seq"] == 3
    assert late[0]["record"]["metrics"] == {"temperature": 90.0}
    assert late[0]["late_by_ms"] == 49_000
    assert of(outs[0], Role.ALERTS) == []
    assert of(outs[0], Role.STATE)[0]["late_readings"] == 1


def test_sessions_end_at_a_gap_and_at_a_reboot() -> None:
    gap = POLICY.session_gap_ms + 1
    batches = [
        frame([(1, T0, 21.0), (2, T0 + 1000, 21.0)]),
        frame([(3, T0 + 1000 + gap, 21.0)]),  # after a long gap
        frame([(0, T0 + 2000 + gap, 21.0)]),  # seq back to 0, clock forward: a reboot
    ]
    _, outs = run(batches)
    sessions = [DeviceSession.model_validate(s) for o in outs for s in of(o, Role.SESSIONS)]
    closed = [s for s in sessions if s.end_reason is not None]
    assert [(s.end_reason, s.readings, s.first_seq, s.last_seq) for s in closed] == [
        ("gap", 2, 1, 2),
        ("reboot", 1, 3, 3),
    ]
    assert sessions[-1].end_reason is None
    assert sessions[-1].start_ms == T0 + 2000 + gap


def test_a_silent_device_ends_its_session_and_resolves_its_alerts() -> None:
    state, _ = run([frame([(1, T0, 21.0), (2, T0 + 1000, 50.0)])])
    due = wants_timer(state, POLICY)
    assert due == T0 + 1000 + POLICY.session_gap_ms
    state, out, again = expire("d1", state, due - 1, T0, POLICY)
    assert again == due  # not yet: re-armed
    assert out.records == []
    state, out, again = expire("d1", state, due, T0, POLICY)
    assert again == T0 + 1000 + POLICY.expire_after_ms  # when it is forgotten
    assert [a["status"] for a in of(out, Role.ALERTS)] == ["resolve"]
    assert of(out, Role.SESSIONS)[0]["end_reason"] == "gap"
    assert of(out, Role.STATE)[0]["status"] == "silent"


def trained_params(n: int = 600, detector: Detector | None = None) -> str:
    rng = np.random.default_rng(7)
    t = T0 + np.arange(n) * 1000
    data = pd.DataFrame(
        {"event_ms": t, "metric": "temperature", "value": 21 + rng.normal(0, 0.3, n)}
    )
    detector = default_detector() if detector is None else detector
    for start in range(0, n, 50):
        detector.learn(data.iloc[start : start + 50])
    return params.dumps(detector.to_params())


def test_learned_parameters_are_used_and_their_version_recorded() -> None:
    p = trained_params()
    version = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.1)])])
    state["params_version"] = version
    state, outs = run([frame([(601, t + 1000, 35.0)])], state=state, params_json=p)
    alerts = of(outs[0], Role.ALERTS)
    assert alerts
    assert {a["params_version"] for a in alerts} == {version}
    assert {a["detector"] for a in alerts} - {"fixed-baseline"}


@pytest.mark.parametrize("n", [10, 60])
def test_parameters_still_warming_up_leave_the_device_to_the_baseline(n: int) -> None:
    # a trainer's first batch may hold fewer readings than the detectors need (10), or enough
    # for a provisional judgement only, the streams' tails still short (60): until the learned
    # detectors judge for good, the fixed baseline judges too, under the parameters' version
    p = trained_params(n=n)
    version = params.loads(p)["version"]
    state = new_state()
    state["params_version"] = version
    t = T0 + 600_000
    state, outs = run([frame([(600, t, 21.1)]), frame([(601, t + 1000, 45.0)])], state, p)
    alerts = of(outs[1], Role.ALERTS)
    assert ("fixed-baseline", "open", version) in [
        (a["detector"], a["status"], a["params_version"]) for a in alerts
    ]
    assert of(outs[0], Role.ALERTS) == []


def test_a_baseline_episode_resolves_once_learned_parameters_judge_the_device() -> None:
    state, outs = run([frame([(i, T0 + i * 1000, 45.0 if i == 1 else 21.0)]) for i in range(2)])
    assert [a["status"] for a in of(outs[1], Role.ALERTS)] == ["open"]
    p = trained_params()
    state["params_version"] = params.loads(p)["version"]
    calm = [frame([(i, T0 + i * 1000, 21.0)]) for i in range(2, 6)]
    state, outs = run(calm, state, p)
    events = [a for out in outs for a in of(out, Role.ALERTS)]
    assert [(a["detector"], a["status"]) for a in events] == [("fixed-baseline", "resolve")]
    assert state["episodes"] == []


def test_a_device_keeps_its_own_detector_once_its_parameters_were_parsed() -> None:
    # the processor passes the parameters only in the batch they arrive in (or when this worker
    # has not parsed them yet); later batches find the detector parsed, by device and version
    p = trained_params()
    state = new_state()
    state["params_version"] = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = process("own-cached", state, p, frame([(600, t, 21.1)]), 0, t, POLICY)
    state, out = process("own-cached", state, None, frame([(601, t + 1000, 35.0)]), 0, t, POLICY)
    assert {a["detector"] for a in of(out, Role.ALERTS)} - {"fixed-baseline"}


def test_a_dropout_filled_by_late_readings_is_withdrawn() -> None:
    p = trained_params()
    version = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.0)])])
    state["params_version"] = version
    # 30 s without a reading at 1 Hz: a dropout
    state, outs = run([frame([(630, t + 30_000, 21.0)])], state=state, params_json=p)
    opened = [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"]
    assert [a["status"] for a in opened] == ["open"]
    # the missing readings arrive late (store and forward), within the lateness
    late = frame([(s, t + (s - 600) * 1000, 21.0) for s in range(601, 630)])
    state, outs = run([late], state=state, params_json=p)
    withdrawn = [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"]
    assert [a["status"] for a in withdrawn] == ["withdraw"]
    assert withdrawn[0]["alert_id"] == opened[0]["alert_id"]


def test_a_dropout_filled_by_readings_behind_the_watermark_is_withdrawn() -> None:
    p = trained_params()
    version = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.0)])])
    state["params_version"] = version
    state, outs = run([frame([(630, t + 30_000, 21.0)])], state=state, params_json=p)
    opened = [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"]
    assert [a["status"] for a in opened] == ["open"]
    # the buffered readings arrive after the watermark passed them: late, not scored, but sent
    late = frame([(s, t + (s - 600) * 1000, 21.0) for s in range(601, 630)])
    state, outs = run([late], state=state, params_json=p, watermark=t + 40_000)
    assert len(of(outs[0], Role.LATE)) == 29
    withdrawn = [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"]
    assert [a["status"] for a in withdrawn] == ["withdraw"]
    assert withdrawn[0]["alert_id"] == opened[0]["alert_id"]
    assert of(outs[0], Role.STATE)[-1]["open_alerts"] == []


def test_a_device_back_from_offline_with_its_buffer_is_no_dropout() -> None:
    p = trained_params()
    version = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.0)])])
    state["params_version"] = version
    # offline for 200 s, then the buffer flushes in one batch: the older part is behind the
    # watermark (late), the rest is scored; no gap is left between what was heard
    flushed = frame([(s, t + (s - 600) * 1000, 21.0) for s in range(601, 801)])
    state, outs = run([flushed], state=state, params_json=p, watermark=t + 80_000)
    assert len(of(outs[0], Role.LATE)) == 79
    assert [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"] == []
    # a real dropout afterwards is still found
    state, outs = run([frame([(830, t + 230_000, 21.0)])], state=state, params_json=p)
    assert [a["status"] for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"] == ["open"]


def test_a_buffer_split_between_micro_batches_opens_no_dropout() -> None:
    p = trained_params()
    version = params.loads(p)["version"]
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.0)])])
    state["params_version"] = version
    # offline for 100 s; the buffer flushes at once, and the first micro-batch takes only two
    # readings in ten of it: 8 s gaps, which the rest of the buffer fills in the next batch
    flushed_ms = t + 100_500
    buffered = [(s, t + (s - 600) * 1000, noisy(s)) for s in range(601, 701)]
    first = [r for r in buffered if r[0] % 10 < 2]
    rest = [r for r in buffered if r[0] % 10 >= 2]
    state, outs = run([flushed(frame(first), flushed_ms)], state=state, params_json=p)
    assert [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"] == []
    state, outs = run([flushed(frame(rest), flushed_ms)], state=state, params_json=p)
    assert [a for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"] == []
    # the same gaps in readings delivered as they were taken are dropouts
    live = [(s, t + (s - 600) * 1000, noisy(s)) for s in range(701, 801) if s % 10 < 2]
    state, outs = run([frame(live)], state=state, params_json=p)
    assert "open" in [a["status"] for a in of(outs[0], Role.ALERTS) if a["detector"] == "dropout"]


def test_a_stuck_sensor_is_found_from_the_scorers_own_windows() -> None:
    p = trained_params()  # the trainer's flat-line windows end in normal, noisy values
    version = params.loads(p)["version"]
    t = T0 + 600_000
    rng = np.random.default_rng(11)
    state, _ = run([frame([(600 + i, t + i * 1000, 21 + rng.normal(0, 0.3)) for i in range(5)])])
    state["params_version"] = version
    found: list[tuple[int, str]] = []
    for i in range(5, 25):  # stuck at one value, a batch per reading; parameters unchanged
        state, outs = run([frame([(600 + i, t + i * 1000, 21.37)])], state=state, params_json=p)
        found += [(i, a["status"]) for a in of(outs[0], Role.ALERTS) if a["detector"] == "flatline"]
    window = FlatlineDetector().window
    assert found[0] == (5 + window - 1, "open")  # the first window of stuck readings only


def test_the_change_detectors_local_line_continues_from_the_scorers_own_readings() -> None:
    with_cusum = CombinedDetector([SeasonalBaseline(), ChangeDetector(), FlatlineDetector()])
    p = trained_params(detector=with_cusum)  # the trainer's line ends at its last batch
    version = params.loads(p)["version"]
    t = T0 + 600_000
    rng = np.random.default_rng(12)
    state, _ = run([frame([(600, t, 21.0)])])
    state["params_version"] = version
    origins = []
    for i in range(1, 40):  # a batch per reading; parameters unchanged
        reading = frame([(600 + i, t + i * 1000, 21 + rng.normal(0, 0.3))])
        state, _ = run([reading], state=state, params_json=p)
        origins.append(state["local_trends"]["temperature"][0])
    trainer_origin = params.loads(p)["state"]["members"][1]["state"]["trends"][0][0]
    assert origins == [trainer_origin + i for i in range(1, 40)]  # one position per reading


def test_the_level_detectors_average_continues_from_the_scorers_own_readings() -> None:
    p = trained_params()  # the trainer's average ends at its last batch, 600 readings in
    version = params.loads(p)["version"]
    t = T0 + 600_000
    rng = np.random.default_rng(13)
    values = 21.4 + rng.normal(0, 0.3, 40)  # a small lasting shift the average follows
    state, _ = run([frame([(600, t, float(values[0]))])])
    state["params_version"] = version
    carried = []
    for i in range(1, 40):  # a batch per reading; parameters unchanged
        reading = frame([(600 + i, t + i * 1000, float(values[i]))])
        state, _ = run([reading], state=state, params_json=p)
        carried.append(state["level_averages"]["temperature"][0])
    # the same readings scored in one batch from the parameters: the average after each
    member = load_params(params.loads(p)).members()[1]
    assert isinstance(member, LevelShiftDetector)
    whole = member.score(
        pd.DataFrame(
            {
                "event_ms": t + np.arange(1, 40) * 1000,
                "metric": "temperature",
                "value": values[1:],
            }
        )
    )
    np.testing.assert_allclose(carried, whole.observed - whole.expected, rtol=1e-9, atol=1e-12)
    assert abs(carried[-1]) > abs(carried[0]), "the average moved with the scorer's readings"


def json_types_only(value: Any, where: str = "state") -> list[str]:
    """Where ``value`` holds anything JSON would not give back as it is (the scorer pickles the
    state, so a tuple, a numpy number or a non-string key would come back as itself and
    behave unlike what a JSON round trip gave)."""
    if isinstance(value, dict):
        return [f"{where}: key {k!r}" for k in value if type(k) is not str] + [
            bad for k, v in value.items() for bad in json_types_only(v, f"{where}.{k}")
        ]
    if isinstance(value, list):
        return [bad for i, v in enumerate(value) for bad in json_types_only(v, f"{where}[{i}]")]
    if type(value) in (str, int, float, bool, type(None)):
        return []
    return [f"{where}: {type(value).__name__}"]


def test_the_state_holds_only_json_types_through_a_devices_life() -> None:
    p = trained_params()
    t = T0 + 600_000
    state, _ = run([frame([(600, t, 21.0)], humidity=40.0)])
    state["params_version"] = params.loads(p)["version"]
    steps = [
        (frame([(601, t + 1000, 45.0), (602, t + 2000, 46.0)], humidity=41.0), 0),  # a spike
        (frame([(602, t + 2000, 46.0)], humidity=41.0), 0),  # a duplicate
        (frame([(640, t + 40_000, 21.0)], humidity=40.0), 0),  # a dropout
        (frame([(s, t + (s - 600) * 1000, 21.0) for s in range(603, 640)]), 0),  # filled late
        (frame([(590, t - 10_000, 21.0)]), t + 30_000),  # behind the watermark
        (frame([(s, t + (s - 600) * 1000, 21.0) for s in range(641, 700)]), t + 60_000),
        (frame([(0, t + 200_000, 21.0)]), t + 100_000),  # a reboot
    ]
    for batch, watermark in steps:
        state, _ = run([batch], state=state, params_json=p, watermark=watermark)
        assert json_types_only(state) == []
    for part in (
        "episodes",
        "closed_windows",
        "late_readings",
        "duplicate_readings",
    ):  # every part was exercised
        assert state[part], part
    due = wants_timer(state, POLICY)
    assert due is not None
    state, _, _ = expire("d1", state, due, T0, POLICY)
    assert json_types_only(state) == []


def test_the_state_s_session_is_a_record_of_the_sessions_contract() -> None:
    """The session the scorer keeps (a plain dict in its state) and the records it publishes on
    ``device.sessions`` are :class:`DeviceSession` dumped: its fields, in its order, nothing
    else."""
    gap = POLICY.session_gap_ms + 1
    state, outs = run([frame([(1, T0, 21.0)]), frame([(2, T0 + gap, 21.0)])])
    published = [s for o in outs for s in of(o, Role.SESSIONS)]
    assert [s["end_reason"] for s in published] == [None, "gap", None]
    for record in [*published, state["session"]]:
        assert record is not None
        as_contract = DeviceSession.model_validate(record).model_dump()
        assert list(record) == list(as_contract)
        assert record == as_contract
