"""The alert lifecycle of one device, fed observations by hand: a reading counts once, and a
joint member's break is one episode whatever metric it blames."""

from __future__ import annotations

from dataclasses import asdict

from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.registry import KINDS
from fleetwatch.streaming.scorer.episodes import JOINT, Lifecycle, Observation

PCA = PcaDetector.kind
ALERTING, BETWEEN, CALM = 0.6, 0.45, 0.1
METRICS = ("flow", "temp", "pressure")


def obs(metric: str, kind: str, score: float, seq: int) -> Observation:
    nan = float("nan")
    return Observation(metric, kind, score, seq, 1_000 * seq, 1_000 * seq, nan, nan, nan, "")


def joint_reading(blamed: str, score: float, seq: int) -> list[Observation]:
    """What the multivariate member reports of one reading: a row per metric, each naming the
    metric it blames."""
    return [obs(blamed, PCA, score, seq) for _ in METRICS]


def statuses(lifecycle: Lifecycle) -> list[tuple[str, str, int]]:
    return [(e["status"], e["metric"], e["seq"]) for e in lifecycle.events]


def test_the_joint_kinds_are_the_detectors_that_judge_a_whole_reading() -> None:
    assert PCA in JOINT
    assert {kind for kind, cls in KINDS.items() if not cls.per_metric} == JOINT
    assert "level" not in JOINT
    assert "seasonal" not in JOINT


def test_a_break_whose_blame_moves_is_one_episode_that_ends_with_the_break() -> None:
    lifecycle = Lifecycle("d", 1, 0, clear_readings=3)
    lifecycle.follow(joint_reading("flow", ALERTING, 1))
    lifecycle.follow(joint_reading("temp", ALERTING, 2))  # the same break, blamed elsewhere
    assert len(lifecycle.episodes) == 1
    # calm readings blaming yet another metric end it: the break is over
    for seq in (3, 4, 5):
        lifecycle.follow(joint_reading("pressure", CALM, seq))
    assert statuses(lifecycle) == [("open", "flow", 1), ("resolve", "flow", 5)]
    assert lifecycle.episodes == {}


def test_a_joint_episode_hears_every_metric_of_its_kind() -> None:
    lifecycle = Lifecycle("d", 1, 0)
    lifecycle.follow(joint_reading("flow", ALERTING, 1))
    lifecycle.observe(obs("temp", "level", ALERTING, 1))
    heard = lifecycle.keys_heard(METRICS)
    assert {f"{m}\x1f{PCA}" for m in METRICS} <= heard
    assert "temp\x1flevel" in heard
    assert "flow\x1flevel" not in heard, "a per-metric kind: its own metric's only"


def test_a_reading_counts_once_towards_the_calm_readings_that_end_an_episode() -> None:
    lifecycle = Lifecycle("d", 1, 0, clear_readings=3)
    lifecycle.follow(joint_reading("flow", ALERTING, 1))
    lifecycle.follow(joint_reading("flow", CALM, 2))  # three rows, one calm reading
    assert [s for s, _, _ in statuses(lifecycle)] == ["open"]
    lifecycle.follow(joint_reading("flow", BETWEEN, 3))  # between: the count starts again
    lifecycle.follow(joint_reading("flow", CALM, 4))
    lifecycle.follow(joint_reading("flow", CALM, 5))
    assert [s for s, _, _ in statuses(lifecycle)] == ["open"]
    lifecycle.follow(joint_reading("flow", CALM, 6))
    assert statuses(lifecycle)[-1] == ("resolve", "flow", 6)


def test_per_metric_kinds_keep_an_episode_per_metric() -> None:
    lifecycle = Lifecycle("d", 1, 0, clear_readings=1)
    lifecycle.observe(obs("flow", "level", ALERTING, 1))
    lifecycle.observe(obs("temp", "level", ALERTING, 1))
    lifecycle.observe(obs("temp", "level", CALM, 2))
    assert statuses(lifecycle) == [("open", "flow", 1), ("open", "temp", 1), ("resolve", "temp", 2)]
    assert list(lifecycle.episodes) == ["flow\x1flevel"]


def test_an_episode_from_an_older_state_still_resolves() -> None:
    # a state dumped before an episode remembered the reading it heard last
    before = Lifecycle("d", 1, 0, clear_readings=2)
    before.follow(joint_reading("flow", ALERTING, 1))
    rows = before.dump()
    for row in rows:
        del row["heard"]
    after = Lifecycle("d", 1, 0, clear_readings=2, episodes=Lifecycle.load(rows))
    after.follow(joint_reading("temp", CALM, 2))
    after.follow(joint_reading("temp", CALM, 3))
    assert statuses(after) == [("resolve", "flow", 3)]


def test_the_state_holds_each_episodes_fields_as_asdict_gives_them() -> None:
    lifecycle = Lifecycle("d", 1, 0)
    lifecycle.follow([obs("temp", "level", ALERTING, 1), obs("flow", "dropout", ALERTING, 1)])
    episode = lifecycle.episodes["temp\x1flevel"]
    episode.filled.append(500)
    rows = lifecycle.dump()
    assert rows == [asdict(e) for e in lifecycle.episodes.values()]
    assert [list(row) for row in rows] == [list(asdict(e)) for e in lifecycle.episodes.values()]
    assert rows[0]["filled"] == [500]
    assert rows[0]["filled"] is not episode.filled
    assert Lifecycle.load(rows) == lifecycle.episodes
