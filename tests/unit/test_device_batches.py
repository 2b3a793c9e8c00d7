"""Readings packed per device for the trainer's processor, and unpacked into a batch: the same
rows in the same order as the long form, and so the same learned parameters."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fleetwatch.models.batch import Batch
from fleetwatch.models.errors import BatchError
from fleetwatch.streaming.trainer.device_rows import per_device_rows
from fleetwatch.streaming.trainer.learning import learn_device
from fleetwatch.streaming.trainer.packing import pack, pack_batches


def readings(rows: list[tuple[str, int, dict[str, float] | None]]) -> pa.RecordBatch:
    """``telemetry.raw`` record values, ``seq`` the row's place, the device clock 5 ms ahead."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array(
                [
                    json.dumps(
                        {"device_id": d, "seq": i, "event_ms": t, "device_event_ms": t + 5}
                        | ({} if m is None else {"metrics": m})
                    )
                    for i, (d, t, m) in enumerate(rows)
                ]
            )
        ],
        names=["value"],
    )


def test_each_device_becomes_one_row_of_its_readings_in_order() -> None:
    batch = readings(
        [
            ("a", 10, {"t": 1.0, "h": 2.0}),
            ("b", 11, {"t": 3.0}),
            ("a", 9, {"t": 4.0}),
            ("b", 12, None),
            ("b", 13, {"h": 5.0}),
        ]
    )
    rows = {r["device_id"]: r for r in pack(batch).to_pylist()}
    assert rows == {
        "a": {
            "device_id": "a",
            "seq": [0, 0, 2],
            "device_ms": [15, 15, 14],
            "event_ms": [10, 10, 9],
            "metric": ["t", "h", "t"],
            "value": [1.0, 2.0, 4.0],
            "newest_ms": 10,
        },
        "b": {
            "device_id": "b",
            "seq": [1, 4],
            "device_ms": [16, 18],
            "event_ms": [11, 13],
            "metric": ["t", "h"],
            "value": [3.0, 5.0],
            "newest_ms": 13,
        },
    }


def test_records_that_are_no_reading_of_a_device_are_left_out() -> None:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(
                [
                    "{broken",
                    None,
                    json.dumps({"seq": 1, "event_ms": 1, "metrics": {"t": 1.0}}),  # no device
                    json.dumps({"device_id": 7, "seq": 1, "event_ms": 1, "metrics": {"t": 1}}),
                    json.dumps({"device_id": "a", "seq": 1, "event_ms": 1, "metrics": {"t": 2e15}}),
                    json.dumps({"device_id": "a", "seq": 2, "event_ms": 2, "metrics": {"t": None}}),
                    # an event time no Spark timestamp holds
                    json.dumps(
                        {"device_id": "a", "seq": 3, "event_ms": 10**16, "metrics": {"t": 1}}
                    ),
                ]
            )
        ],
        names=["value"],
    )
    (row,) = pack(batch).to_pylist()
    assert (row["device_id"], row["seq"], row["value"]) == ("a", [2], [None])


def test_a_slice_of_a_batch_packs_only_its_own_readings() -> None:
    batch = readings([("a", 1, {"t": 1.0}), ("a", 2, {"t": 2.0}), ("a", 3, {"t": 3.0})])
    (packed,) = pack_batches([batch.slice(1, 2), batch.slice(0, 0)])
    assert packed.to_pylist() == [
        {
            "device_id": "a",
            "seq": [1, 2],
            "device_ms": [7, 8],
            "event_ms": [2, 3],
            "metric": ["t", "t"],
            "value": [2.0, 3.0],
            "newest_ms": 3,
        }
    ]


def test_a_range_of_event_time_keeps_only_its_readings() -> None:
    batch = readings([("a", t, {"t": float(t)}) for t in range(5)])
    (packed,) = pack_batches([batch], from_ms=1, to_ms=4)
    assert packed.to_pylist()[0]["event_ms"] == [1, 2, 3]


