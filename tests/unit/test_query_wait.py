"""Waiting on a streaming query never lets its error escape mid-shutdown."""

import pytest
from pyspark.errors import StreamingQueryException

from fleetwatch.streaming.query_loop import wait_for_query


class FakeQuery:
    def __init__(self, outcome: bool | Exception) -> None:
        self.outcome = outcome
        self.waited: list[int] = []

    def awaitTermination(self, timeout: int) -> bool:
        self.waited.append(timeout)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(("outcome", "ended"), [(False, False), (True, True)])
def test_a_running_or_finished_query_is_reported_as_such(outcome: bool, ended: bool) -> None:
    query = FakeQuery(outcome)
    assert wait_for_query(query, 1) is ended  # type: ignore[arg-type]
    assert query.waited == [1]


def test_a_query_that_ended_with_an_error_has_ended() -> None:
    query = FakeQuery(StreamingQueryException("batch 7 refused: the trainer is stopping"))
    assert wait_for_query(query, 1) is True  # type: ignore[arg-type]


def test_other_errors_are_not_swallowed() -> None:
    with pytest.raises(KeyError):
        wait_for_query(FakeQuery(KeyError("py4j gone")), 1)  # type: ignore[arg-type]
