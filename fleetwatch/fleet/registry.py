"""Fleet models in the MLflow model registry: register, list, promote, roll back, load.

Naming: one registered model per scope (a device kind, or any group of devices pooled into one
fleet model), named ``{mlflow.model_prefix}-{scope}``, e.g. ``fleetwatch-hvac``.

Aliases:

- a new version gets ``challenger``;
- :meth:`ModelRegistry.promote` moves ``champion`` to a version (by default the challenger,
  whose alias is then dropped); the champion it replaces gets ``previous-champion``, and the new
  champion records it in its tag ``fleetwatch.replaced``;
- :meth:`ModelRegistry.rollback` moves ``champion`` back to ``previous-champion``; that alias
  then follows the ``fleetwatch.replaced`` tag one step further back (or goes away), so
  repeated rollbacks walk back through the promotions.

The scorer follows ``champion``: :func:`fleetwatch.fleet.publish.publish_champion` puts
  it on ``model.params`` (``promote`` and ``rollback`` do).
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import mlflow
import mlflow.artifacts
import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Param
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet import model as fleet_model
from fleetwatch.fleet import pyfunc as fleet_pyfunc
from fleetwatch.fleet.store import client_for, experiment_id, mlflow_errors
from fleetwatch.models.errors import FleetModelError, RegistryError, UnknownModel, UnknownVersion
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.params import dumps, loads

logger = logging.getLogger(__name__)

CHAMPION = "champion"
CHALLENGER = "challenger"
PREVIOUS_CHAMPION = "previous-champion"
TAG_SCOPE = "fleetwatch.scope"
TAG_DEVICES = "fleetwatch.devices"
TAG_REPLACED = "fleetwatch.replaced"
TAG_ROLLED_BACK = "fleetwatch.rolled_back"
MODEL_DIR = "fleet-models"
"""Run artifact folder the fleet models are logged under (one sub-folder per scope)."""
_CODE = Path(fleet_pyfunc.__file__).with_name("pyfunc_code.py")
_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NOT_FOUND = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def model_name(settings: Settings, scope: str) -> str:
    """The registered model's name for a scope: ``{prefix}-{scope}``."""
    if not _SCOPE.fullmatch(scope):
        raise RegistryError(f"scope {scope!r} must be letters, digits, '_', '.' or '-'")
    return f"{settings.mlflow.model_prefix}-{scope}"


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: int
    aliases: tuple[str, ...]
    run_id: str | None
    source: str
    created_ms: int
    description: str
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, mv: ModelVersion) -> VersionInfo:
        return cls(
            name=str(mv.name),
            version=int(mv.version),
            aliases=tuple(sorted(mv.aliases or ())),
            run_id=mv.run_id or None,
            source=str(mv.source),
            created_ms=int(mv.creation_timestamp or 0),
            description=str(mv.description or ""),
            tags=dict(mv.tags or {}),
        )


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    name: str
    status: str
    params: dict[str, str]
    metrics: dict[str, float]


@dataclass(frozen=True)
class AliasMove:
    """What a promotion or a rollback did."""

    name: str
    champion: int
    replaced: int | None
    """The champion before the move (``None`` when there was none)."""


