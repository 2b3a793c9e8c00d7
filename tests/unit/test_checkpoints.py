import json
from pathlib import Path

from fleetwatch.streaming.checkpoints import (
    committed_offsets,
    previous_offsets,
    starting_offsets,
    versioned,
)


def write_batch(
    checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]], committed: bool
) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    (checkpoint / "offsets" / str(batch)).write_text(
        f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}"
    )
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_offsets_of_the_last_committed_batch_count_not_the_planned_one(tmp_path: Path) -> None:
    write_batch(tmp_path, 9, {"raw": {"0": 10, "1": 4}}, committed=True)
    write_batch(tmp_path, 10, {"raw": {"0": 12, "1": 7}}, committed=True)
    write_batch(tmp_path, 11, {"raw": {"0": 20, "1": 9}}, committed=False)  # planned, not done
    assert committed_offsets(tmp_path, "raw") == {0: 12, 1: 7}
    assert committed_offsets(tmp_path, "other") == {}


def test_a_new_plan_version_continues_from_the_newest_older_one(tmp_path: Path) -> None:
    write_batch(tmp_path / "score", 3, {"raw": {"0": 5}}, committed=True)
    write_batch(versioned(tmp_path, "score", 2), 8, {"raw": {"0": 40, "1": 2}}, committed=True)
    assert previous_offsets(tmp_path, "score", 3, "raw") == {0: 40, 1: 2}
    assert previous_offsets(tmp_path, "score", 2, "raw") == {}  # v2 has its own checkpoint


def test_a_first_run_has_nothing_to_continue_from(tmp_path: Path) -> None:
    assert previous_offsets(tmp_path, "score", 2, "raw") == {}


def test_partitions_the_old_query_never_saw_start_at_the_earliest() -> None:
    assert json.loads(starting_offsets("raw", {0: 40, 2: 3}, [0, 1, 2])) == {
        "raw": {"0": 40, "1": -2, "2": 3}
    }
