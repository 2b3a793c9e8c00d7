"""A reading on which every metric of the device moved at once is one device-wide alert."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetwatch.streaming.scorer.device_moves import (
    DEVICE_WIDE_KEY,
    DEVICE_WIDE_KIND,
    STATE_READINGS,
    Moves,
    Reading,
    fold_moves,
)
from fleetwatch.streaming.scorer.episodes import CALM_SCORE, DROPOUT, Lifecycle, Observation

NAN = float("nan")
CALM = CALM_SCORE


def obs(metric: str, kind: str, score: float, t: int, value: float = 1.0) -> Observation:
    return Observation(metric, kind, score, t // 1000, t, t + 5, value, 0.0, 1.0, f"{kind} says")


def readings(
    *times: int, metrics: tuple[str, ...] = ("rms", "rpm"), value: float = 1.0
) -> dict[int, Reading]:
    values = dict.fromkeys(metrics, value)
    return {t: Reading(frozenset(metrics), t // 1000, t + 5, values) for t in times}


def test_every_metric_anomalous_on_its_own_is_one_state_observation() -> None:
    found = [
        obs("rms", "seasonal", 0.99, 1000, 4.2),
        obs("rpm", "seasonal", 1.0, 1000, 1478.0),
        obs("rms", "cusum", 0.9, 1000),
        obs("rpm", "pca", 1.0, 1000),
    ]
    out = fold_moves(found, readings(1000), set())
    assert [(o.metric, o.kind) for o in out] == [("*", DEVICE_WIDE_KIND)]
    assert out[0].score == 1.0
    assert "rms=4.2" in out[0].reason
    assert "rpm=1478" in out[0].reason


def test_one_metric_off_on_its_own_is_left_as_it_is() -> None:
    found = [obs("rms", "seasonal", 0.99, 1000), obs("rpm", "pca", 0.99, 1000)]
    assert fold_moves(found, readings(1000), set()) == found  # rpm: only the joint detector
    single = [obs("rms", "seasonal", 0.99, 1000)]
    assert fold_moves(single, readings(1000, metrics=("rms",)), set()) == single


def test_a_state_episode_gets_calm_readings_and_resolves() -> None:
    moved = [obs("rms", "seasonal", 0.99, 1000), obs("rpm", "seasonal", 0.99, 1000)]
    out = fold_moves(moved, readings(1000, 2000, 3000, 4000), set())
    assert [(o.kind, o.score, o.event_ms) for o in out] == [
        (DEVICE_WIDE_KIND, 0.99, 1000),
        (DEVICE_WIDE_KIND, 0.0, 2000),
        (DEVICE_WIDE_KIND, 0.0, 3000),
        (DEVICE_WIDE_KIND, 0.0, 4000),
    ]
    lifecycle = Lifecycle("d1", 3, 10_000)
    for o in out:
        lifecycle.observe(o)
    assert [e["status"] for e in lifecycle.events] == ["open", "resolve"]
    assert {e["metric"] for e in lifecycle.events} == {"*"}
    later = fold_moves([], readings(5000), {DEVICE_WIDE_KEY})  # a later batch, nothing else
    assert later[0].kind == DEVICE_WIDE_KIND


def test_a_device_settling_into_its_new_state_stays_one_episode() -> None:
    """After the move one metric still alerts and the other is unusual, under the alert level:
    that is the device still moving as a whole, not a second episode of the alerting metric;
    once the other metric is calm on its own, the alerting one is an alert of its own."""
    found = [obs("rms", "seasonal", 0.99, 1000), obs("rpm", "seasonal", 0.99, 1000)]
    for t in (2000, 3000, 4000, 5000):
        found += [obs("rms", "seasonal", 0.99, t), obs("rpm", "seasonal", 0.4, t)]
    out = [o for o in fold_moves(found, readings(1000, 2000, 3000, 4000, 5000), set())]
    assert {(o.metric, o.kind) for o in out if o.score >= 0.5} == {("*", DEVICE_WIDE_KIND)}
    lifecycle = Lifecycle("d1", 3, 10_000)
    for o in out:
        lifecycle.observe(o)
    assert [(e["status"], e["metric"]) for e in lifecycle.events] == [("open", "*")]
    calm_partner = [obs("rms", "seasonal", 0.99, 6000), obs("rpm", "seasonal", 0.2, 6000)]
    assert fold_moves(calm_partner, readings(6000), set()) == calm_partner


def test_a_move_into_a_state_the_fleet_knows_is_no_alert() -> None:
    """The fleet knows the reading at 1000 (others of the kind are stopped) but not the one at
    2000: the first is no state alert, the second is; asked once, however many moves."""
    moved = [obs("rms", "seasonal", 0.99, t) for t in (1000, 2000)] + [
        obs("rpm", "seasonal", 0.99, t) for t in (1000, 2000)
    ]
    moved.sort(key=lambda o: o.event_ms)
    asked: list[int] = []

    def familiar() -> set[int]:
        asked.append(1)
        return {1000}

    out = fold_moves(moved, readings(1000, 2000), set(), familiar)
    assert [(o.kind, o.event_ms) for o in out] == [(DEVICE_WIDE_KIND, 2000)]
    assert asked == [1]
    # with a state episode under way, a familiar move reads as calm: it may close the episode
    under_way = fold_moves(moved[:2], readings(1000), {DEVICE_WIDE_KEY}, familiar)
    assert [(o.kind, o.score) for o in under_way] == [(DEVICE_WIDE_KIND, 0.0)]


def test_a_young_devices_move_that_nothing_knows_yet_is_no_alert() -> None:
    """Every alerting metric judged provisionally by one of its members (its stream's tail
    still short) and no fleet model: the device is learning its states, and a machine's first
    stop is no alert, though its speed's flat-line member finds 0 rpm stuck. A metric alerting
    only on grown judgements, or a fleet model to ask, and the move is judged."""
    young = [
        replace(obs("rms", "seasonal", 0.99, 1000), provisional=True),
        replace(obs("rpm", "seasonal", 1.0, 1000), provisional=True),
        obs("rpm", "flatline", 0.6, 1000),
    ]
    assert fold_moves(young, readings(1000), set()) == []
    grown = [obs("rms", "level", 0.99, 1000), *young[1:]]
    assert [o.kind for o in fold_moves(grown, readings(1000), set())] == [DEVICE_WIDE_KIND]
    fleet = fold_moves(young, readings(1000), set(), lambda: set())
    assert [o.kind for o in fleet] == [DEVICE_WIDE_KIND]  # the fleet does not know it
    # what judges the device otherwise stands on its own
    base = obs("temperature", "fixed-baseline", 0.9, 1000)
    gap = replace(obs("*", DROPOUT, 0.9, 1000), gap_from_ms=0)
    judged = fold_moves([*young, base, gap], readings(1000), set())
    assert sorted((o.metric, o.kind) for o in judged) == [
        ("*", DROPOUT),
        ("temperature", "fixed-baseline"),
    ], "each once"
    # a state episode under way goes on with the weakest metric's own score, as at any reading
    under_way = fold_moves(young, readings(1000), {DEVICE_WIDE_KEY})
    assert [(o.kind, o.score) for o in under_way] == [(DEVICE_WIDE_KIND, 0.99)]


def test_a_young_devices_move_holds_a_metric_resting_where_it_moved() -> None:
    """A machine's first stop with no fleet model: its speed then sits on 0 rpm, which its
    flat-line member, not knowing that rest yet, finds stuck; it rests where the move took it,
    so it is held. A reading off that rest is judged as it is."""
    moves = Moves({}, 600_000)
    young = [
        replace(obs("rms", "seasonal", 0.99, 1000, 0.15), provisional=True),
        replace(obs("rpm", "seasonal", 1.0, 1000, 0.0), provisional=True),
    ]
    stop = {1000: Reading(frozenset({"rms", "rpm"}), 1, 1005, {"rms": 0.15, "rpm": 0.0})}
    assert fold_moves(young, stop, set(), None, moves) == []
    assert moved_to(moves) == {"rms": [1000, 0.15], "rpm": [1000, 0.0]}
    flat = [obs("rpm", "flatline", 0.9, 101_000, 0.0)]
    at_rest = {101_000: Reading(frozenset({"rms", "rpm"}), 9, 101_005, {"rms": 0.17, "rpm": 0.0})}
    assert [(o.metric, o.score) for o in fold_moves(flat, at_rest, set(), None, moves)] == [
        ("rpm", CALM)
    ]
    spike = [obs("rpm", "seasonal", 0.99, 102_000, 180.0)]
    off = {102_000: Reading(frozenset({"rms", "rpm"}), 10, 102_005, {"rms": 0.17, "rpm": 180.0})}
    assert fold_moves(spike, off, set(), None, moves) == spike


def moved_to(moves: Moves) -> dict[str, Any]:
    """Each held metric's move: its event time and the value it moved to."""
    return {m: h if isinstance(h, int) else h[:2] for m, h in moves.held.items()}


