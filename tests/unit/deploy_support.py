"""What the deployment tests share: the repository's deploy files read as data (the
Dockerfile's instructions by stage, the compose file with Compose's interpolation, the
Kubernetes documents and their pod specs), and the Settings a process builds from the
environment those files give it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from fleetwatch.contracts.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"fleetwatch:{VERSION}"

STAGES = {"gateway": "gateway", "scorer": "score", "trainer": "train", "api": "api"}
"""Compose service → the fleetwatch command it runs, for every long-running stage."""


PENDING_FIELDS = {("gateway", "metrics_port"), ("score", "metrics_port"), ("train", "metrics_port")}
"""Settings the stages' metrics exporters bring (the deploy files set them already). Until
they are fields of Settings, the settings checks leave them out; from then on they are checked
like every other."""


# --- the Dockerfile -------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: str
    """The stage's name (``FROM … AS name``); "" before the first FROM."""
    keyword: str
    args: str


def dockerfile() -> list[Instruction]:
    lines: list[str] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    out, stage = [], ""
    for line in lines:
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            named = re.search(r"\s+AS\s+(\S+)$", args, re.IGNORECASE)
            assert named, f"every stage is named: {line}"
            stage = named.group(1)
        out.append(Instruction(stage, keyword.upper(), args.strip()))
    return out


def stage_of(name: str) -> list[Instruction]:
    found = [i for i in dockerfile() if i.stage == name]
    assert found, f"no stage {name!r}"
    return found


def build_args() -> dict[str, str]:
    return dict(i.args.split("=", 1) for i in dockerfile() if i.stage == "" and i.keyword == "ARG")


def image_env() -> dict[str, str]:
    """The runtime stage's ENV, in order, ``$PATH``-style references left as they are."""
    env: dict[str, str] = {}
    for i in stage_of("runtime"):
        if i.keyword == "ENV":
            env |= dict(pair.split("=", 1) for pair in shlex.split(i.args))
    return env


def copies(stage: str) -> list[tuple[str | None, str, str]]:
    """(``--from`` stage or None, source, destination) of each COPY of a stage."""
    out: list[tuple[str | None, str, str]] = []
    for i in stage_of(stage):
        if i.keyword != "COPY":
            continue
        words = shlex.split(i.args)
        source_stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
        paths = [w for w in words if not w.startswith("--")]
        out.extend((source_stage, src, paths[-1]) for src in paths[:-1])
    return out


def runs(stage: str) -> str:
    return "\n".join(i.args for i in stage_of(stage) if i.keyword == "RUN")


# --- compose --------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def env_example() -> dict[str, str]:
    out = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip()
    return out


_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}|\$(\w+)")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``${X}``, ``${X:-default}``, ``${X:?error}``, ``$X``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3)
        if name in env and (env[name] or operator not in {":-", ":?"}):
            return env[name]
        if operator in {":-", "-"}:
            return argument
        if operator in {":?", "?"}:
            raise AssertionError(f"${{{name}}} is required and not in .env.example: {argument}")
        return ""

    return _VARIABLE.sub(one, value)


def fleetwatch_services() -> dict[str, dict[str, Any]]:
    """Every compose service that is a fleetwatch process: it builds the image or sets a
    fleetwatch setting."""
    return {
        name: service
        for name, service in compose()["services"].items()
        if "build" in service
        or any(k.startswith("FLEETWATCH_") for k in service.get("environment", {}))
    }


def compose_env(service: str, dotenv: dict[str, str] | None = None) -> dict[str, str]:
    """A service's environment with .env.example's values, and ``dotenv``'s over them."""
    raw = compose()["services"][service].get("environment", {})
    return {k: interpolate(str(v), env_example() | (dotenv or {})) for k, v in raw.items()}


