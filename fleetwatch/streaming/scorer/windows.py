"""Event-time window features of a device's metrics, in the scorer's state.

Windows are ``[start, start + size)`` with starts every ``slide`` (tumbling when ``slide ==
size``, sliding when smaller), aligned to the epoch like Spark's ``window()``. A scored reading
(in order, or out of order within the allowed lateness) updates every window it falls in; a
window is final once the watermark reaches its end — no reading can change it then, since a
reading behind the watermark is late and not scored. Per (window, metric) the accumulators are
``[count, sum, sum of squares, min, max]``; the features of a closed window are count, mean,
standard deviation, min and max. The newest closed window per metric goes out with the
device's state (``device.state.windows``).

Sizes: ``score.window_size_s`` and ``score.window_slide_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.readings import Rows


@dataclass(frozen=True)
class WindowSpec:
    size_ms: int
    slide_ms: int

    def __post_init__(self) -> None:
        if self.slide_ms <= 0 or self.size_ms < self.slide_ms:
            raise ValueError(
                f"windows need 0 < slide <= size, got size {self.size_ms} ms, "
                f"slide {self.slide_ms} ms"
            )

    def starts(self, event_ms: int) -> range:
        """Starts of the windows that hold ``event_ms``."""
        last = event_ms - event_ms % self.slide_ms
        first = last - (self.size_ms - 1) // self.slide_ms * self.slide_ms
        return range(first, last + 1, self.slide_ms)


def update(st: DeviceScoringState, spec: WindowSpec, kept: Rows | None, watermark_ms: int) -> None:
    """A device's batch in its windows: the ``kept`` readings (``None``: none) added, and the
    windows the watermark has passed closed, the newest closed one per metric kept in
    ``st["closed_windows"]``."""
    if kept is not None:
        add(
            st["open_windows"],
            spec,
            kept["event_ms"].tolist(),
            kept["metric"].tolist(),
            kept["value"].tolist(),
        )
    closed = close(st["open_windows"], spec, watermark_ms)
    if closed:
        st["closed_windows"] = {**st["closed_windows"], **closed}


def add(
    open_windows: dict[str, dict[str, list[float]]],
    spec: WindowSpec,
    event_ms: list[int],
    metrics: list[str],
    values: list[float],
) -> None:
    """Add readings (one per metric value) to the open windows (``{start: {metric: acc}}``,
    starts as strings: the state is JSON)."""
    for ev, metric, value in zip(event_ms, metrics, values, strict=True):
        for start in spec.starts(int(ev)):
            acc = open_windows.setdefault(str(start), {}).get(metric)
            if acc is None:
                open_windows[str(start)][metric] = [1.0, value, value * value, value, value]
            else:
                acc[0] += 1.0
                acc[1] += value
                acc[2] += value * value
                acc[3] = min(acc[3], value)
                acc[4] = max(acc[4], value)


def close(
    open_windows: dict[str, dict[str, list[float]]], spec: WindowSpec, watermark_ms: int
) -> dict[str, dict[str, Any]]:
    """Remove the windows the watermark has passed; the newest closed one per metric, as
    features."""
    newest: dict[str, dict[str, Any]] = {}
    for key in sorted((k for k in open_windows if int(k) + spec.size_ms <= watermark_ms), key=int):
        start = int(key)
        for metric, acc in open_windows.pop(key).items():
            newest[metric] = features(start, start + spec.size_ms, acc)
    return newest


def features(start_ms: int, end_ms: int, acc: list[float]) -> dict[str, Any]:
    n, total, squares, low, high = acc
    mean = total / n
    var = max(squares / n - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0
    return {
        "start_ms": start_ms,
        "end_ms": end_ms,
        "count": int(n),
        "mean": mean,
        "std": math.sqrt(var),
        "min": low,
        "max": high,
    }