class ModelRegistry:
    """The fleet models of one MLflow store (the embedded one or a server's)."""

    def __init__(self, settings: Settings, client: MlflowClient | None = None) -> None:
        self.settings = settings
        self.client = client or client_for(settings)

    # -- registering ---------------------------------------------------------------------------

    def register(
        self,
        scope: str,
        params: Mapping[str, Any],
        *,
        run_id: str | None = None,
        devices: int | None = None,
    ) -> VersionInfo:
        """Log ``params`` (a fleet model's, :mod:`~fleetwatch.fleet.model`; the shape before
        it is read and logged in the current one) as a pyfunc model in ``run_id`` (a new run of
        the training experiment when ``None``), register it as a new version of
        ``{prefix}-{scope}`` and give it the ``challenger`` alias."""
        name = model_name(self.settings, scope)
        try:
            detector, tails = fleet_model.load(params)
            pca, fields = fleet_model.parts(params)
        except FleetModelError as exc:
            raise FleetModelError(f"{name}: {exc}") from exc
        current = fleet_model.compose(pca, fields)
        metrics = fleet_model.metrics_of(detector, tails)
        own_run = run_id is None
        with mlflow_errors(f"cannot log the fleet model {name}"):
            if run_id is None:
                run = self.client.create_run(
                    experiment_id(self.client, self.settings),
                    run_name=f"fleet-{scope}",
                    tags={TAG_SCOPE: scope},
                )
                run_id = str(run.info.run_id)
            artifact_uri = self._log_model(run_id, scope, current, detector, metrics)
            if own_run:
                self.client.log_batch(
                    run_id,
                    params=[
                        Param("scope", scope),
                        Param("devices", str(devices)),
                        Param("metrics", ",".join(metrics)),
                    ],
                )
                self.client.set_terminated(run_id)
        with mlflow_errors(f"cannot register {name}"):
            self._ensure_registered(name, scope)
            tags = {TAG_SCOPE: scope, "fleetwatch.kind": str(current["kind"])}
            if devices is not None:
                tags[TAG_DEVICES] = str(devices)
            for key in ("trained_from_ms", "trained_to_ms"):
                if current.get(key) is not None:
                    tags[f"fleetwatch.{key}"] = str(current[key])
            parts = "PCA and the tails" if detector is not None else "the tails"
            mv = self.client.create_model_version(
                name,
                source=artifact_uri,
                run_id=run_id,
                tags=tags,
                description=f"{parts} of {', '.join(metrics)} pooled from "
                f"{devices if devices is not None else 'an unknown number of'} device(s)",
            )
            self.client.set_registered_model_alias(name, CHALLENGER, mv.version)
        logger.info("registered %s version %s as %s (run %s)", name, mv.version, CHALLENGER, run_id)
        return self.version(name, int(mv.version))

    def _log_model(
        self,
        run_id: str,
        scope: str,
        params: Mapping[str, Any],
        detector: PcaDetector | None,
        metrics: list[str],
    ) -> str:
        path = f"{MODEL_DIR}/{scope}"
        with tempfile.TemporaryDirectory(prefix="fleetwatch-model-") as tmp:
            params_file = Path(tmp) / "params.json"
            params_file.write_text(dumps(params))
            mlflow.pyfunc.save_model(
                Path(tmp) / "model",
                python_model=str(_CODE),
                artifacts={fleet_pyfunc.PARAMS_ARTIFACT: str(params_file)},
                signature=fleet_pyfunc.SIGNATURE,
                input_example=fleet_pyfunc.input_example(detector, metrics),
                pip_requirements=[
                    f"mlflow=={mlflow.__version__}",
                    f"numpy=={np.__version__}",
                    f"pandas=={pd.__version__}",
                ],
            )
            self.client.log_artifacts(run_id, str(Path(tmp) / "model"), path)
        run = self.client.get_run(run_id)
        return f"{run.info.artifact_uri}/{path}"

    def _ensure_registered(self, name: str, scope: str) -> None:
        try:
            self.client.get_registered_model(name)
        except MlflowException as exc:
            if exc.error_code not in _NOT_FOUND:
                raise
            self.client.create_registered_model(
                name,
                tags={TAG_SCOPE: scope},
                description=f"Fleet model of scope {scope!r}: pooled tails, and PCA when "
                "its devices report two metrics or more",
            )

    # -- reading -------------------------------------------------------------------------------

    def names(self) -> list[str]:
        with mlflow_errors("cannot list the registered models"):
            out: list[str] = []
            token = None
            while True:
                page = self.client.search_registered_models(max_results=100, page_token=token)
                out.extend(str(m.name) for m in page)
                token = page.token
                if not token:
                    return sorted(out)

    def versions(self, name: str) -> list[VersionInfo]:
        """Every version of a model, oldest first, with its aliases (a version search does not
        return them in every store, so they come from the model)."""
        aliases = self._aliases(name)
        with mlflow_errors(f"cannot list the versions of {name}"):
            found = self.client.search_model_versions(f"name = '{name}'")
        out = []
        for mv in found:
            info = VersionInfo.of(mv)
            own = tuple(sorted(a for a, v in aliases.items() if v == info.version))
            out.append(replace(info, aliases=own))
        return sorted(out, key=lambda v: v.version)

    def version(
        self, name: str, version: int | None = None, alias: str | None = None
    ) -> VersionInfo:
        """One version by number or alias; with neither, the champion, else the newest."""
        aliases = self._aliases(name)
        if version is None and alias is None:
            if CHAMPION in aliases:
                alias = CHAMPION
            else:
                with mlflow_errors(f"cannot list the versions of {name}"):
                    found = self.client.search_model_versions(f"name = '{name}'")
                if not found:
                    raise UnknownVersion(f"{name} has no versions")
                version = max(int(mv.version) for mv in found)
        if alias is not None:
            if alias not in aliases:
                known = ", ".join(sorted(aliases)) or "none"
                raise UnknownVersion(f"{name} has no alias {alias!r} (aliases: {known})")
            version = aliases[alias]
        if version is None:
            raise UnknownVersion(f"{name}: no version given")
        try:
            mv = self.client.get_model_version(name, str(version))
        except MlflowException as exc:
            if exc.error_code in _NOT_FOUND:
                raise UnknownVersion(f"{name} has no version {version}") from exc
            raise RegistryError(f"cannot read {name} version {version}: {exc.message}") from exc
        return VersionInfo.of(mv)

    def run(self, run_id: str) -> RunSummary:
        with mlflow_errors(f"cannot read run {run_id}"):
            run = self.client.get_run(run_id)
        return RunSummary(
            run_id=run_id,
            name=str(run.info.run_name or ""),
            status=str(run.info.status),
            params=dict(run.data.params),
            metrics={k: float(v) for k, v in run.data.metrics.items()},
        )

    def params(self, name: str, version: int) -> dict[str, Any]:
        """The fleet parameters stored with a version."""
        info = self.version(name, version)
        uri = f"{info.source}/artifacts/{fleet_pyfunc.PARAMS_ARTIFACT}.json"
        with (
            tempfile.TemporaryDirectory(prefix="fleetwatch-params-") as tmp,
            mlflow_errors(f"cannot download the parameters of {name} version {version}"),
        ):
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=uri, dst_path=tmp, tracking_uri=self.settings.mlflow_tracking_uri
            )
            return loads(Path(local).read_text())

    def _aliases(self, name: str) -> dict[str, int]:
        try:
            model = self.client.get_registered_model(name)
        except MlflowException as exc:
            if exc.error_code in _NOT_FOUND:
                raise UnknownModel(f"no registered model {name!r}") from exc
            raise RegistryError(f"cannot read model {name!r}: {exc.message}") from exc
        return {str(a): int(v) for a, v in (model.aliases or {}).items()}

    # -- moving the champion -------------------------------------------------------------------

    def promote(self, name: str, version: int | None = None) -> AliasMove:
        """Make ``version`` (default: the challenger) the champion."""
        aliases = self._aliases(name)
        if version is None:
            if CHALLENGER not in aliases:
                raise RegistryError(f"{name} has no {CHALLENGER}; give the version to promote")
            version = aliases[CHALLENGER]
        self.version(name, version)  # exists?
        current = aliases.get(CHAMPION)
        if current == version:
            raise RegistryError(f"{name} version {version} is already the {CHAMPION}")
        with mlflow_errors(f"cannot promote {name} version {version}"):
            self.client.set_registered_model_alias(name, CHAMPION, str(version))
            if current is not None:
                self.client.set_registered_model_alias(name, PREVIOUS_CHAMPION, str(current))
                self.client.set_model_version_tag(name, str(version), TAG_REPLACED, str(current))
            if aliases.get(CHALLENGER) == version:
                self.client.delete_registered_model_alias(name, CHALLENGER)
        logger.info("%s: champion %s -> %s", name, current, version)
        return AliasMove(name, version, current)

    def rollback(self, name: str) -> AliasMove:
        """Move the champion back to the previous champion."""
        aliases = self._aliases(name)
        if PREVIOUS_CHAMPION not in aliases:
            raise RegistryError(f"{name} has no {PREVIOUS_CHAMPION} to roll back to")
        target = aliases[PREVIOUS_CHAMPION]
        current = aliases.get(CHAMPION)
        earlier = self.version(name, target).tags.get(TAG_REPLACED)
        with mlflow_errors(f"cannot roll {name} back to version {target}"):
            self.client.set_registered_model_alias(name, CHAMPION, str(target))
            if current is not None:
                self.client.set_model_version_tag(name, str(current), TAG_ROLLED_BACK, "true")
            if earlier is not None and int(earlier) != target:
                self.client.set_registered_model_alias(name, PREVIOUS_CHAMPION, earlier)
            else:
                self.client.delete_registered_model_alias(name, PREVIOUS_CHAMPION)
        logger.info("%s: rolled champion back %s -> %s", name, current, target)
        return AliasMove(name, target, current)


@dataclass(frozen=True)
class Champion:
    name: str
    version: int
    params: dict[str, Any]


def champion(settings: Settings, scope: str) -> Champion | None:
    """The ``champion`` of ``{prefix}-{scope}`` with its fleet parameters; ``None`` while there
    is no such model or no champion yet. Raises :class:`TrackingError` when MLflow fails."""
    registry = ModelRegistry(settings)
    name = model_name(settings, scope)
    try:
        info = registry.version(name, alias=CHAMPION)
    except (UnknownModel, UnknownVersion):
        return None
    logger.debug("%s champion is version %d", name, info.version)
    return Champion(name, int(info.version), registry.params(name, info.version))


def champion_params(settings: Settings, scope: str) -> dict[str, Any] | None:
    """The fleet parameters of the ``champion`` of ``{prefix}-{scope}`` (see :func:`champion`)."""
    found = champion(settings, scope)
    return None if found is None else found.params