def stop_then(after: list[Observation]) -> list[Observation]:
    """A machine stopping at 1000 (both metrics alerting), then ``after``."""
    return [obs("rms", "seasonal", 0.99, 1000), obs("rpm", "seasonal", 0.99, 1000), *after]


def test_the_metrics_of_a_familiar_move_are_held_until_calm_on_their_own() -> None:
    """After a stop the fleet knows, the speed's own members still alert while the vibration is
    already calm: held, across batches, while the fleet knows the readings; once the speed is
    calm on its own it is let go, and its next alert is one."""
    moves = Moves({}, 600_000)
    known = {1000, 2000, 3000, 5000}
    first = fold_moves(
        stop_then([obs("rpm", "flatline", 0.9, 2000)]),
        readings(1000, 2000),
        set(),
        lambda: known,
        moves,
    )
    assert all(o.score < 0.5 for o in first)
    # the vibration, calm on its own at 2000, was let go; the speed held with its value
    assert moved_to(moves) == {"rpm": [1000, 1.0]}
    # a later batch: the speed is still held
    later = fold_moves(
        [obs("rpm", "seasonal", 0.99, 3000)], readings(3000), set(), lambda: known, moves
    )
    assert [o.score < 0.5 for o in later] == [True]
    # the speed calm on its own at 4000: let go, and its alert at 5000 stands
    calm = fold_moves([], readings(4000), set(), lambda: known, moves)
    assert calm == []
    assert moved_to(moves) == {}
    alert = [obs("rpm", "seasonal", 0.99, 5000)]
    assert fold_moves(alert, readings(5000), set(), lambda: known, moves) == alert


