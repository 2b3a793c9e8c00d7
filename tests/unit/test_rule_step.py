"""The rules' pure per-bucket step: readings with their per-rule values and a watermark in, alert
events and the bucket's state out. Rules are built by hand here (no Spark): a hard limit
judged per reading, a sliding average and a silence rule judged when the watermark closes their
windows, through an episode's lifecycle, rule versions and deletions, repeats, late readings
and expiry; the state pickles and judging carries on from it alike."""

from __future__ import annotations

import pickle
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from fleetwatch.contracts.alerts import RULE_KIND, Alert
from fleetwatch.contracts.rules import rule_alert_id
from fleetwatch.streaming import seen
from fleetwatch.streaming.rules import panes, step
from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.step import UPDATE_EVERY_MS, BucketRules, Judged, Reading

T0 = 1_763_700_000_000
"""A multiple of every window and slide here."""
NOW = T0 + 86_400_000
EXPIRE_MS = 3_600_000


def hot(version: int = 1, devices: Iterable[str] | None = None) -> CompiledRule:
    """``temperature > 80``, judged per reading."""
    return CompiledRule(
        id="hot",
        version=version,
        name="too hot",
        severity="critical",
        when="temperature > 80",
        devices=None if devices is None else frozenset(devices),
        metrics=("temperature",),
        metric="temperature",
        values=("temperature",),
        condition="temperature > 80",
        shown="temperature",
        having=["GreaterThan", ["agg", 0], ["lit", 80.0]],
        evidence=["agg", 0],
    )


def shaky(version: int = 1, devices: Iterable[str] | None = None) -> CompiledRule:
    """``avg(vibration) > 7`` over 4 s sliding by 2 s."""
    return CompiledRule(
        id="shaky",
        version=version,
        name="shaking",
        severity="warning",
        when="avg(vibration) > 7",
        devices=None if devices is None else frozenset(devices),
        metrics=("vibration",),
        metric="vibration",
        values=("vibration",),
        window_ms=(4_000, 2_000),
        aggregates=("avg",),
        having=["GreaterThan", ["agg", 0], ["lit", 7.0]],
        evidence=["agg", 0],
    )


def shaky_and_peaky(version: int) -> CompiledRule:
    """The same rule id, a version with a second aggregate:
    ``avg(vibration) > 7 AND max(vibration) < 100``."""
    one = shaky(version)
    return CompiledRule(
        **{
            **one.__dict__,
            "when": "avg(vibration) > 7 AND max(vibration) < 100",
            "aggregates": ("avg", "max"),
            "values": ("vibration", "vibration"),
            "having": [
                "And",
                ["GreaterThan", ["agg", 0], ["lit", 7.0]],
                ["LessThan", ["agg", 1], ["lit", 100.0]],
            ],
        }
    )


def quiet(version: int = 1) -> CompiledRule:
    """``count(*) = 0`` over 10 s sliding by 5 s."""
    return CompiledRule(
        id="quiet",
        version=version,
        name="silent",
        severity="warning",
        when="count(*) = 0",
        devices=None,
        metrics=(),
        metric="*",
        values=("1",),
        window_ms=(10_000, 5_000),
        aggregates=("count",),
        having=["EqualTo", ["agg", 0], ["lit", 0.0]],
        evidence=["agg", 0],
    )


def reading(
    device: str,
    seq: int,
    at: int,
    *,
    temperature: float | str | None = "-",
    vibration: float | str | None = "-",
    quiet: bool = False,
) -> Reading:
    """A reading at ``T0 + at`` with the values the projection gives each rule named ("-": the
    rule does not judge it)."""
    values: dict[str, tuple[bool | None, Sequence[float | None]]] = {}
    if temperature != "-":
        t = None if temperature is None else float(temperature)
        values["hot"] = (None if t is None else t > 80, [t])
    if vibration != "-":
        v = None if vibration is None else float(vibration)
        values["shaky"] = (None, [v])
    if quiet:
        values["quiet"] = (None, [1.0])
    return Reading(device, seq, T0 + at, T0 + at + 5, values)


def judge(
    bucket: BucketRules,
    readings: Iterable[Reading],
    rules: Iterable[CompiledRule],
    watermark: int,
    now_ms: int = NOW,
) -> Judged:
    """``step.judge`` at the watermark ``T0 + watermark``."""
    by_id = {r.id: r for r in rules}
    return step.judge(bucket, readings, by_id, T0 + watermark, now_ms, EXPIRE_MS)


def brief(judged: Judged) -> list[tuple[str, str | None, str, int, float | None]]:
    """(device, rule, status, event time from T0, value) of each event."""
    return [(device, a.rule_id, a.status, a.event_ms - T0, a.value) for device, a in judged.alerts]


def only(judged: Judged) -> Alert:
    assert len(judged.alerts) == 1, brief(judged)
    return judged.alerts[0][1]


