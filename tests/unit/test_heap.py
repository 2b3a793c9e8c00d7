"""A scorer worker's heap: frozen once, its young generation collected less often."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from fleetwatch import heap


@pytest.fixture
def thresholds() -> Iterator[None]:
    kept = gc.get_threshold()
    yield
    gc.set_threshold(*kept)


@pytest.mark.usefixtures("thresholds")
def test_a_worker_freezes_once_and_collects_its_young_generation_less_often(
    monkeypatch: Any,
) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(heap, "_settled", False)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    gc.set_threshold(700, 10, 10)
    heap.settle_worker()
    assert frozen == [1]
    assert gc.get_threshold() == (heap.WORKER_YOUNG_THRESHOLD, 10, 10)
    gc.set_threshold(700, 10, 10)
    heap.settle_worker()  # a later task in the same worker
    assert frozen == [1]
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("thresholds")
def test_the_scorer_operator_settles_its_worker_when_it_starts(monkeypatch: Any) -> None:
    """The operator's ``init`` runs in the Python worker, first in every task."""
    from fleetwatch.contracts.settings import Settings
    from fleetwatch.streaming.scorer.processor import device_scorer

    calls: list[int] = []
    monkeypatch.setattr(
        "fleetwatch.streaming.scorer.processor.settle_worker", lambda: calls.append(1)
    )

    class Handle:
        def getMapState(self, *args: Any) -> object:
            return object()

        def getValueState(self, *args: Any) -> object:
            return object()

    device_scorer(Settings()).init(Handle())
    assert calls == [1]