def test_a_held_metric_alerts_at_a_reading_the_fleet_does_not_know() -> None:
    moves = Moves({}, 600_000)
    spike = obs("rpm", "seasonal", 0.99, 2000, 2500.0)
    at = readings(1000) | readings(2000, value=2500.0)
    out = fold_moves(stop_then([spike]), at, set(), lambda: {1000}, moves)
    assert out == [spike]


def test_a_hold_ends_after_its_time_and_spares_metrics_that_did_not_move() -> None:
    moves = Moves({"rpm": 1000}, 5_000)
    known = {3000, 9000}
    held = [obs("rpm", "flatline", 0.9, 3000), obs("temp", "seasonal", 0.99, 3000)]
    out = fold_moves(held, readings(3000, metrics=("rpm",)), set(), lambda: known, moves)
    assert [(o.metric, o.score) for o in out] == [("rpm", CALM), ("temp", 0.99)]
    late = [obs("rpm", "flatline", 0.9, 9000)]
    assert fold_moves(late, readings(9000, metrics=("rpm",)), set(), lambda: known, moves) == late
    assert moved_to(moves) == {}


def test_a_metric_resting_where_it_moved_stays_held_past_the_hold_time() -> None:
    """A machine stopped for hours, its speed never learned at rest (its vibration, calm at
    rest, keeps the device from learning a change of every metric): the speed, on 0 rpm since
    the stop, stays held while the fleet knows the readings; a burst off its rest after the
    hold time ends the hold, as the time would have."""
    moves = Moves({}, 5_000)
    stop = [obs("rms", "seasonal", 0.99, 1000, 0.15), obs("rpm", "seasonal", 0.99, 1000, 0.0)]
    hours = 6 * 3_600_000
    known = {1000, hours, hours + 1000}
    at_rest = {1000: Reading(frozenset({"rms", "rpm"}), 1, 1005, {"rms": 0.15, "rpm": 0.0})}
    fold_moves(stop, at_rest, set(), lambda: known, moves)
    assert moved_to(moves) == {"rms": [1000, 0.15], "rpm": [1000, 0.0]}
    late = [obs("rpm", "flatline", 0.9, hours, 0.0)]
    still = {hours: Reading(frozenset({"rms", "rpm"}), 9, hours + 5, {"rms": 0.17, "rpm": 0.0})}
    out = fold_moves(late, still, set(), lambda: known, moves)
    assert [(o.metric, o.score) for o in out] == [("rpm", CALM)]
    assert moved_to(moves) == {"rpm": [1000, 0.0]}  # the vibration, calm on its own, let go
    burst = [obs("rpm", "seasonal", 0.99, hours + 1000, 180.0)]
    off = readings(hours + 1000, value=180.0)
    assert fold_moves(burst, off, set(), lambda: known, moves) == burst
    assert moved_to(moves) == {}