# -- a rule without a window ------------------------------------------------------------------


def test_a_stateless_rule_opens_on_the_first_firing_reading_and_resolves_on_the_first_false() -> (
    None
):
    bucket = step.new_bucket()
    rules = [hot()]
    temps = [70.0, 85.0, 90.0, 95.0, 75.0, 60.0, 81.0]
    judged = judge(
        bucket, [reading("d1", i, i * 1000, temperature=t) for i, t in enumerate(temps)], rules, 0
    )
    assert brief(judged) == [
        ("d1", "hot", "open", 1000, 85.0),
        ("d1", "hot", "resolve", 4000, 75.0),
        ("d1", "hot", "open", 6000, 81.0),
    ]
    opened, resolved, again = (a for _, a in judged.alerts)
    # the episode's id is of the device, the rule and its start, not of the readings before
    alone = judge(step.new_bucket(), [reading("d1", 9, 1000, temperature=85.0)], rules, 0)
    assert only(alone).alert_id == opened.alert_id
    elsewhere = judge(step.new_bucket(), [reading("d2", 1, 1000, temperature=85.0)], rules, 0)
    assert only(elsewhere).alert_id != opened.alert_id
    assert resolved.alert_id == opened.alert_id != again.alert_id
    assert (opened.revision, resolved.revision) == (0, 1)
    assert opened.event_id == f"{opened.alert_id}.0"
    assert resolved.event_id == f"{opened.alert_id}.1"
    assert (resolved.start_ms, resolved.end_ms) == (T0 + 1000, T0 + 4000)
    assert opened.end_ms is None
    assert (opened.seq, opened.received_ms, opened.detected_ms) == (1, T0 + 1005, NOW)
    assert opened.detector == RULE_KIND
    assert (opened.severity, opened.metric, opened.rule_version) == ("critical", "temperature", 1)
    assert opened.reason == "rule hot: too hot (temperature > 80)"


def test_a_null_changes_nothing() -> None:
    bucket = step.new_bucket()
    rules = [hot()]
    # a null before any firing opens nothing; a null while open neither updates nor resolves
    nulls = [reading("d1", i, i * 1000, temperature=None) for i in range(3)]
    assert judge(bucket, nulls, rules, 0).alerts == []
    opened = judge(bucket, [reading("d1", 10, 10_000, temperature=90.0)], rules, 0)
    assert brief(opened) == [("d1", "hot", "open", 10_000, 90.0)]
    later = [
        reading("d1", 11 + i, 11_000 + i * UPDATE_EVERY_MS, temperature=None) for i in range(3)
    ]
    assert judge(bucket, later, rules, 0).alerts == []
    assert bucket["devices"]["d1"]["rules"]["hot"]["episode"] is not None
    closed = judge(bucket, [reading("d1", 20, 400_000, temperature=10.0)], rules, 0)
    assert brief(closed) == [("d1", "hot", "resolve", 400_000, 10.0)]


def run_hot(readings: list[Reading], batches: Sequence[slice]) -> list[dict[str, Any]]:
    bucket = step.new_bucket()
    out: list[dict[str, Any]] = []
    for part in batches:
        out += [a.model_dump() for _, a in judge(bucket, readings[part], [hot()], 0).alerts]
    return out


def test_the_same_readings_give_the_same_events_and_ids() -> None:
    temps = [50.0, 85.0, 86.0, 40.0, 99.0, 99.0, 10.0]
    readings = [reading("d1", i, i * 40_000, temperature=t) for i, t in enumerate(temps)]
    readings += [reading("d2", i, i * 40_000 + 7, temperature=t) for i, t in enumerate(temps[1:])]
    first = run_hot(readings, [slice(None)])
    assert len(first) == 8  # d1: open, resolve, open, resolve; d2: the same
    assert first == run_hot(readings, [slice(None)])
    # in any order, in any batches: sorted by event time within a batch
    assert first == run_hot(readings[::-1], [slice(None)])
    assert first == run_hot(readings, [slice(0, 3), slice(3, 5), slice(5, None)])
    assert len({a["alert_id"] for a in first}) == 4
    assert len({a["event_id"] for a in first}) == 8


def test_an_open_episode_updates_at_most_once_per_update_every_ms_when_its_value_changes() -> None:
    bucket = step.new_bucket()
    half = UPDATE_EVERY_MS // 2
    temps = {
        0: 85.0,  # open
        half: 90.0,  # changed, too soon
        2 * half: 90.0,  # changed since the last event (85), a minute on: update
        3 * half: 95.0,  # too soon after the update
        4 * half: 90.0,  # a minute on, but the same as the last event's value
        4 * half + 1_000: 91.0,  # changed, a minute and a second after the update
        5 * half: 92.0,  # too soon
    }
    readings = [reading("d1", i, at, temperature=t) for i, (at, t) in enumerate(temps.items())]
    judged = judge(bucket, readings, [hot()], 0)
    assert brief(judged) == [
        ("d1", "hot", "open", 0, 85.0),
        ("d1", "hot", "update", 2 * half, 90.0),
        ("d1", "hot", "update", 4 * half + 1_000, 91.0),
    ]
    assert [a.revision for _, a in judged.alerts] == [0, 1, 2]
    assert len({a.alert_id for _, a in judged.alerts}) == 1
    assert all(a.start_ms == T0 for _, a in judged.alerts)


