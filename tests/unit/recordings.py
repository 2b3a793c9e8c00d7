"""Generated recordings for the file-mode tests: stationary noise with faults where asked."""

from __future__ import annotations

import numpy as np
import pandas as pd

START_S = 1_767_225_600  # 2026-01-01T00:00:00Z


def recording(
    rows: int = 2000,
    devices: tuple[str, ...] = ("",),
    seed: int = 1,
    spike: tuple[str, int] | None = None,
    shift_from: tuple[str, int] | None = None,
) -> pd.DataFrame:
    """One reading a minute per device (interleaved), ISO times, metrics ``temp`` and ``hum``.

    ``spike=(device, i)`` adds 10 sd to that device's i-th ``temp``; ``shift_from=(device, i)``
    adds 4 sd to its ``hum`` from the i-th reading on. Without device names there is no
    ``device_id`` column."""
    rng = np.random.default_rng(seed)
    per = rows // len(devices)
    frames = []
    for name in devices:
        temp = 20 + rng.normal(size=per)
        hum = 50 + rng.normal(size=per)
        if spike is not None and spike[0] == name:
            temp[spike[1]] += 10
        if shift_from is not None and shift_from[0] == name:
            hum[shift_from[1] :] += 4
        seconds = START_S + 60 * np.arange(per)
        frame = pd.DataFrame({"device_id": name, "s": seconds, "temp": temp, "hum": hum})
        frame["step"] = np.arange(per)
        frames.append(frame)
    both = pd.concat(frames).sort_values(["step", "device_id"], kind="stable")
    both["timestamp"] = pd.to_datetime(both["s"], unit="s").dt.strftime("%Y-%m-%dT%H:%M:%S")
    columns = ["timestamp", "device_id", "temp", "hum"] if devices != ("",) else None
    out = both[columns or ["timestamp", "temp", "hum"]].reset_index(drop=True)
    return out
