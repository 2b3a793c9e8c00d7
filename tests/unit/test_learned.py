"""Learned arrays declared per metric (models/learned.py): started empty, grown with zero rows,
written under their names, read back with their shapes checked; ``optional`` and ``narrower``
arrays read from parameters that lack them or hold narrower rows. The detectors' own
parameters without the flat-line repeats or the change detector's local reference still load."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from fleetwatch.models import learned
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.errors import ParamsError
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.registry import load_params


@dataclass
class Held:
    width: int = 3
    sums: npt.NDArray[np.float64] = learned.per_metric(2)
    counts: npt.NDArray[np.int64] = learned.per_metric(counts=True)
    table: npt.NDArray[np.float64] = learned.per_metric(lambda h: (h.width, 2))
    late: npt.NDArray[np.float64] = learned.per_metric(optional=True)
    carry: npt.NDArray[np.float64] = learned.per_metric(4, narrower=(2,))

    def __post_init__(self) -> None:
        learned.start(self)


def test_start_grow_write_and_read() -> None:
    held = Held()
    assert held.sums.shape == (0, 2)
    assert held.table.shape == (0, 3, 2)
    assert held.counts.dtype == np.int64
    learned.grow(held, 2)
    held.sums[1] = (1.5, 2.5)
    held.counts[0] = 7
    learned.grow(held, 3)
    assert held.sums.tolist() == [[0.0, 0.0], [1.5, 2.5], [0.0, 0.0]]
    saved = learned.state(held)
    assert list(saved) == ["sums", "counts", "table", "late", "carry"]
    assert saved["counts"] == [7, 0, 0]
    again = Held()
    learned.load(again, saved, 3)
    assert learned.state(again) == saved
    assert again.counts.dtype == np.int64


def test_optional_and_narrower_arrays_read_from_older_state() -> None:
    held = Held()
    learned.grow(held, 2)
    saved = learned.state(held)
    del saved["late"]
    saved["carry"] = [[1.0, 2.0], [3.0, 4.0]]
    learned.load(held, saved, 2)
    assert held.late.tolist() == [0.0, 0.0]
    assert held.carry.tolist() == [[1.0, 2.0, 0.0, 0.0], [3.0, 4.0, 0.0, 0.0]]
    saved["carry"] = [[1.0, 2.0, 3.0]] * 2  # neither width
    with pytest.raises(ParamsError, match=r"'carry' has shape \(2, 3\), expected \(2, 4\)"):
        learned.load(held, saved, 2)
    saved["carry"] = [[0.0] * 4] * 2
    del saved["sums"]  # not optional
    with pytest.raises(ParamsError, match="'sums' is missing"):
        learned.load(held, saved, 2)


def readings(n: int, start: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(start)
    t = (start + np.arange(n)) * 1000
    frames = [
        pd.DataFrame({"event_ms": t, "metric": name, "value": rng.normal(level, 1.0, n)})
        for name, level in (("temp", 20.0), ("rpm", 1500.0))
    ]
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize(
    ("kind", "dropped"),
    [(FlatlineDetector, ("repeats",)), (ChangeDetector, ("local", "local_counts", "trends"))],
)
def test_detector_parameters_without_an_optional_array_load(
    kind: type[FlatlineDetector | ChangeDetector], dropped: tuple[str, ...]
) -> None:
    detector = kind()
    for lo in range(0, 400, 100):
        detector.learn(readings(100, lo))
    params = detector.to_params()
    params["state"] = {k: v for k, v in params["state"].items() if k not in dropped}
    again = load_params(params)
    for name in dropped:
        assert not np.asarray(getattr(again, name)).any()
        assert np.shape(getattr(again, name)) == np.shape(getattr(detector, name))
    again.score(readings(50, 400))
    again.learn(readings(50, 400))
    assert set(dropped) <= set(again.to_params()["state"])
