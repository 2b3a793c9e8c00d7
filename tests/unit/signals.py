"""Generated device readings for the detector tests: a daily cycle, correlated metrics, noise,
and the anomalies each detector is responsible for. Fixed seeds; long form like the scorer's."""

from __future__ import annotations

import numpy as np
import pandas as pd

INTERVAL_MS = 5 * 60_000
DAY = 24 * 3600 * 1000 // INTERVAL_MS
"""Readings per day."""
TRAIN = 4 * DAY
TEST = 600
AT = 300
"""Index of the first anomalous reading in the test part."""
SCENARIOS = ("spike", "shift", "drift", "flat", "dropout", "decoupled")


def wide(n: int, seed: int, start: int = 0) -> pd.DataFrame:
    """Two metrics that follow a daily cycle and a shared factor, with their own noise."""
    rng = np.random.default_rng(seed)
    i = np.arange(start, start + n)
    daily = np.sin(2 * np.pi * i / DAY)
    factor = rng.normal(0.0, 1.0, n)
    return pd.DataFrame(
        {
            "event_ms": i.astype(np.int64) * INTERVAL_MS,
            "temperature": 21.0 + 2.0 * daily + 0.8 * factor + rng.normal(0.0, 0.3, n),
            "humidity": 50.0 - 3.0 * daily - 2.0 * factor + rng.normal(0.0, 0.5, n),
        }
    )


def long(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.melt(id_vars=["event_ms"], var_name="metric", value_name="value")
    return out.sort_values("event_ms", kind="stable").reset_index(drop=True)


def train(seed: int = 1) -> pd.DataFrame:
    return long(wide(TRAIN, seed))


def after_training(scenario: str | None, seed: int = 2, n: int = TEST) -> pd.DataFrame:
    """The readings after training, with ``scenario`` starting at index :data:`AT`."""
    w = wide(n, seed, start=TRAIN)
    t = w["temperature"].to_numpy().copy()
    after = np.arange(n) >= AT
    if scenario == "spike":
        t[AT] += 12.0
    elif scenario == "shift":
        t[after] += 1.5
    elif scenario == "drift":
        t[after] += 0.004 * (np.arange(n)[after] - AT)
    elif scenario == "flat":
        t[AT : AT + 60] = t[AT]
    elif scenario == "decoupled":
        rng = np.random.default_rng(seed + 100)
        daily = np.sin(2 * np.pi * np.arange(TRAIN, TRAIN + n) / DAY)
        other = 50.0 - 3.0 * daily - 2.0 * rng.normal(0.0, 1.0, n) + rng.normal(0.0, 0.5, n)
        w.loc[after, "humidity"] = other[after]
    w["temperature"] = t
    if scenario == "dropout":
        w = w[(w.index < AT) | (w.index >= AT + 30)]
    return long(w)


def anomaly_start_ms(scenario: str) -> int:
    return (TRAIN + AT + (30 if scenario == "dropout" else 0)) * INTERVAL_MS


def heavy_tailed_tie(n: int, seed: int, df: float | None) -> pd.DataFrame:
    """A humidity tied to its temperature, off the tie by Student-t noise of ``df`` degrees of
    freedom (``None``: Gaussian), a reading every 10 s."""
    rng = np.random.default_rng(seed)
    temp = 21.0 + 0.3 * rng.normal(size=n)
    noise = rng.normal(size=n) if df is None else rng.standard_t(df, size=n)
    return pd.DataFrame(
        {
            "event_ms": np.arange(n, dtype=np.int64) * 10_000,
            "temperature": temp,
            "humidity": 55.0 - 2.0 * (temp - 21.0) + 0.1 * noise,
        }
    )
