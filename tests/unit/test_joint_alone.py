"""A joint (PCA) model scored with no per-metric member beside it — a device that has only its
scope's champion, or a combination of the joint member alone — is told nothing of what
per-metric members found, and keeps its path for a break of one reading alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.calibration import ALERT_SCORE
from fleetwatch.models.combiner import CombinedDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.streaming.scorer.observations import observations
from fleetwatch.streaming.scorer.readings import Rows
from tests.unit import signals

SPIKES = [3050, 3420, 3777]


def tie() -> pd.DataFrame:
    """A Gaussian tie, the humidity 30 of its noise up at :data:`SPIKES` for one reading each;
    in long form."""
    wide = signals.heavy_tailed_tie(4000, seed=5, df=None)
    wide.loc[SPIKES, "humidity"] += 3.0
    return signals.long(wide)


def learned(detector: PcaDetector | CombinedDetector, frame: pd.DataFrame) -> None:
    detector.learn(frame[frame.event_ms < 3000 * 10_000])


def test_a_combination_of_the_joint_member_alone_alerts_on_a_one_reading_break() -> None:
    frame = tie()
    combined = CombinedDetector([PcaDetector()], adapt_s=None)
    learned(combined, frame)
    scored = frame[frame.event_ms >= 3000 * 10_000]
    alerting = combined.score(scored).alert
    assert sorted({int(t) // 10_000 for t in scored.event_ms[alerting]}) == SPIKES


def test_the_scorer_runs_a_champions_joint_model_alone_with_its_one_reading_path() -> None:
    frame = tie()
    champion = PcaDetector()
    learned(champion, frame)
    scored = frame[frame.event_ms >= 3000 * 10_000].reset_index(drop=True)
    rows = Rows(
        {
            "seq": np.arange(len(scored), dtype=np.int64),
            "event_ms": scored.event_ms.to_numpy(),
            "received_ms": scored.event_ms.to_numpy() + 20,
            "metric": scored.metric.to_numpy(dtype=object),
            "value": scored.value.to_numpy(),
        }
    )
    found = observations(
        rows, [(champion, "fleetwatch-humidity_temperature/1")], FixedBaseline(bands={}), set()
    )
    alerts = {o.event_ms // 10_000 for o in found if o.kind == "pca" and o.score >= ALERT_SCORE}
    assert sorted(alerts) == SPIKES