# -- windowed rules ---------------------------------------------------------------------------


def test_a_windowed_average_opens_when_the_watermark_passes_the_window_end_not_before() -> None:
    bucket = step.new_bucket()
    rules = [shaky()]
    highs = [reading("d1", i, 500 + i * 1000, vibration=v) for i, v in enumerate([8, 8, 9, 9])]
    # the first window holding them ends at 2 s: [-2 s, 2 s) = 8, 8
    assert judge(bucket, highs, rules, 0).alerts == []
    assert bucket["timer_ms"] == T0 + 2_000
    assert judge(bucket, [], rules, 1_999).alerts == []
    opened = only(judge(bucket, [], rules, 2_000))
    assert (opened.status, opened.event_ms, opened.start_ms, opened.value) == (
        "open",
        T0 + 2_000,
        T0 + 2_000,
        8.0,
    )
    assert opened.reason == "rule shaky: shaking (avg(vibration) > 7 over 4 s)"
    assert bucket["timer_ms"] == T0 + 4_000
    # [0, 4 s) = 8.5: still open, its value changed too soon for an update
    assert judge(bucket, [], rules, 5_999).alerts == []
    lows = [reading("d1", 10 + i, 6_500 + i * 1000, vibration=1.0) for i in range(2)]
    # [2 s, 6 s) = 9, 9: open; [4 s, 8 s) = 1, 1: resolved at that window's end
    assert judge(bucket, lows, rules, 6_000).alerts == []
    assert judge(bucket, [], rules, 7_999).alerts == []
    resolved = only(judge(bucket, [], rules, 8_000))
    assert (resolved.status, resolved.event_ms, resolved.end_ms, resolved.value) == (
        "resolve",
        T0 + 8_000,
        T0 + 8_000,
        1.0,
    )
    assert resolved.alert_id == opened.alert_id


def test_late_readings_are_counted_and_ignored() -> None:
    bucket = step.new_bucket()
    rules = [shaky(), hot()]
    judge(bucket, [reading("d1", 1, 5_000, vibration=1.0)], rules, 0)
    before = pickle.dumps(bucket)
    late = [
        reading("d1", 2, 9_999, vibration=50.0),
        reading("d1", 3, 8_000, temperature=99.0),
        reading("d2", 1, 0, temperature=99.0),
    ]
    judged = judge(bucket, late, rules, 10_000)
    assert judged.late == 3
    assert judged.repeats == 0
    # the windows up to 10 s are judged over the one reading on time: no alert, no new device
    assert judged.alerts == []
    assert set(bucket["devices"]) == {"d1"}
    assert pickle.loads(before)["devices"]["d1"]["seen_seqs"] == [[1, 1, T0 + 5_000]]
    assert bucket["devices"]["d1"]["seen_seqs"] == []  # behind the watermark: nothing to keep
    # a reading at the watermark is on time
    on_time = judge(bucket, [reading("d1", 4, 10_000, temperature=99.0)], rules, 10_000)
    assert (on_time.late, brief(on_time)) == (0, [("d1", "hot", "open", 10_000, 99.0)])


def test_repeated_readings_are_dropped() -> None:
    bucket = step.new_bucket()
    rules = [shaky()]
    # avg over [-2 s, 2 s) of 9 and 1 is 5; counting the repeats of 9 would make it 7.4
    first = [reading("d1", 1, 100, vibration=9.0), reading("d1", 2, 900, vibration=1.0)]
    again = [reading("d1", 1, 100, vibration=9.0)] * 3
    judged = judge(bucket, first + again, rules, 0)
    assert judged.repeats == 3
    replayed = judge(bucket, [reading("d1", 1, 100, vibration=9.0)], rules, 0)
    assert replayed.repeats == 1
    closed = judge(bucket, [], rules, 2_000)
    assert closed.alerts == []
    held = bucket["devices"]["d1"]["rules"]["shaky"]["panes"].values()
    partials = [panes.unpack(p)[0] for p in held]
    assert panes.value("count", panes.merged(partials)) == 2
    # a reading with the same seq at another time is another reading
    other = judge(bucket, [reading("d1", 1, 2_100, vibration=9.0)], rules, 2_000)
    assert other.repeats == 0


