"""The "model from code" file MLflow copies into every fleet model and runs when loading it."""

from mlflow.models import set_model

from fleetwatch.models.fleet_pyfunc import FleetPcaModel

set_model(FleetPcaModel())
