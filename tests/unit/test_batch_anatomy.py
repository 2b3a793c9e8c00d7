"""The scorer's per-batch log line: where a micro-batch's time went."""

from fleetwatch.streaming.query_loop import batch_anatomy

PROGRESS = {
    "batchId": 9,
    "numInputRows": 1240,
    "durationMs": {
        "latestOffset": 21,
        "getBatch": 1,
        "queryPlanning": 135,
        "walCommit": 60,
        "addBatch": 923,
        "commitOffsets": 52,
        "triggerExecution": 1194,
    },
    "stateOperators": [
        {
            "operatorName": "transformWithStateInPandasExec",
            "commitTimeMs": 380,
            "allUpdatesTimeMs": 957,
            "numRowsTotal": 1064,
        }
    ],
}


def test_the_line_names_the_batch_its_rows_and_total() -> None:
    assert batch_anatomy(PROGRESS).startswith("batch 9: 1240 rows, 1194 ms (")


def test_the_line_has_every_phase_on_the_path() -> None:
    line = batch_anatomy(PROGRESS)
    for part in ("latestOffset=21", "queryPlanning=135", "walCommit=60", "addBatch=923"):
        assert part in line
    assert "commitOffsets=52" in line


def test_the_line_has_the_state_commit() -> None:
    assert "commit 380 ms, updates 957 ms, 1064 rows" in batch_anatomy(PROGRESS)


def test_a_report_without_state_or_durations_still_makes_a_line() -> None:
    assert batch_anatomy({"batchId": 0}) == "batch 0: 0 rows, ? ms ()"