def test_without_a_fleet_nothing_is_held() -> None:
    moves = Moves({}, 600_000)
    out = fold_moves(stop_then([]), readings(1000), set(), None, moves)
    assert [o.kind for o in out] == [DEVICE_WIDE_KIND]
    assert moved_to(moves) == {}


def test_a_lone_alert_whose_partners_moved_with_it_is_a_familiar_move() -> None:
    """A stop the vibration's wide band hides: only the speed alerts, at a reading the fleet
    knows but would not with the speed back at its expected value (a running machine without
    its vibration) — so the vibration did move with it: the speed is held, its alerts after
    too. A dip the fleet would know with the speed back alerts; so does any alert at a reading
    the fleet does not know."""
    moves = Moves({}, 600_000)
    stop = [obs("rpm", "seasonal", 0.99, 1000, 0.0), obs("rpm", "level", 0.95, 2000, 1300.0)]
    out = fold_moves(
        stop, readings(1000, 2000), set(), lambda: {1000, 2000}, moves, lambda t, back: False
    )
    assert [o.score for o in out] == [CALM, CALM]
    assert moved_to(moves) == {"rpm": [1000, 1.0]}
    asked: list[tuple[int, dict[str, float]]] = []

    def running(event_ms: int, back: dict[str, float]) -> bool:
        asked.append((event_ms, back))
        return True

    dip = [obs("rpm", "seasonal", 0.99, 1000, 1300.0)]
    moves = Moves({}, 600_000)
    assert fold_moves(dip, readings(1000), set(), lambda: {1000}, moves, running) == dip
    assert asked == [(1000, {"rpm": 0.0})], "asked with the speed at its expected value"
    assert moved_to(moves) == {}
    unknown = fold_moves(dip, readings(1000), set(), lambda: set(), moves, lambda t, b: False)
    assert unknown == dip
    assert moved_to(moves) == {}


