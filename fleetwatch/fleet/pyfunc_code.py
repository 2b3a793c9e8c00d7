"""The "model from code" file MLflow copies into every fleet model and runs when loading it."""

from mlflow.models import set_model

from fleetwatch.fleet.pyfunc import FleetPyfuncModel

set_model(FleetPyfuncModel())
