"""A detector's learned arrays with one row per metric, declared once.

Most detectors keep a few arrays with a row for each metric learned so far, in the order the
metrics were first seen: decayed sums, counts, what is carried from one batch to the next. Each
is a dataclass field declared with :func:`per_metric`, which says the shape of one row and
whether it holds float sums or integer counts; the field's name is also the array's name in the
parameters' state (:mod:`~fleetwatch.models.params`). From those declarations :func:`start`
makes the arrays empty, :func:`grow` adds zero rows for new metrics, :func:`state` writes them
and :func:`load` reads them back, checking each one's shape.

Two declarations let a detector read parameters that lack part of an array: ``optional`` (no
such field: zeros, the array starts learning) and ``narrower`` (rows of fewer values: the
missing values are zeros).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from functools import cache
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from fleetwatch.models.errors import ParamsError
from fleetwatch.models.params import array, floats, ints

Row = tuple[int, ...] | Callable[[Any], tuple[int, ...]]
"""The shape of one metric's row, or a function of the owner that gives it (for a shape the
owner's hyperparameters set)."""
_KEY = "per_metric"


class Owner(Protocol):
    """A dataclass whose fields declare its learned arrays."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


@dataclass(frozen=True)
class PerMetric:
    """How one learned array is kept (see :func:`per_metric`)."""

    row: Row
    counts: bool
    optional: bool
    narrower: tuple[int, ...]

    def shape(self, owner: Owner, metrics: int) -> tuple[int, ...]:
        row = self.row(owner) if callable(self.row) else self.row
        return (metrics, *row)

    def zeros(self, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        return np.zeros(shape, np.int64 if self.counts else np.float64)

    def read(self, state: Mapping[str, Any], name: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        if self.optional and name not in state:
            return self.zeros(shape)
        try:
            out = array(state, name, shape)
        except ParamsError as exc:
            out = self._read_narrower(state, name, shape, exc)
        return out.astype(np.int64) if self.counts else out

    def _read_narrower(
        self, state: Mapping[str, Any], name: str, shape: tuple[int, ...], exc: ParamsError
    ) -> npt.NDArray[Any]:
        """The array from rows of one of the ``narrower`` widths, padded with zeros; ``exc``
        (the error for the full width) when it has none of them."""
        for width in self.narrower:
            try:
                rows = array(state, name, (shape[0], width))
            except ParamsError:
                continue
            out = self.zeros(shape)
            out[:, :width] = rows
            return out
        raise exc


def per_metric(
    row: Row | int = (),
    *,
    counts: bool = False,
    optional: bool = False,
    narrower: tuple[int, ...] = (),
) -> Any:
    """A dataclass field for a learned array with one row per metric.

    Parameters: ``row``, the shape of one metric's row (a width for a row of values, ``()`` for
    one value, or a function of the owner); ``counts``, whether it holds integer counts (float
    sums otherwise); ``optional``, whether parameters without it load it as zeros; ``narrower``,
    the row widths it also loads from, the missing values as zeros.
    """
    shape = (row,) if isinstance(row, int) else row
    spec = PerMetric(shape, counts, optional, narrower)
    return field(init=False, repr=False, compare=False, metadata={_KEY: spec})


@cache
def _declared(cls: type[Owner]) -> tuple[tuple[str, PerMetric], ...]:
    """The learned arrays a dataclass declares, by name, in the order of its fields."""
    return tuple((f.name, f.metadata[_KEY]) for f in fields(cls) if _KEY in f.metadata)


def start(owner: Owner) -> None:
    """Make each of ``owner``'s learned arrays empty (no metric)."""
    for name, spec in _declared(type(owner)):
        setattr(owner, name, spec.zeros(spec.shape(owner, 0)))


def grow(owner: Owner, metrics: int) -> None:
    """Give each of ``owner``'s learned arrays a zero row for each metric up to ``metrics``."""
    for name, spec in _declared(type(owner)):
        held = getattr(owner, name)
        if len(held) == metrics:  # nothing to add
            continue
        more = spec.zeros(spec.shape(owner, metrics - len(held)))
        setattr(owner, name, np.concatenate([held, more]))


def state(owner: Owner) -> dict[str, Any]:
    """``owner``'s learned arrays as lists, by name."""
    return {
        name: ints(getattr(owner, name)) if spec.counts else floats(getattr(owner, name))
        for name, spec in _declared(type(owner))
    }


def load(owner: Owner, saved: Mapping[str, Any], metrics: int) -> None:
    """Read ``owner``'s learned arrays, of ``metrics`` rows each, from the state ``saved``."""
    for name, spec in _declared(type(owner)):
        setattr(owner, name, spec.read(saved, name, spec.shape(owner, metrics)))
