"""The operator's output frame as pyspark hands it to the JVM: Arrow string columns by
position, the records, tombstones, dead letters and count rows in the job's output schema."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
from pyspark.sql.conversion import PandasToArrowConversion
from pyspark.sql.types import StringType, StructField, StructType

from fleetwatch.streaming.scorer.batch_counts import COUNT_ROLE
from fleetwatch.streaming.scorer.device_step import Role
from fleetwatch.streaming.scorer.job import OUTPUT_SCHEMA
from fleetwatch.streaming.scorer.processor import OUTPUT_COLUMNS, output_frame
from fleetwatch.streaming.scorer.readings import Record, Refused

TOPICS = {role: f"topic.{role.value}" for role in Role}
SCHEMA = StructType([StructField(name, StringType()) for name in OUTPUT_COLUMNS])


def as_pyspark_sends(frame: pd.DataFrame) -> pa.RecordBatch:
    """The Arrow batch a ``transformWithStateInPandas`` worker writes for ``frame`` (its
    serializer's call, columns assigned by name as Spark's default configures it)."""
    nested = PandasToArrowConversion.convert(
        [frame],
        StructType([StructField("_0", SCHEMA)]),
        timezone="UTC",
        safecheck=True,
        arrow_cast=True,
        assign_cols_by_name=True,
    )
    return pa.RecordBatch.from_struct_array(nested.column(0))


def test_the_output_schema_is_the_plans_and_the_frames_columns_in_order() -> None:
    expected = "topic STRING, key STRING, value STRING, role STRING, headers STRING"
    assert expected == OUTPUT_SCHEMA


def test_records_tombstones_dead_letters_and_counts_reach_arrow_as_strings_and_nulls() -> None:
    session = json.dumps({"session_id": "s1"})
    records = [("d1", Role.ALERTS, '{"a":1}'), ("d1", Role.SESSIONS, session)]
    dead = [Refused("d2", Record("{oops", (2, 41)), "not JSON")]
    frame = output_frame(
        records, TOPICS, dead, "telemetry.raw", {"scored": 3}, [("d3", Role.STATE)]
    )
    batch = as_pyspark_sends(frame)
    assert batch.schema.names == list(OUTPUT_COLUMNS)
    assert all(t == pa.string() for t in batch.schema.types)
    rows = batch.to_pylist()
    assert [(r["topic"], r["key"], r["value"], r["role"]) for r in rows] == [
        ("topic.alerts", "d1", '{"a":1}', "alerts"),
        ("topic.sessions", "s1", session, "sessions"),
        ("topic.state", "d3", None, "state"),
        ("topic.deadletter", "d2", "{oops", "deadletter"),
        (None, "scored", "3", COUNT_ROLE),
    ]
    headers = [r["headers"] for r in rows]
    assert headers[:3] == [None, None, None]
    assert headers[4] is None
    assert dict(json.loads(str(headers[3])))["fw.source_offset"] == "41"


def test_an_empty_output_is_a_frame_of_no_rows_in_the_schema() -> None:
    batch = as_pyspark_sends(output_frame([], TOPICS))
    assert batch.num_rows == 0
    assert batch.schema.names == list(OUTPUT_COLUMNS)
