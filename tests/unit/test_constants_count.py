"""The count of the detection code's constants (``bench/quality/constants.py``): which names it
finds, and how it classifies them, on a module written for the test."""

from pathlib import Path

import pytest

from bench.quality.constants import (
    ALERTING,
    DERIVED_CLASS,
    HYPER,
    PLUMBING_CLASS,
    Constant,
    census,
    summary,
)

BASE = """
BASE_Z = 4.0
LABEL = "x"
"""

DETECTOR = '''"""A detector module."""

import math
from enum import IntEnum
from typing import Final

from pkg.base import BASE_Z, LABEL

THRESHOLD = 4.5
"""Alerts above this.

More about it."""
WINDOW = 10  # readings summed
# the memo's size
CACHE_SIZE = 256
PAIR = (1, 2.5)
BAND = [0.1, -0.2]
SCALED = 2.0 * BASE_Z
LOG2 = math.log(2.0)
NATS = -math.log(THRESHOLD)
INF = float("inf")
limit: Final = 3
lower_case = 7
NAME = "level"
LABELS = ("a", "b")
ENABLED = True
FROM_STRING = LABEL
MIXED = (1, "a")
NOTHING = ()


def HELPER() -> int:
    INSIDE = 5
    return INSIDE


class Reason(IntEnum):
    NONE = 0
    DEVIATION = 2


class Holder:
    STEP = 0.05
    name = 3
    TAG = "t"


class FieldsDetector:
    window: int = 30
    label: str = "x"
    WIDTH: int = 4


class Toy:
    kind = "toy"

    def __init__(
        self, lam: float = 0.1, on: bool = True, label: str = "x", *, floor: float = BASE_Z,
        off: float | None = None,
    ) -> None:
        self.lam = lam
'''


def _census(tmp_path: Path) -> list[Constant]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "base.py").write_text(BASE)
    module = tmp_path / "pkg" / "detector.py"
    module.write_text(DETECTOR)
    return census(
        [module],
        tmp_path,
        plumbing={"pkg.detector:CACHE_SIZE": "cache"},
        derived={"pkg.detector:NATS": "THRESHOLD in nats"},
    )


def test_finds_the_numeric_constants_and_classifies_them(tmp_path: Path) -> None:
    found = _census(tmp_path)
    by_kind = {kind: [c.name for c in found if c.kind == kind] for kind in (ALERTING, HYPER)}
    assert by_kind[ALERTING] == [
        "THRESHOLD",
        "WINDOW",
        "PAIR",
        "BAND",
        "SCALED",
        "LOG2",
        "INF",
        "limit",
        "Holder.STEP",
        "FieldsDetector.WIDTH",
    ]
    assert [(c.name, c.why) for c in found if c.kind == PLUMBING_CLASS] == [("CACHE_SIZE", "cache")]
    assert [(c.name, c.why) for c in found if c.kind == DERIVED_CLASS] == [
        ("NATS", "THRESHOLD in nats")
    ]
    assert by_kind[HYPER] == ["FieldsDetector(window)", "Toy(lam)", "Toy(floor)"]
    assert {c.module for c in found} == {"pkg.detector"}


def test_reports_value_as_written_and_first_line_of_doc(tmp_path: Path) -> None:
    found = {c.name: c for c in _census(tmp_path)}
    assert found["THRESHOLD"].doc == "Alerts above this."
    assert found["WINDOW"].doc == "readings summed"
    assert found["CACHE_SIZE"].doc == "the memo's size"
    assert found["SCALED"].value == "2.0 * BASE_Z"
    assert found["Toy(floor)"].value == "BASE_Z"


def test_summary_counts_against_the_budget(tmp_path: Path) -> None:
    found = _census(tmp_path)
    assert summary(found, budget=10) == {
        "alerting": 10,
        "plumbing": 1,
        "derived": 1,
        "hyperparameter_defaults": 3,
        "budget": 10,
        "within_budget": True,
        "by_module": {"pkg.detector": 10},
    }
    assert summary(found, budget=9)["within_budget"] is False


def test_a_derived_constant_must_name_what_it_restates(tmp_path: Path) -> None:
    """A constant said to restate another, whose value does not name it, stops the count."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "base.py").write_text(BASE)
    module = tmp_path / "pkg" / "detector.py"
    module.write_text(DETECTOR)
    with pytest.raises(ValueError, match="LOG2 is said to restate THRESHOLD"):
        census([module], tmp_path, plumbing={}, derived={"pkg.detector:LOG2": "THRESHOLD"})


def test_a_float_types_limits_are_numbers(tmp_path: Path) -> None:
    """``np.finfo(…).eps`` and what is computed from it are found (as ``math.pi`` is)."""
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "limits.py"
    module.write_text(
        "import numpy as np\n"
        "EPS = float(np.finfo(np.float64).eps)\n"
        "BIG = np.iinfo(np.int64).max\n"
        "HALF = 0.5 * EPS\n"
        "OTHER = np.asarray([1.0]).size\n"
    )
    found = census([module], tmp_path, plumbing={"pkg.limits:EPS": "math"}, derived={})
    assert [(c.name, c.kind) for c in found] == [
        ("EPS", PLUMBING_CLASS),
        ("BIG", ALERTING),
        ("HALF", ALERTING),
    ]
