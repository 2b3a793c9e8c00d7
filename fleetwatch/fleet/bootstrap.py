"""A fleet's first fleet model, once enough devices have learned: what ``fleetwatch demo`` does
so that a newcomer sees the whole model life cycle (the trainer publishes device parameters,
they are pooled per scope and registered in MLflow, the new version is promoted to champion and
put on ``model.params``, and the scorer follows it) without typing the ``models`` commands."""

from __future__ import annotations

import logging
import threading

from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.publish import pooled_by_scope, publish_champion, read_table

logger = logging.getLogger(__name__)


def ready_scopes(settings: Settings, min_devices: int) -> dict[str, int]:
    """Scopes whose devices pooled from ``model.params`` (:func:`pooled_by_scope`) number at
    least ``min_devices``: ``{scope: devices}``."""
    pooled = pooled_by_scope(read_table(settings, timeout_s=10))
    return {scope: n for scope, (_, n) in pooled.items() if n >= min_devices}


def first_fleet_models(
    settings: Settings, min_devices: int, stop: threading.Event, every_s: float = 15.0
) -> list[str]:
    """Wait (checking every ``every_s``) until a scope has ``min_devices`` learned devices, then
    register, promote and publish a fleet model for each such scope; one line per model of what
    was done (empty when stopped first)."""
    from fleetwatch.fleet.registry import ModelRegistry  # lazy: mlflow takes a second to import

    while not stop.wait(every_s):
        scopes = ready_scopes(settings, min_devices)
        if not scopes:
            continue
        registry = ModelRegistry(settings)
        done = []
        for scope, (params, devices) in sorted(pooled_by_scope(read_table(settings)).items()):
            if scope not in scopes:
                continue
            info = registry.register(scope, params, devices=devices)
            registry.promote(info.name, int(info.version))
            published = publish_champion(settings, scope)
            where = "" if published is None else f", on model.params as fleet:{scope}"
            done.append(
                f"fleet model {info.name} v{info.version} from {devices} devices: "
                f"registered in MLflow and promoted to champion{where}"
            )
        return done
    return []
