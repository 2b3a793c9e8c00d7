"""A streaming job's readiness from its query (a fake with the three things read): not
started, first batch running, first batch done, idle for ten minutes, a batch stuck for
130 s, stopped, and a driver that does not answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import Py4JError

from fleetwatch.runtime import Readiness
from fleetwatch.streaming.readiness import STALLED_AFTER_S, WAITING_FOR_DATA, QueryReadiness


@dataclass
class Progress:
    batchId: int


@dataclass
class FakeQuery:
    isActive: bool = True
    status: dict[str, Any] = field(
        default_factory=lambda: {"message": "Initializing sources", "isTriggerActive": False}
    )
    lastProgress: Progress | None = None

    def batch_running(self) -> None:
        self.status = {"message": "Processing new data", "isTriggerActive": True}

    def batch_done(self, batch_id: int) -> None:
        self.status = {"message": "Waiting for next trigger", "isTriggerActive": False}
        self.lastProgress = Progress(batch_id)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_not_ready_until_the_query_is_started_and_its_first_batch_done() -> None:
    clock = Clock()
    readiness = QueryReadiness(clock=clock)
    assert readiness() == Readiness(False, {"query": "not started"})
    query = FakeQuery()
    readiness.follow(query)
    starting = readiness()
    assert not starting.ready
    assert starting.detail["reason"] == "no micro-batch completed yet"
    query.batch_running()
    assert readiness().detail["reason"] == "first micro-batch running"
    clock.now += 30
    query.batch_done(0)
    done = readiness()
    assert done.ready
    assert done.detail == {"query": "active", "last_batch": 0}


def test_an_idle_query_stays_ready_however_old_its_last_progress() -> None:
    clock = Clock()
    readiness = QueryReadiness(clock=clock)
    query = FakeQuery()
    readiness.follow(query)
    query.batch_done(4)
    assert readiness().ready
    for _ in range(60):  # 10 minutes of probes: nothing to read, no batch
        clock.now += 10
        query.status = {"message": WAITING_FOR_DATA, "isTriggerActive": False}
        assert readiness().ready
    # a probe that lands on a trigger checking its sources, then data after the long idle
    query.batch_running()
    assert readiness().ready
    clock.now += 5
    query.batch_done(5)
    assert readiness().ready


def test_a_restart_with_nothing_to_read_is_ready_once_it_has_looked() -> None:
    readiness = QueryReadiness(clock=Clock())
    query = FakeQuery(status={"message": WAITING_FOR_DATA, "isTriggerActive": False})
    readiness.follow(query)
    assert readiness().ready


def test_a_batch_running_130_s_since_the_last_progress_is_not_ready() -> None:
    clock = Clock()
    readiness = QueryReadiness(clock=clock)
    query = FakeQuery()
    readiness.follow(query)
    query.batch_done(7)
    assert readiness().ready
    query.batch_running()
    for _ in range(12):  # probes every 10 s while the batch runs: 120 s is the bound
        assert readiness().ready
        clock.now += 10
    clock.now += 10
    stuck = readiness()
    assert stuck.ready is False
    assert stuck.detail["last_batch"] == 7
    assert "130 s" in stuck.detail["reason"]
    assert STALLED_AFTER_S == 120
    query.batch_done(8)  # it finished after all
    assert readiness().ready


def test_a_stopped_query_is_not_ready() -> None:
    readiness = QueryReadiness(clock=Clock())
    query = FakeQuery()
    readiness.follow(query)
    query.batch_done(3)
    assert readiness().ready
    query.isActive = False
    assert readiness().detail == {"query": "stopped"}
    assert not readiness().ready


class Unreachable:
    """A query whose driver JVM is gone: every call fails in py4j."""

    @property
    def isActive(self) -> bool:
        raise Py4JError("An error occurred while calling o42.isActive")

    status: dict[str, Any] = {}
    lastProgress = None


def test_a_driver_that_does_not_answer_is_not_ready_with_the_reason() -> None:
    readiness = QueryReadiness(clock=Clock())
    readiness.follow(Unreachable())
    answer = readiness()
    assert answer.ready is False
    assert "Py4JError" in answer.detail["query"]


@dataclass
class Named(FakeQuery):
    name: str = "fleetwatch-train"


@dataclass
class Streams:
    active: list[Named] = field(default_factory=list)


def test_a_query_started_further_down_is_found_by_name_and_kept() -> None:
    streams = Streams()
    readiness = QueryReadiness(clock=Clock())
    readiness.follow_named(streams, "fleetwatch-train")
    assert readiness().detail == {"query": "not started"}
    query = Named()
    streams.active = [Named(name="other"), query]
    query.batch_done(0)
    assert readiness().ready
    query.isActive = False
    streams.active = []  # a stopped query leaves the session's active ones
    assert readiness().detail == {"query": "stopped"}