def test_a_devices_state_stays_bounded_however_long_it_reads() -> None:
    bucket = step.new_bucket()
    rules = [hot()]
    for n in range(1, 2_001):  # a reading a second for over half an hour, never firing
        judge(bucket, [reading("d1", n, n * 1_000, temperature=20.0)], rules, n * 1_000 - 120_000)
    device = bucket["devices"]["d1"]
    assert device["rules"] == {}  # a rule without a window holds nothing while nothing is open
    assert device["seen_seqs"] == [[1, 2_000, T0 + 2_000_000]]
    assert len(pickle.dumps(bucket)) < 200
    # a repeat within the watermark is still known as one, and a new reading is not
    again = judge(bucket, [reading("d1", 1_990, 1_990_000, temperature=99.0)], rules, 1_900_000)
    assert (again.repeats, again.alerts) == (1, [])
    fires = judge(bucket, [reading("d1", 2_001, 2_001_000, temperature=99.0)], rules, 1_900_000)
    assert brief(fires) == [("d1", "hot", "open", 2_001_000, 99.0)]
    assert set(device["rules"]) == {"hot"}


def test_a_device_numbering_its_readings_at_random_keeps_a_bounded_state() -> None:
    bucket = step.new_bucket()
    numbers = random.Random(5).sample(range(10**9), 20_000)
    noisy = [reading("noisy", seq, i, temperature=20.0) for i, seq in enumerate(numbers)]
    judged = judge(bucket, [*noisy, reading("d1", 1, 0, temperature=99.0)], [hot()], 0)
    assert brief(judged) == [("d1", "hot", "open", 0, 99.0)]
    assert (judged.repeats, judged.late) == (0, 0)
    assert len(bucket["devices"]["noisy"]["seen_seqs"]) == seen.MOST_RANGES


def test_a_device_that_numbers_its_readings_again_is_judged() -> None:
    bucket = step.new_bucket()
    rules = [hot()]
    judge(bucket, [reading("d1", n, n * 1_000, temperature=20.0) for n in range(1, 6)], rules, 0)
    restarted = judge(bucket, [reading("d1", 1, 9_000, temperature=99.0)], rules, 0)
    assert (restarted.repeats, brief(restarted)) == (0, [("d1", "hot", "open", 9_000, 99.0)])
    assert bucket["devices"]["d1"]["seen_seqs"] == [[1, 1, T0 + 9_000]]
    assert judge(bucket, [reading("d1", 3, 3_000, temperature=20.0)], rules, 0).repeats == 0


def test_a_state_written_with_the_older_seen_list_carries_on() -> None:
    bucket = step.new_bucket()
    old: Any = bucket
    old["devices"]["d1"] = {
        "rules": {"hot": {"version": 1, "panes": {}, "next_end": None, "episode": None}},
        "seen": [[1, T0 + 1_000]],
        "last_ms": T0 + 1_000,
    }
    judged = judge(bucket, [reading("d1", 2, 2_000, temperature=20.0)], [hot()], 0)
    assert judged.alerts == []
    assert "seen" not in bucket["devices"]["d1"]
    assert bucket["devices"]["d1"]["rules"] == {}
    assert bucket["devices"]["d1"]["seen_seqs"] == [[2, 2, T0 + 2_000]]


def test_a_state_written_with_unpacked_panes_carries_on_alike() -> None:
    rules = [shaky()]
    first = [reading("d1", 1, 100, vibration=9.0), reading("d1", 2, 900, vibration=8.0)]
    packed, unpacked = step.new_bucket(), step.new_bucket()
    judge(packed, first, rules, 0)
    judge(unpacked, first, rules, 0)
    state = unpacked["devices"]["d1"]["rules"]["shaky"]
    older: Any = {start: panes.unpack(p) for start, p in state["panes"].items()}
    state["panes"] = older
    later = [reading("d1", 3, 2_100, vibration=9.5)]
    opened = brief(judge(packed, later, rules, 2_000))
    assert opened == brief(judge(unpacked, later, rules, 2_000))
    assert opened == [("d1", "shaky", "open", 2_000, 8.5)]  # the window [-2 s, 2 s)
    closed = brief(judge(packed, [], rules, 4_000))
    assert closed == brief(judge(unpacked, [], rules, 4_000))  # [0, 4 s): 9, 8 and 9.5


def test_an_on_time_reading_earlier_than_the_first_is_in_its_windows() -> None:
    """A device's first reading is at 9.5 s; one from 3.5 s comes in the next batch, still on
    time (the watermark is behind it): the windows holding it are judged too."""
    bucket = step.new_bucket()
    rules = [shaky()]
    judge(bucket, [reading("d1", 2, 9_500, vibration=1.0)], rules, 0)
    assert bucket["timer_ms"] == T0 + 10_000
    judge(bucket, [reading("d1", 1, 3_500, vibration=9.0)], rules, 0)
    assert bucket["timer_ms"] == T0 + 4_000
    judged = judge(bucket, [], rules, 10_000)
    assert brief(judged) == [
        ("d1", "shaky", "open", 4_000, 9.0),  # [0, 4 s)
        ("d1", "shaky", "resolve", 8_000, None),  # [4 s, 8 s): no readings, no average
    ]
    assert bucket["timer_ms"] == T0 + 12_000


