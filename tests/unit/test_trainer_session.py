"""What the trainer adds to its Spark session: glibc's allocator settings for a local JVM."""

from __future__ import annotations

import os

import pytest

from fleetwatch.contracts.settings import Settings, SparkSettings
from fleetwatch.streaming.trainer.job import (
    MALLOC_ARENAS,
    MMAP_THRESHOLD,
    local_task_slots,
    native_allocator,
)


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[16]", 16),
        ("local[3,4]", 3),
        ("local[*]", os.cpu_count() or 1),
        ("spark://host:7077", None),
        ("yarn", None),
        ("local-cluster[2,1,1024]", None),
    ],
)
def test_a_local_master_has_a_task_slot_per_thread_it_runs(master: str, slots: int | None) -> None:
    assert local_task_slots(master) == slots


def test_a_local_jvm_gets_an_arena_per_task_slot_a_fixed_mmap_threshold_and_a_cluster_none() -> (
    None
):
    local = Settings(spark=SparkSettings(master="local[2]"))
    assert native_allocator(local) == {MALLOC_ARENAS: "2", MMAP_THRESHOLD: "131072"}
    assert native_allocator(Settings(spark=SparkSettings(master="spark://host:7077"))) == {}
