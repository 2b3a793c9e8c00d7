"""The fleet model as an MLflow pyfunc: readings in, anomaly scores out, with the detector code.

The model directory holds the fleet's :class:`PcaDetector` parameters as an artifact
(``artifacts/params.json``, the same canonical JSON as on ``model.params``) and this code: it
is saved "from code" (:mod:`fleetwatch.fleet.pyfunc_code` names the model), so loading
runs fleetwatch's own scoring rather than unpickling an object. The loading environment needs
fleetwatch installed.

``predict`` takes readings in the long form every detector takes (``event_ms``, ``metric``,
``value``, optionally ``device_id``) and returns one row per input row: ``anomaly_score`` in
[0, 1], ``alert``, and the metric the score blames with its expected value. Each device's
readings are scored on their own (readings of one device at one event time form a vector).
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


def input_example(detector: PcaDetector) -> pd.DataFrame:
    """One event time of readings at the fleet's mean: the example stored with the model."""
    mean = detector.shift + (detector.sum / detector.weight if detector.weight else 0.0)
    return pd.DataFrame(
        {
            "event_ms": np.full(len(detector.metrics), detector.trained_to_ms or 0, np.int64),
            "metric": detector.metrics,
            "value": np.asarray(mean, dtype=np.float64),
        }
    )


def score_frame(detector: PcaDetector, readings: pd.DataFrame) -> pd.DataFrame:
    """Scores of long-form readings, one row per input row (per device when there is a
    ``device_id`` column)."""
    n = len(readings)
    score = np.zeros(n)
    metric = np.full(n, "", dtype=object)
    expected = np.full(n, np.nan)
    groups: list[npt.NDArray[np.intp]] = [np.arange(n)]
    if "device_id" in readings.columns:
        groups = [np.asarray(g) for g in readings.groupby("device_id", sort=False).indices.values()]
    for rows in groups:
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


class FleetPcaModel(PythonModel):
    """Scores readings with the fleet's PCA parameters."""

    detector: PcaDetector | None = None

    def load_context(self, context: Any) -> None:
        self.detector = self._load(context)

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        detector = self.detector if self.detector is not None else self._load(context)
        return score_frame(detector, model_input)

    @staticmethod
    def _load(context: Any) -> PcaDetector:
        text = Path(context.artifacts[PARAMS_ARTIFACT]).read_text()
        return PcaDetector.from_params(loads(text))