def test_silence_fires_for_a_device_gone_quiet_and_resolves_when_it_reads_again() -> None:
    bucket = step.new_bucket()
    rules = [quiet()]
    judge(bucket, [reading("d1", i, 1_000 * i, quiet=True) for i in (1, 2)], rules, 0)
    assert bucket["timer_ms"] == T0 + 5_000
    # the timer: judged with no readings as the watermark moves on
    assert judge(bucket, [], rules, 5_000).alerts == []  # [-5 s, 5 s): 2 readings
    assert judge(bucket, [], rules, 10_000).alerts == []  # [0, 10 s): 2 readings
    opened = only(judge(bucket, [], rules, 15_000))  # [5 s, 15 s): none
    assert (opened.status, opened.event_ms, opened.value, opened.metric) == (
        "open",
        T0 + 15_000,
        0.0,
        "*",
    )
    assert judge(bucket, [], rules, 20_000).alerts == []  # still silent: no update, no new id
    # it reads again at 21 s: the window [15 s, 25 s) holds it
    assert judge(bucket, [reading("d1", 3, 21_000, quiet=True)], rules, 20_000).alerts == []
    resolved = only(judge(bucket, [], rules, 25_000))
    assert (resolved.status, resolved.event_ms, resolved.value, resolved.alert_id) == (
        "resolve",
        T0 + 25_000,
        1.0,
        opened.alert_id,
    )


def test_windows_are_judged_alike_however_far_the_watermark_moves_at_once() -> None:
    """A micro-batch may move the watermark over several windows: those past the device's last
    reading are empty, and a silence opens at the first of them, as it does when the watermark
    moves a slide at a time."""
    readings = [reading("d1", i, 1_000 * i, quiet=True) for i in (1, 2)]
    readings += [reading("d1", 3, 41_000, quiet=True)]

    def run(watermarks: Iterable[int]) -> list[Any]:
        bucket = step.new_bucket()
        judge(bucket, readings[:2], [quiet()], 0)
        out = []
        for w in watermarks:
            batch = readings[2:] if w == 40_000 else []
            out += [a.model_dump() for _, a in judge(bucket, batch, [quiet()], w).alerts]
        return out

    slide_by_slide = run(range(5_000, 65_000, 5_000))
    assert [(a["status"], a["event_ms"] - T0) for a in slide_by_slide] == [
        ("open", 15_000),
        ("resolve", 45_000),
        ("open", 55_000),
    ]
    assert run([12_000, 40_000, 60_000]) == slide_by_slide
    assert run([4_000, 40_000, 64_999]) == slide_by_slide
    assert run([36_000, 40_000, 45_000, 60_000]) == slide_by_slide