# --- the settings a process gets -------------------------------------------------------------


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]) -> None:
    """Only ``env`` as fleetwatch's environment, no .env file."""
    for name in list(os.environ):
        if name.startswith("FLEETWATCH_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)


def _field(path: tuple[str, ...]) -> bool:
    """Whether ``path`` names a setting: nested models' fields, and a dict's keys (one of its
    Literal's values) then its values' fields."""
    model: type[BaseModel] = Settings
    parts = list(path)
    while parts:
        info = model.model_fields.get(parts.pop(0))
        if info is None:
            return False
        if not parts:
            return True
        nested = info.annotation
        if typing.get_origin(nested) is dict:
            key, nested = typing.get_args(nested)
            if parts.pop(0) not in typing.get_args(key) or not parts:
                return False
        if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
            return False
        model = nested
    return True


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """The Settings a process gets from ``env``, after checking that each FLEETWATCH_ variable
    names a field (Settings ignores unknown top-level names, so a typo would pass silently)."""
    ours = {k: v for k, v in env.items() if k.startswith("FLEETWATCH_")}
    kept = {}
    for name, value in ours.items():
        path = tuple(name.removeprefix("FLEETWATCH_").lower().split("__"))
        if _field(path):
            kept[name] = value
        else:
            assert path in PENDING_FIELDS, f"{name} is no setting of fleetwatch"
    isolate(monkeypatch, tmp_path, kept)
    return Settings()


# --- Kubernetes -----------------------------------------------------------------------------


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def k8s_documents() -> Iterator[dict[str, Any]]:
    for path in k8s_files():
        yield from (d for d in yaml.safe_load_all(path.read_text()) if d)


def k8s_workload(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in k8s_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod_specs(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(pod spec, its containers and init containers) of a workload or pod template."""
    if doc["kind"] == "Pod":
        spec = doc["spec"]
    elif doc["kind"] in {"Deployment", "StatefulSet", "Job"}:
        spec = doc["spec"]["template"]["spec"]
    else:
        return
    yield spec, spec.get("initContainers", []) + spec["containers"]


def container_env(container: dict[str, Any], config: dict[str, str]) -> dict[str, str]:
    """A container's environment as Kubernetes makes it: ConfigMaps, then its env, with
    ``$(NAME)`` references to earlier variables expanded (secrets and fields as stand-ins)."""
    env = dict(config) if container.get("envFrom") else {}
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), variable["value"]
            )
        else:
            env[variable["name"]] = f"from-{variable['name'].lower().replace('_', '-')}"
    return env


def k8s_config() -> dict[str, str]:
    data: dict[str, str] = k8s_workload("ConfigMap", "fleetwatch-config")["data"]
    return data


def fleetwatch_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in k8s_documents():
        for _, containers in pod_specs(doc):
            for container in containers:
                if container.get("envFrom") or container.get("image") == IMAGE:
                    yield f"{doc['kind']}/{doc['metadata'].get('name', doc['kind'])}", container


# --- the Kafka broker the apache/kafka image makes of its environment ------------------------

KAFKA_IMAGE_EXCLUDES = frozenset(
    {
        "KAFKA_VERSION",
        "KAFKA_HEAP_OPT",  # sic: KAFKA_HEAP_OPTS becomes heap.opts, which the broker ignores
        "KAFKA_LOG4J_OPTS",
        "KAFKA_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_GC_LOG_OPTS",
        "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS",
        "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    }
)
"""The variables the image leaves out of the broker's properties
(docker/resources/common-scripts/kafka-propertiesSpec.json of apache/kafka)."""

KAFKA_START = DEPLOY / "kafka" / "start.sh"


def kafka_property_name(variable: str) -> str:
    """The image's ``ConvertKey`` (docker/resources/utility/utility.go): without ``KAFKA_``,
    ``_`` between two other characters becomes ``.``, then ``___`` ``-`` and ``__`` ``_``,
    lower-cased. Go's ReplaceAllStringFunc and ``re.sub`` both replace leftmost,
    non-overlapping matches, so a one-letter word between underscores is kept as Go keeps it."""
    key = variable.removeprefix("KAFKA")[1:]
    dotted = re.sub(r"[^_]_[^_]", lambda m: m.group(0).replace("_", "."), key)
    return dotted.replace("___", "-").replace("__", "_").lower()


def kafka_image_properties(env: dict[str, str]) -> dict[str, str]:
    """The properties the image's ``utility render-properties`` makes of ``env``: every
    variable starting ``KAFKA`` not excluded, renamed by :func:`kafka_property_name`. Its
    ``ListToMap`` splits ``NAME=VALUE`` at every ``=`` and keeps only two parts, so a variable
    whose value holds ``=`` is left out, silently, as the image does."""
    out = {}
    for name, value in env.items():
        if "=" in value or not name.startswith("KAFKA") or name in KAFKA_IMAGE_EXCLUDES:
            continue
        out[kafka_property_name(name)] = value
    return out


def read_properties(text: str) -> dict[str, str]:
    """A properties file of plain ``key=value`` lines (what start.sh and the image write)."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


@dataclass(frozen=True)
class KafkaBrokerFiles:
    server: dict[str, str]
    """The broker's server.properties: start.sh's file, then the image's from the env."""
    probe: dict[str, str]
    """The health check's client configuration (``--command-config``)."""
    probe_file: Path


def deployed_kafka(env: dict[str, str], workdir: Path) -> KafkaBrokerFiles:
    """What the broker container starts with, given its environment: start.sh run as the
    container runs it (its output in ``workdir``), and the image's properties appended to the
    file it wrote (docker/resources/common-scripts/configure: a server.properties in
    /mnt/shared/config gets the env's properties after its own; the later of two equal keys
    wins in Java's Properties, as in this dict)."""
    result = subprocess.run(
        ["bash", str(KAFKA_START), "true"],
        env={"PATH": os.environ["PATH"], **env, "SASL_CONFIG_DIR": str(workdir)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    written = read_properties((workdir / "server.properties").read_text())
    probe = workdir / "probe.properties"
    return KafkaBrokerFiles(
        written | kafka_image_properties(env), read_properties(probe.read_text()), probe
    )


def metrics_ports() -> dict[str, int]:
    """Where each scraped compose service serves its metrics, from its own configuration."""
    kafka_opts = compose()["services"]["kafka"]["environment"]["KAFKA_OPTS"]
    agent = re.search(r"jmx_prometheus_javaagent\.jar=(\d+):", kafka_opts)
    assert agent
    return {
        "api": int(compose_env("api")["FLEETWATCH_API__PORT"]),
        "api-replicas": int(compose_env("api-replicas")["FLEETWATCH_API__PORT"]),
        "gateway": int(compose_env("gateway")["FLEETWATCH_GATEWAY__METRICS_PORT"]),
        "scorer": int(compose_env("scorer")["FLEETWATCH_SCORE__METRICS_PORT"]),
        "trainer": int(compose_env("trainer")["FLEETWATCH_TRAIN__METRICS_PORT"]),
        "kafka": int(agent.group(1)),
    }