def test_a_held_metric_that_leaves_the_state_it_moved_to_alerts() -> None:
    """A machine started at 1000 (a state the fleet knows) runs at 1,480 ± 4 rpm; its speed's
    members, which learned it stopped, alert at every reading, as the vibration's do: every
    reading is the device's move, held. A spike of 400 rpm
    at a reading the fleet knows (its range is wide) leaves the running state: it alerts, and
    the running readings after it are held again."""
    moves = Moves({}, 600_000)
    start = [obs("rms", "seasonal", 0.99, 1000, 4.0), obs("rpm", "seasonal", 0.99, 1000, 1480.0)]
    running = {1000: Reading(frozenset({"rms", "rpm"}), 1, 1005, {"rms": 4.0, "rpm": 1480.0})}
    wobble = [3.0, -5.0, 4.0, 0.0, -2.0, 6.0, -4.0, 1.0, -1.0, 2.0] * (STATE_READINGS // 10 + 1)
    found = list(start)
    for i, dv in enumerate(wobble):
        t = 2000 + 1000 * i
        running[t] = Reading(
            frozenset({"rms", "rpm"}), t // 1000, t + 5, {"rms": 4.0, "rpm": 1480 + dv}
        )
        found += [obs("rms", "seasonal", 0.95, t, 4.0), obs("rpm", "seasonal", 0.99, t, 1480 + dv)]
    spike_t = 2000 + 1000 * len(wobble)
    after_t = spike_t + 1000
    for t, rpm in ((spike_t, 1880.0), (after_t, 1482.0)):
        running[t] = Reading(frozenset({"rms", "rpm"}), t // 1000, t + 5, {"rms": 4.0, "rpm": rpm})
    spike = obs("rpm", "seasonal", 0.99, spike_t, 1880.0)
    after = obs("rpm", "seasonal", 0.99, after_t, 1482.0)
    found += [obs("rms", "seasonal", 0.95, spike_t, 4.0), spike]
    found += [obs("rms", "seasonal", 0.95, after_t, 4.0), after]
    out = fold_moves(found, running, set(), lambda: set(running), moves)
    alerting = [(o.metric, o.event_ms) for o in out if o.score >= 0.5]
    assert alerting == [("rpm", spike_t)]
    assert moved_to(moves)["rpm"][1] == 1482.0
    n = moves.held["rpm"][2]
    assert n == len(wobble) + 2, "the running readings joined the state; the spike did not"


def test_a_metric_resting_where_it_moved_alerts_when_it_leaves_its_rest() -> None:
    """A stopped machine's speed rests on 0 rpm: a burst of 100 rpm on it, inside the hold
    time, leaves that state and its alert stands."""
    moves = Moves({}, 600_000)
    stop = [obs("rms", "seasonal", 0.99, 1000, 0.15), obs("rpm", "seasonal", 0.99, 1000, 0.0)]
    end = 1000 * (STATE_READINGS + 2)
    rest = {
        t: Reading(frozenset({"rms", "rpm"}), t // 1000, t + 5, {"rms": 0.15, "rpm": 0.0})
        for t in range(1000, end, 1000)
    }
    found = list(stop) + [obs("rpm", "flatline", 0.9, t, 0.0) for t in range(2000, end, 1000)]
    assert all(o.score < 0.5 for o in fold_moves(found, rest, set(), lambda: set(rest), moves))
    burst = [obs("rpm", "seasonal", 0.99, end, 100.0)]
    off = {
        end: Reading(frozenset({"rms", "rpm"}), end // 1000, end + 5, {"rms": 0.15, "rpm": 100.0})
    }
    assert fold_moves(burst, off, set(), lambda: {end}, moves) == burst


def test_every_held_metric_leaving_its_state_at_once_is_the_next_move() -> None:
    """A machine that stops inside the hold of its start: both metrics leave the running state
    together, to a reading the fleet knows — the device's next move, no alert, its metrics held
    at their new values with a fresh state."""
    moves = Moves({}, 600_000)
    times = range(1000, 1000 * (STATE_READINGS + 3), 1000)
    running = {
        t: Reading(frozenset({"rms", "rpm"}), t // 1000, t + 5, {"rms": 4.0, "rpm": 1480.0 + t % 3})
        for t in times
    }
    found = [
        obs(m, "seasonal", 0.99, t, running[t].values[m]) for t in times for m in ("rms", "rpm")
    ]
    assert all(o.score < 0.5 for o in fold_moves(found, running, set(), lambda: set(times), moves))
    stop_t = times[-1] + 1000
    stop = {stop_t: Reading(frozenset({"rms", "rpm"}), 99, stop_t + 5, {"rms": 0.15, "rpm": 0.0})}
    found = [obs("rms", "seasonal", 0.99, stop_t, 0.15), obs("rpm", "seasonal", 0.99, stop_t, 0.0)]
    assert fold_moves(found, stop, set(), lambda: {stop_t}, moves) == []
    assert moves.held == {"rms": [stop_t, 0.15, 1, 0.15, 0.0], "rpm": [stop_t, 0.0, 1, 0.0, 0.0]}


def resting_speed(moves: Moves, end: int) -> None:
    """A machine stopped at 1000, the fleet knowing it; its vibration let go as calm, its
    speed resting on 0 rpm and held until ``end``."""
    stop = [obs("rms", "seasonal", 0.99, 1000, 0.15), obs("rpm", "seasonal", 0.99, 1000, 0.0)]
    rest = {
        t: Reading(frozenset({"rms", "rpm"}), t // 1000, t + 5, {"rms": 0.15, "rpm": 0.0})
        for t in range(1000, end, 1000)
    }
    found = list(stop) + [obs("rpm", "level", 0.99, t, 0.0) for t in range(2000, end, 1000)]
    assert all(o.score < 0.5 for o in fold_moves(found, rest, set(), lambda: set(rest), moves))
    assert moved_to(moves) == {"rpm": [1000, 0.0]}


def test_a_resting_metric_stays_held_when_another_metric_breaks_the_reading() -> None:
    """A burst on a stopped machine's vibration: the fleet knows no stopped machine shaking
    so, but the speed still rests where it moved. The speed's own members, which never
    learned the stop, stay under the alert level (the vibration's, its wide band not yet
    passed, are its own)."""
    moves = Moves({}, 600_000)
    end = 1000 * (STATE_READINGS + 2)
    resting_speed(moves, end)
    burst = [obs("rms", "seasonal", 0.3, end, 4.9), obs("rpm", "level", 0.99, end, 0.0)]
    shaking = {
        end: Reading(frozenset({"rms", "rpm"}), end // 1000, end + 5, {"rms": 4.9, "rpm": 0.0})
    }
    out = fold_moves(burst, shaking, set(), lambda: set(), moves, lambda t, back: False)
    assert [(o.metric, o.score) for o in out] == [("rms", 0.3), ("rpm", CALM)]
    moved = {
        end: Reading(frozenset({"rms", "rpm"}), end // 1000, end + 5, {"rms": 0.15, "rpm": 3.0})
    }
    off = [obs("rpm", "level", 0.99, end + 1000, 3.0)]
    assert fold_moves(off, moved, set(), lambda: set(), moves) == off, "off its rest: it alerts"


def test_a_resting_metric_leaving_its_rest_with_its_partner_is_a_restart() -> None:
    """The stopped machine starts again: only the speed alerts (its level member's window still
    holds the stop), the vibration is inside its wide band. The fleet knows the running machine,
    and would not know it with the speed back at its rest (a stopped machine shaking as a
    running one): the vibration moved with it, so the speed is held again, from its new value.
    A jump off the rest that the fleet would know with the speed back at 0 alerts."""
    moves = Moves({}, 600_000)
    end = 1000 * (STATE_READINGS + 2)
    resting_speed(moves, end)
    start = [obs("rpm", "level", 0.99, end, 1491.0)]
    running = {
        end: Reading(frozenset({"rms", "rpm"}), end // 1000, end + 5, {"rms": 3.9, "rpm": 1491.0})
    }
    asked: list[dict[str, float]] = []

    def stopped(event_ms: int, back: dict[str, float]) -> bool:
        asked.append(back)
        return back.get("rpm") != 0.0

    out = fold_moves(start, running, set(), lambda: {end}, moves, stopped)
    assert [o.score for o in out] == [CALM]
    assert asked == [{"rpm": 0.0}], "asked with the speed back at its rest"
    assert moves.held["rpm"][:3] == [end, 1491.0, 1]
    moves = Moves({}, 600_000)
    resting_speed(moves, end)
    out = fold_moves(start, running, set(), lambda: {end}, moves, lambda t, back: True)
    assert out == start


def test_past_its_hold_time_a_metric_stays_held_while_it_stays_in_its_state() -> None:
    """A battery recharged to 100 %: the move is one the fleet knows, and its charge sits at
    100 past the hold time while its own members, never shown a full battery, still expect
    the low charge. Its readings since the move know that state; the charge drifting down to
    99 stays in it, so its members' alerts at readings the fleet knows stay held — the state
    is its new normal. A reading far off the state (30 %) leaves it, and alerts."""
    moves = Moves({}, 5_000)
    metrics = ("soc", "volts")
    full = {"soc": 100.0, "volts": 4.2}
    times = [1000 + 1000 * i for i in range(STATE_READINGS + 5)]
    swap = [obs(m, "seasonal", 0.99, t, full[m]) for t in times for m in metrics]
    at = {t: Reading(frozenset(metrics), t // 1000, t + 5, full) for t in times}
    known = set(times) | {60_000, 61_000}
    fold_moves(swap, at, set(), lambda: known, moves)
    assert set(moves.held) == {"soc", "volts"}
    lower = {"soc": 99.0, "volts": 4.19}
    drifted = [obs("soc", "seasonal", 0.99, 60_000, 99.0)]
    later = {60_000: Reading(frozenset(metrics), 60, 60_005, lower)}
    out = fold_moves(drifted, later, set(), lambda: known, moves)
    assert [(o.metric, o.score) for o in out] == [("soc", CALM)]
    assert "soc" in moves.held, "past the hold time, still in the state it moved to"
    off = [obs("soc", "seasonal", 0.99, 61_000, 30.0)]
    far = {61_000: Reading(frozenset(metrics), 61, 61_005, {"soc": 30.0, "volts": 4.19})}
    assert fold_moves(off, far, set(), lambda: known, moves) == off
    assert "soc" not in moves.held