def long_form(rows: list[tuple[str, int, dict[str, float] | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"event_ms": t, "metric": m, "value": v}
            for _, t, metrics in rows
            for m, v in (metrics or {}).items()
        ]
    )


def device_rows(seed: int, start: int, n: int) -> list[tuple[str, int, dict[str, float] | None]]:
    rng = np.random.default_rng(seed)
    return [
        (
            "d",
            (start + i) * 60_000,
            {"temperature": 21 + rng.normal(), "humidity": 50 + rng.normal()},
        )
        for i in range(n)
    ]


def chunks_of(rows: list[Any], cut: int) -> list[pd.DataFrame]:
    """Packed rows as the processor gets them: pandas chunks, here from two Arrow batches."""
    parts = [readings(rows[:cut]), readings(rows[cut:])]
    return [packed.to_pandas() for batch in parts for packed in pack_batches([batch])]


def unpack(chunks: list[pd.DataFrame]) -> Batch:
    """One device's packed rows as the processor makes them into a batch."""
    ((_, rows),) = per_device_rows(chunks)
    return rows.batch()


def test_unpacked_chunks_are_the_long_form_batch() -> None:
    rows = device_rows(0, 0, 30)
    rows[5], rows[6] = rows[6], rows[5]  # out of event-time order, as a late reading can be
    got, want = unpack(chunks_of(rows, 17)), Batch.of(long_form(rows))
    np.testing.assert_array_equal(got.event_ms, want.event_ms)
    np.testing.assert_array_equal(got.value, want.value)
    np.testing.assert_array_equal(got.codes, want.codes)
    assert got.names == want.names
    np.testing.assert_array_equal(np.asarray(got.order), np.asarray(want.order))


def test_learning_the_packed_readings_equals_learning_the_long_form() -> None:
    first, second = device_rows(1, 0, 150), device_rows(2, 150, 40)
    packed = learn_device(
        learn_device(None, unpack(chunks_of(first, 60))), unpack(chunks_of(second, 7))
    )
    direct = learn_device(learn_device(None, long_form(first)), long_form(second))
    assert packed is not None
    assert packed == direct


def test_a_batch_factorises_and_groups_times_as_pandas_and_numpy_do() -> None:
    rng = np.random.default_rng(4)
    for n in (0, 1, 7, 60):
        names = np.array(["temp", "hum", "b", "Z", "é"], dtype=object)[rng.integers(0, 5, n)]
        event_ms = rng.integers(0, 5, n).astype(np.int64) * 1000
        batch = Batch.from_arrays(event_ms, names, rng.normal(size=n))
        codes, uniques = pd.factorize(names, sort=True)
        assert batch.names == tuple(uniques)
        order = np.argsort(event_ms, kind="stable")
        assert (batch.codes == codes[order]).all()
        times, inverse = np.unique(batch.event_ms, return_inverse=True)
        assert (batch.times()[0] == times).all()
        assert (batch.times()[1] == inverse).all()
    with pytest.raises(BatchError):
        Batch.from_arrays(np.zeros(2, np.int64), np.array(["a", None], dtype=object), np.zeros(2))


def test_packing_loads_no_pandas() -> None:
    """The packing step's Python workers are their own pool: packing a batch imports no pandas
    (``pa.array`` over Python objects would, to check them) and no pydantic (the record check
    reads its bounds from plain constants), so a worker holds only Arrow and the record check."""
    script = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from fleetwatch.streaming.trainer.packing import pack
        text = b'{"device_id":"a","seq":1,"event_ms":5,"metrics":{"t":1.0,"h":null}}'
        offsets = pa.py_buffer((0).to_bytes(4, "little") + len(text).to_bytes(4, "little"))
        values = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(text)])
        packed = pack(pa.RecordBatch.from_arrays([values], names=["value"]))
        assert packed.num_rows == 1, packed
        print(sorted(m for m in ("pandas", "pydantic", "scipy", "pyspark") if m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
