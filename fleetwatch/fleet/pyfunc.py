"""The fleet model as an MLflow pyfunc: readings in, anomaly scores out, with the detector code.

The model directory holds the fleet model's parameters as an artifact
(``artifacts/params.json``, the same canonical JSON as on ``model.params``,
:mod:`~fleetwatch.fleet.model`) and this code: it is saved "from code"
(:mod:`fleetwatch.fleet.pyfunc_code` names the model), so loading runs fleetwatch's own scoring
rather than unpickling an object. The loading environment needs fleetwatch installed.

``predict`` takes readings in the long form every detector takes (``event_ms``, ``metric``,
``value``, optionally ``device_id``) and returns one row per input row: ``anomaly_score`` in
[0, 1], ``alert``, and the metric the score blames with its expected value. Each device's
readings are scored on their own (readings of one device at one event time form a vector) by
the model's PCA part. A fleet model without one (a scope of single-metric devices) carries
only pooled tails, a prior for each device's own members and no detector by itself: it scores
every reading 0, blaming no metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.pyfunc.model import PythonModel
from mlflow.types import ColSpec, Schema

from fleetwatch.fleet.model import load
from fleetwatch.models.calibration import ALERT_SCORE
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.params import loads

PARAMS_ARTIFACT = "params"
"""The key (and file stem) of the parameters artifact in the model."""
SIGNATURE = ModelSignature(
    inputs=Schema(
        [
            ColSpec("long", "event_ms"),
            ColSpec("string", "metric"),
            ColSpec("double", "value"),
            ColSpec("string", "device_id", required=False),
        ]
    ),
    outputs=Schema(
        [
            ColSpec("double", "anomaly_score"),
            ColSpec("boolean", "alert"),
            ColSpec("string", "blamed_metric"),
            ColSpec("double", "expected"),
        ]
    ),
)


def input_example(detector: PcaDetector | None, metrics: list[str]) -> pd.DataFrame:
    """One event time of readings of ``metrics``: the example stored with the model, at the
    fleet's mean when it has a PCA part (else 0)."""
    if detector is None or not detector.metrics:
        return pd.DataFrame(
            {"event_ms": np.zeros(len(metrics), np.int64), "metric": metrics, "value": 0.0}
        )
    mean = detector.shift + (detector.sum / detector.weight if detector.weight else 0.0)
    return pd.DataFrame(
        {
            "event_ms": np.full(len(detector.metrics), detector.trained_to_ms or 0, np.int64),
            "metric": detector.metrics,
            "value": np.asarray(mean, dtype=np.float64),
        }
    )


def score_frame(detector: PcaDetector | None, readings: pd.DataFrame) -> pd.DataFrame:
    """Scores of long-form readings, one row per input row (per device when there is a
    ``device_id`` column); all 0 without a PCA part."""
    n = len(readings)
    score = np.zeros(n)
    metric = np.full(n, "", dtype=object)
    expected = np.full(n, np.nan)
    if detector is not None:
        for rows in _devices(readings):
            scores = detector.score(readings.iloc[rows])
            score[rows], metric[rows], expected[rows] = scores.score, scores.metric, scores.expected
    return pd.DataFrame(
        {
            "anomaly_score": score,
            "alert": score >= ALERT_SCORE,
            "blamed_metric": metric,
            "expected": expected,
        },
        index=readings.index,
    )


def _devices(readings: pd.DataFrame) -> list[npt.NDArray[np.intp]]:
    """The rows of each device (all rows: one device, without a ``device_id`` column)."""
    if "device_id" not in readings.columns:
        return [np.arange(len(readings))]
    return [np.asarray(g) for g in readings.groupby("device_id", sort=False).indices.values()]


class FleetPyfuncModel(PythonModel):
    """Scores readings with the fleet model's PCA part."""

    detector: PcaDetector | None = None
    loaded: bool = False

    def load_context(self, context: Any) -> None:
        self.detector, self.loaded = self._load(context), True

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        detector = self.detector if self.loaded else self._load(context)
        return score_frame(detector, model_input)

    @staticmethod
    def _load(context: Any) -> PcaDetector | None:
        text = Path(context.artifacts[PARAMS_ARTIFACT]).read_text()
        return load(loads(text))[0]


FleetPcaModel = FleetPyfuncModel
"""The name the code file of models logged before :class:`FleetPyfuncModel` imports."""