def test_long_silence_is_judged_in_constant_work(monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = step.new_bucket()
    rules = [quiet()]
    judge(bucket, [reading("d1", 1, 1_000, quiet=True)], rules, 0)
    judged_windows: list[int] = []
    window_values = panes.window_values

    def counted(*args: Any) -> list[float | None]:
        judged_windows.append(args[3])
        return window_values(*args)

    monkeypatch.setattr(panes, "window_values", counted)
    opened = judge(bucket, [], rules, 20_000)
    assert brief(opened) == [("d1", "quiet", "open", 15_000, 0.0)]
    ten_days = 10 * 86_400_000
    for i in range(1, 4):
        judged_windows.clear()
        assert judge(bucket, [], rules, i * ten_days + 2_500).alerts == []
        assert len(judged_windows) <= 2
        next_end = bucket["devices"]["d1"]["rules"]["quiet"]["next_end"]
        assert next_end is not None
        assert T0 + i * ten_days + 2_500 < next_end <= T0 + i * ten_days + 2_500 + 5_000
        assert bucket["timer_ms"] == next_end


def test_a_reading_after_a_long_silence_is_judged_in_constant_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watermark and a reading arrive together ten days on: the empty windows before the
    reading are judged as one, then the ones holding it."""
    bucket = step.new_bucket()
    rules = [quiet()]
    judge(bucket, [reading("d1", 1, 1_000, quiet=True)], rules, 0)
    calls = []
    window_values = panes.window_values

    def counted(*args: Any) -> list[float | None]:
        calls.append(args[3] - T0)
        return window_values(*args)

    monkeypatch.setattr(panes, "window_values", counted)
    ten_days = 10 * 86_400_000
    back = reading("d1", 2, ten_days + 13_000, quiet=True)
    judged = judge(bucket, [back], rules, ten_days + 12_000)
    assert brief(judged) == [("d1", "quiet", "open", 15_000, 0.0)]
    assert len(calls) <= 4
    assert bucket["timer_ms"] == T0 + ten_days + 15_000
    calls.clear()
    resolved = judge(bucket, [], rules, ten_days + 20_000)
    assert brief(resolved) == [("d1", "quiet", "resolve", ten_days + 15_000, 1.0)]
    assert len(calls) <= 2


# -- rule changes, selection and expiry -------------------------------------------------------


def test_a_stateless_rules_version_judges_only_readings_received_since_it_was_accepted() -> None:
    """The real-time query judges a version only on readings received from ``since_ms`` on; the
    rules query, restarted from its last batch, may hold readings received before: it passes
    them over too, so both open the episode on the same first reading, under the same id."""
    bucket = step.new_bucket()
    accepted = T0 + 2_000
    v2 = replace(hot(2), since_ms=accepted)
    # received at 1,005 and 2,005 ms: the first before the version was accepted
    judged = judge(
        bucket,
        [reading("d1", 1, 1_000, temperature=90.0), reading("d1", 2, 2_000, temperature=91.0)],
        [v2],
        0,
    )
    opened = only(judged)
    assert (opened.status, opened.event_ms, opened.rule_version) == ("open", T0 + 2_000, 2)
    assert opened.alert_id == rule_alert_id("d1", "temperature", "hot", T0 + 2_000)
    # a reading received before, however late it is judged, neither resolves nor opens
    stale = Reading("d1", 3, T0 + 2_500, accepted - 1, {"hot": (False, [20.0])})
    assert judge(bucket, [stale], [v2], 0).alerts == []


def test_a_new_rule_version_resolves_the_old_episode_and_restarts_the_windows() -> None:
    bucket = step.new_bucket()
    highs = [reading("d1", i, 500 + i * 1000, vibration=9.0) for i in range(2)]
    judge(bucket, highs, [shaky(1)], 0)
    opened = only(judge(bucket, [], [shaky(1)], 2_000))
    assert opened.rule_version == 1
    # version 2: with version 1's readings the window [0, 4 s) would be (9 + 9 + 6) / 3 = 8
    v2 = [shaky(2)]
    replaced = only(judge(bucket, [reading("d1", 5, 2_500, vibration=6.0)], v2, 2_000))
    assert (replaced.status, replaced.alert_id, replaced.rule_version) == (
        "resolve",
        opened.alert_id,
        1,
    )
    assert replaced.reason == "rule shaky replaced by version 2"
    assert replaced.event_ms == T0 + 2_500
    # [0, 4 s) of version 2: 6
    assert judge(bucket, [reading("d1", 6, 4_500, vibration=9.0)], v2, 4_000).alerts == []
    reopened = only(judge(bucket, [], v2, 6_000))  # [2 s, 6 s): 6 and 9
    assert (reopened.status, reopened.rule_version, reopened.value) == ("open", 2, 7.5)
    assert reopened.alert_id != opened.alert_id


def test_a_new_version_of_a_silent_devices_rule_resolves_its_episode_without_a_reading() -> None:
    """The query restarts with version 2, which aggregates one more value, and the device sends
    nothing: its version 1 episode resolves and its windows start afresh with version 2's
    aggregates, the first of them wholly after the change."""
    bucket = step.new_bucket()
    highs = [reading("d1", i, 500 + i * 1000, vibration=9.0) for i in range(2)]
    judge(bucket, highs, [shaky(1)], 0)
    opened = only(judge(bucket, [], [shaky(1)], 2_000))
    v2 = [shaky_and_peaky(2)]
    replaced = only(judge(bucket, [], v2, 4_000))
    assert (replaced.status, replaced.alert_id, replaced.rule_version) == (
        "resolve",
        opened.alert_id,
        1,
    )
    assert (replaced.event_ms, replaced.reason) == (T0 + 4_000, "rule shaky replaced by version 2")
    state = bucket["devices"]["d1"]["rules"]["shaky"]
    assert (state["version"], state["panes"], state["episode"]) == (2, {}, None)
    assert bucket["timer_ms"] == T0 + 8_000  # [4 s, 8 s)
    back = [
        Reading("d1", 3 + i, T0 + 4_500 + 1000 * i, T0, {"shaky": (None, [v, v])})
        for i, v in enumerate([9.0, 12.0])
    ]
    # its readings after the change: windows from theirs, over version 2's readings only
    assert judge(bucket, back, v2, 4_000).alerts == []
    assert bucket["timer_ms"] == T0 + 6_000
    reopened = only(judge(bucket, [], v2, 6_000))  # [2 s, 6 s): 9 and 12
    assert (reopened.status, reopened.rule_version, reopened.event_ms, reopened.value) == (
        "open",
        2,
        T0 + 6_000,
        10.5,
    )


def test_a_new_version_of_a_silence_rule_judges_a_device_that_stays_silent() -> None:
    bucket = step.new_bucket()
    judge(bucket, [reading("d1", 1, 1_000, quiet=True)], [quiet(1)], 0)
    opened = only(judge(bucket, [], [quiet(1)], 15_000))
    replaced = only(judge(bucket, [], [quiet(2)], 17_000))
    assert (replaced.status, replaced.alert_id, replaced.event_ms) == (
        "resolve",
        opened.alert_id,
        T0 + 17_000,
    )
    assert judge(bucket, [], [quiet(2)], 24_999).alerts == []
    again = only(judge(bucket, [], [quiet(2)], 25_000))  # [15 s, 25 s), after the change
    assert (again.status, again.rule_version, again.event_ms) == ("open", 2, T0 + 25_000)


def test_an_update_held_back_over_empty_windows_is_sent_however_far_the_watermark_moves() -> None:
    """``max(vibration) > 7 OR count(*) = 0`` stays open when the device falls silent, and its
    value (the max) becomes null: an update is due a minute after the open, in the middle of
    windows that are all empty."""
    rough = CompiledRule(
        **{
            **shaky().__dict__,
            "id": "rough",
            "when": "max(vibration) > 7 OR count(*) = 0",
            "window_ms": (10_000, 5_000),
            "aggregates": ("max", "count"),
            "values": ("vibration", "1"),
            "having": [
                "Or",
                ["GreaterThan", ["agg", 0], ["lit", 7.0]],
                ["EqualTo", ["agg", 1], ["lit", 0.0]],
            ],
        }
    )
    highs = [Reading("d1", i, T0 + 1_000 * i, T0, {"rough": (None, [9.0, 1.0])}) for i in (1, 2)]

    def run(watermarks: Iterable[int]) -> list[tuple[str, str, int, float | None]]:
        bucket = step.new_bucket()
        judge(bucket, highs, [rough], 0)
        events = [a for w in watermarks for _, a in judge(bucket, [], [rough], w).alerts]
        return [(a.status, a.alert_id, a.event_ms - T0, a.value) for a in events]

    slide_by_slide = run(range(5_000, 200_000, 5_000))
    first = slide_by_slide[0][1]
    assert slide_by_slide == [
        ("open", first, 5_000, 9.0),
        ("update", first, 65_000, None),  # the first window end a minute after the open
    ]
    assert run([5_000, 200_000]) == slide_by_slide
    assert run([199_000]) == slide_by_slide


def test_a_deleted_rule_resolves_its_episodes() -> None:
    bucket = step.new_bucket()
    both = [hot(), quiet()]
    judge(bucket, [reading("d1", 1, 1_000, temperature=99.0, quiet=True)], both, 0)
    assert brief(judge(bucket, [], both, 15_000)) == [("d1", "quiet", "open", 15_000, 0.0)]
    # both deleted; the next batch of the bucket (here a timer, no readings) resolves them
    gone = judge(bucket, [], [], 16_000)
    assert sorted((r, s, t) for _, r, s, t, _ in brief(gone)) == [
        ("hot", "resolve", 16_000),
        ("quiet", "resolve", 16_000),
    ]
    assert {a.reason for _, a in gone.alerts} == {"rule hot deleted", "rule quiet deleted"}
    assert bucket["devices"]["d1"]["rules"] == {}
    assert bucket["timer_ms"] is None
    assert judge(bucket, [], [], 60_000).alerts == []


def test_a_device_no_longer_selected_resolves_its_episode() -> None:
    bucket = step.new_bucket()
    both = [hot(devices={"d1", "d2"})]
    burning = [reading(d, 1, 1_000, temperature=99.0) for d in ("d1", "d2")]
    assert len(judge(bucket, burning, both, 0).alerts) == 2
    only_d2 = [hot(devices={"d2"})]
    judged = judge(bucket, [reading("d2", 2, 2_000, temperature=99.5)], only_d2, 0)
    resolved = only(judged)
    assert (judged.alerts[0][0], resolved.status, resolved.reason) == (
        "d1",
        "resolve",
        "rule hot deselected",
    )
    assert resolved.event_ms == T0 + 1_000  # d1's last reading: the watermark is behind it
    assert "hot" not in bucket["devices"]["d1"]["rules"]
    assert bucket["devices"]["d2"]["rules"]["hot"]["episode"] is not None


def test_devices_are_checked_against_the_rules_only_when_the_rules_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    retire = step._retire

    def counted(device: Any, rules: Any, device_id: str, *rest: Any) -> None:
        calls.append(device_id)
        retire(device, rules, device_id, *rest)

    monkeypatch.setattr(step, "_retire", counted)
    bucket = step.new_bucket()
    rules = {"hot": hot()}
    for n in range(1, 4):
        step.judge(bucket, [reading("d1", n, n)], rules, T0, NOW, EXPIRE_MS)
    assert calls == ["d1"]  # the first batch only: the rules stayed the same
    judge(bucket, [reading("d1", 9, 9, temperature=99.0)], [hot(version=2)], 0)
    assert calls == ["d1", "d1"]
    assert step.rules_key({"hot": hot()}) != step.rules_key({"hot": hot(devices={"d1"})})


def test_a_value_for_a_rule_that_does_not_select_the_device_is_ignored() -> None:
    bucket = step.new_bucket()
    judged = judge(bucket, [reading("d1", 1, 0, temperature=99.0)], [hot(devices={"d2"})], 0)
    assert judged.alerts == []
    assert bucket["devices"]["d1"]["rules"] == {}


def test_a_device_silent_past_expire_after_leaves_the_state_unless_an_episode_is_open() -> None:
    bucket = step.new_bucket()
    rules = [hot()]
    judge(bucket, [reading("calm", 1, 0, temperature=20.0)], rules, 0)
    judge(bucket, [reading("burning", 1, 0, temperature=99.0)], rules, 0)
    judge(bucket, [reading("busy", 1, EXPIRE_MS, temperature=20.0)], rules, EXPIRE_MS)
    assert set(bucket["devices"]) == {"calm", "burning", "busy"}  # not past expire_after yet
    judge(bucket, [reading("busy", 2, EXPIRE_MS + 1, temperature=20.0)], rules, EXPIRE_MS + 1)
    assert set(bucket["devices"]) == {"burning", "busy"}
    # calm comes back as a new device: its state from nothing
    return_at = EXPIRE_MS + 2
    back = judge(bucket, [reading("calm", 2, return_at, temperature=99.0)], rules, EXPIRE_MS + 1)
    assert brief(back) == [("calm", "hot", "open", return_at, 99.0)]
    assert bucket["devices"]["calm"]["seen_seqs"] == [[2, 2, T0 + return_at]]


def test_next_timer_is_the_earliest_window_end_still_to_judge() -> None:
    bucket = step.new_bucket()
    rules = [hot(), shaky(), quiet()]
    assert step.next_timer(bucket) is None
    judge(bucket, [reading("a", 1, 100, temperature=20.0)], rules, 0)
    assert bucket["timer_ms"] is None  # a rule without a window needs no timer
    judge(bucket, [reading("a", 2, 7_100, quiet=True)], rules, 0)
    assert bucket["timer_ms"] == T0 + 10_000  # quiet's pane [5 s, 10 s)
    judge(bucket, [reading("b", 1, 3_100, vibration=1.0)], rules, 0)
    assert bucket["timer_ms"] == T0 + 4_000  # shaky's pane [2 s, 4 s)
    assert step.next_timer(bucket) == bucket["timer_ms"]
    judge(bucket, [], rules, 4_000)
    assert bucket["timer_ms"] == T0 + 6_000
    judge(bucket, [], rules, 9_999)
    assert bucket["timer_ms"] == T0 + 10_000


def script() -> list[tuple[list[Reading], int]]:
    """Batches of readings for three rules and two devices, each with its watermark."""
    rules_readings = []
    for i in range(30):
        at = i * 1_000
        temp = 85.0 if 5 <= i < 12 else 60.0
        vib = 9.0 if 8 <= i < 20 else 2.0
        batch = [reading("a", i, at, temperature=temp, vibration=vib, quiet=True)]
        if i < 10:
            batch.append(reading("b", i, at + 300, temperature=90.0 - i, quiet=True))
        rules_readings.append((batch, at - 1_000))
    rules_readings.append(([reading("b", 50, 31_000, quiet=True)], 30_000))  # b is back
    rules_readings += [([], w) for w in range(35_000, 60_000, 5_000)]
    return rules_readings


def run_script(round_trip: bool) -> tuple[list[dict[str, Any]], BucketRules]:
    bucket = step.new_bucket()
    rules = [hot(), shaky(), quiet()]
    out = []
    for batch, watermark in script():
        if round_trip:
            stored = pickle.dumps(bucket, protocol=pickle.HIGHEST_PROTOCOL)
            bucket = pickle.loads(stored)
        out += [a.model_dump() for _, a in judge(bucket, batch, rules, watermark).alerts]
    return out, bucket


def test_the_bucket_state_pickles_and_judging_resumes_alike_after_a_round_trip() -> None:
    bucket = step.new_bucket()
    for batch, watermark in script()[:20]:
        judge(bucket, batch, [hot(), shaky(), quiet()], watermark)
    assert bucket["devices"]["a"]["rules"]["shaky"]["panes"]
    assert bucket["devices"]["a"]["rules"]["shaky"]["episode"] is not None
    assert pickle.loads(pickle.dumps(bucket)) == bucket
    straight, end_state = run_script(round_trip=False)
    statuses = {(a["rule_id"], a["status"]) for a in straight}
    assert statuses >= {(r, s) for r in ("hot", "shaky", "quiet") for s in ("open", "resolve")}
    restarted, end_restarted = run_script(round_trip=True)
    assert restarted == straight
    assert end_restarted == end_state
