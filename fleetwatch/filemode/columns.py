"""Which columns of a recorded CSV are the time, the device and the values, and their parsing.

A file is read as text (so its own columns are written back unchanged); this module turns the
chosen columns into numbers:

- timestamps are ISO-8601 strings or epoch numbers. Epoch values are seconds when their median
  is below 1e11 (1e11 s is the year 5138, 1e11 ms is 1973), milliseconds otherwise. The kind is
  decided once, on the first piece of a file, and kept for the rest. Timezone-naive ISO times
  are read as UTC; times with an offset are converted to UTC;
- values are numbers; anything else (empty, ``n/a``, text, ±inf) is missing for that row only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.models.errors import ModelError

logger = logging.getLogger(__name__)

TimeKind = Literal["iso", "s", "ms"]

TIME_NAMES = ("timestamp", "time", "ts", "event_ms", "datetime")
"""Column names taken as the timestamp, case-insensitive, in this order of preference."""
DEVICE_NAMES = ("device_id", "device", "deviceid")
"""Column names taken as the device id, case-insensitive."""
EPOCH_SECONDS_BELOW = 1e11
NUMERIC_SHARE = 0.5
"""A column is numeric when at least this share of its non-empty cells are numbers."""
TIME_SHARE = 0.9
"""An unnamed column is the timestamp when at least this share of its cells are ISO times."""


class FileModeError(ModelError):
    """A file that cannot be scored: unknown or missing columns, no numeric values."""


@dataclass(frozen=True)
class FileColumns:
    """The columns of a file that :mod:`filemode` reads, and how its times are written."""

    timestamp: str
    device: str | None
    values: tuple[str, ...]
    time_kind: TimeKind


def numbers(cells: pd.Series) -> npt.NDArray[np.float64]:
    """A text column as floats; anything that is not a finite number is NaN."""
    out = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    out[~np.isfinite(out)] = np.nan
    return out


def _iso(cells: pd.Series) -> pd.Series:
    return pd.to_datetime(cells, errors="coerce", utc=True, format="ISO8601")


def _share(parsed: pd.Series, cells: pd.Series) -> float:
    filled = int((cells.astype(str).str.strip() != "").sum())
    return float(parsed.notna().sum()) / filled if filled else 0.0


def time_kind(cells: pd.Series) -> TimeKind:
    """Whether a timestamp column holds ISO times, epoch seconds or epoch milliseconds."""
    epoch = numbers(cells)
    if np.isfinite(epoch).sum() == 0 or _share(pd.Series(epoch).dropna(), cells) < NUMERIC_SHARE:
        return "iso"
    return "s" if float(np.nanmedian(np.abs(epoch))) < EPOCH_SECONDS_BELOW else "ms"


def parse_times(cells: pd.Series, kind: TimeKind) -> npt.NDArray[np.float64]:
    """Epoch milliseconds (float, NaN where the cell cannot be read as a time of ``kind``)."""
    if kind != "iso":
        epoch = numbers(cells)
        return np.round(epoch * 1000.0) if kind == "s" else np.round(epoch)
    parsed = pd.DatetimeIndex(_iso(cells))
    naive = parsed.tz_convert(None).as_unit("ms").to_numpy(dtype="datetime64[ms]")
    ms = naive.astype(np.int64).astype(np.float64)
    ms[parsed.isna()] = np.nan
    return ms


def _named(columns: Sequence[str], names: Sequence[str]) -> str | None:
    lower = {c.lower(): c for c in reversed(columns)}
    return next((lower[n] for n in names if n in lower), None)


def _check(columns: Sequence[str], name: str, what: str) -> str:
    if name not in columns:
        raise FileModeError(f"unknown {what} column {name!r}; the file has {', '.join(columns)}")
    return name


def _find_time(sample: pd.DataFrame) -> str:
    columns = [str(c) for c in sample.columns]
    named = _named(columns, TIME_NAMES)
    if named is not None:
        return named
    for column in columns:
        cells = sample[column]
        if time_kind(cells) == "iso" and _share(_iso(cells).dropna(), cells) >= TIME_SHARE:
            return column
    raise FileModeError(
        f"no timestamp column (none named {'|'.join(TIME_NAMES)} and none of ISO-8601 times); "
        "name it with --timestamp"
    )


def is_numeric(cells: pd.Series) -> bool:
    parsed = pd.Series(numbers(cells)).dropna()
    return not parsed.empty and _share(parsed, cells) >= NUMERIC_SHARE


def choose_columns(
    sample: pd.DataFrame,
    timestamp: str | None = None,
    device: str | None = None,
    values: Sequence[str] | None = None,
) -> FileColumns:
    """The file's columns: those named, else found in ``sample`` (the file's first rows, text)."""
    columns = [str(c) for c in sample.columns]
    time_col = _find_time(sample) if timestamp is None else _check(columns, timestamp, "timestamp")
    if device is None:
        named = _named(columns, DEVICE_NAMES)
        device_col = named if named != time_col else None
    else:
        device_col = _check(columns, device, "device")
    taken = {time_col, device_col}
    if values:
        chosen = tuple(_check(columns, v, "value") for v in values)
        both = taken.intersection(chosen)
        if both:
            raise FileModeError(f"column {both.pop()!r} cannot be both a value and a key")
    else:
        chosen = tuple(c for c in columns if c not in taken and is_numeric(sample[c]))
    if not chosen:
        raise FileModeError(
            f"no numeric value columns besides {time_col!r}"
            + (f" and {device_col!r}" if device_col else "")
        )
    kind = time_kind(sample[time_col])
    logger.info(
        "file columns: time %s (%s), device %s, values %s", time_col, kind, device_col, chosen
    )
    return FileColumns(time_col, device_col, chosen, kind)
