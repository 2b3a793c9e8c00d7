"""Counter-based randomness: every draw is a pure function of (seed, stream, device, seq).

A device's readings therefore do not depend on which other devices run, on how the fleet is
split across publisher processes, or on whether anomalies are switched on: the same seed gives
the same run, and a run with anomalies differs from one without exactly where the truth says.
Draws are vectorised over numpy arrays (splitmix64 finaliser).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1


def _mix(x: U64) -> U64:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _as_u64(values: npt.ArrayLike) -> U64:
    arr = np.asarray(values)
    if arr.dtype != np.uint64:
        arr = arr.astype(np.int64).astype(np.uint64)
    return arr


def uniform(seed: int, stream: int, device: npt.ArrayLike, seq: npt.ArrayLike) -> F64:
    """Uniform draws in (0, 1), one per (device, seq) pair (broadcast)."""
    key = np.full(1, (seed * 0x100000001B3 + stream) & _MASK, dtype=np.uint64)
    x = _mix(_mix(_mix(key) ^ _as_u64(device)) ^ _as_u64(seq))
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def normal(seed: int, stream: int, device: npt.ArrayLike, seq: npt.ArrayLike) -> F64:
    """Standard normal draws (Box-Muller over two uniform streams)."""
    u1 = uniform(seed, stream, device, seq)
    u2 = uniform(seed, stream + 7919, device, seq)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def student_t(seed: int, stream: int, device: npt.ArrayLike, seq: npt.ArrayLike, df: float) -> F64:
    """Student-t draws with ``df`` degrees of freedom (> 2), scaled to unit variance.

    Bailey's polar method over the two uniforms :func:`normal` uses: the radius
    ``sqrt(df·(u1^(-2/df) - 1))`` in place of Box-Muller's ``sqrt(-2 ln u1)``, which is its
    limit as ``df`` grows. So ``df = inf`` is :func:`normal` exactly, and a finite ``df``
    stretches the same draws' tails (same sign, same rank)."""
    if math.isinf(df):
        return normal(seed, stream, device, seq)
    u1 = uniform(seed, stream, device, seq)
    u2 = uniform(seed, stream + 7919, device, seq)
    radius = np.sqrt(df * np.expm1(-2.0 / df * np.log(u1)))
    return radius * np.cos(2.0 * np.pi * u2) * math.sqrt((df - 2.0) / df)


_REMEMBERED: dict[tuple[int, int, int, int], float] = {}
_REMEMBER_AT_MOST = 1 << 20


def shared_uniform(seed: int, stream: int, device: npt.ArrayLike, index: npt.ArrayLike) -> F64:
    """:func:`uniform` for draws that many readings share (a period's level, a burst's time):
    the same values, remembered, since the simulator draws for one or two readings at a time
    and a numpy call costs more than a dictionary's look-up."""
    devices, indices = np.asarray(device), np.asarray(index)
    if devices.shape != indices.shape:
        devices, indices = np.broadcast_arrays(devices, indices)
    keys = [
        (seed, stream, d, i)
        for d, i in zip(devices.ravel().tolist(), indices.ravel().tolist(), strict=True)
    ]
    values = [_REMEMBERED.get(key) for key in keys]
    missing = [j for j, value in enumerate(values) if value is None]
    if missing:
        drawn = uniform(seed, stream, devices.ravel()[missing], indices.ravel()[missing]).tolist()
        if len(_REMEMBERED) > _REMEMBER_AT_MOST:
            _REMEMBERED.clear()
        for j, value in zip(missing, drawn, strict=True):
            _REMEMBERED[keys[j]] = values[j] = value
    return np.array(values, dtype=np.float64).reshape(devices.shape)


def device_uniform(seed: int, stream: int, device: int) -> float:
    """One uniform draw that belongs to a device as a whole (its phase, its clock skew, …)."""
    return float(uniform(seed, stream, np.array([device]), np.array([0]))[0])
