"""The image: the Dockerfile's stages and the paths the code and the deploy files rely on,
the build context, and the Spark entrypoint the image's Kubernetes pods run (exercised with
stand-ins for java and spark-submit). Nothing is built."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.object_store import S3A_JAR
from fleetwatch.streaming.spark_session import LOCAL_FS_JAR, kafka_connector_jars
from tests.unit.deploy_support import (
    DEPLOY,
    IMAGE,
    K8S,
    REPO,
    build_args,
    copies,
    dockerfile,
    image_env,
    isolate,
    k8s_documents,
    pod_specs,
    runs,
    stage_of,
)


def test_the_image_is_built_in_three_stages_ending_with_the_runtime() -> None:
    stages = [i for i in dockerfile() if i.keyword == "FROM"]
    assert [i.stage for i in stages] == ["python-build", "jars", "runtime"]
    args = build_args()
    python_image = args["PYTHON_IMAGE"]
    assert python_image.startswith("python:3.11")
    assert stages[0].args.startswith("${PYTHON_IMAGE} ")
    assert stages[2].args.startswith("${PYTHON_IMAGE} ")  # the venv's interpreter is there too
    assert args["MAVEN_IMAGE"].startswith("maven:")
    assert "temurin-17" in args["MAVEN_IMAGE"]
    assert stages[1].args.startswith("${MAVEN_IMAGE} ")
    assert "openjdk-17-jre-headless" in runs("runtime")
    assert "mvn" not in runs("runtime")  # Maven stays in its stage


def test_the_jars_stage_resolves_the_connector_as_the_makefile_does() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile[makefile.index("$(JARS)/spark-kafka/.resolved:") :].split("\n\n")[0]
    goal = "dependency:copy-dependencies -DincludeScope=runtime"
    version_probe = "import pyspark; print(pyspark.__version__)"
    assert goal in recipe
    assert version_probe in recipe
    assert "-s $(abspath deploy/jvm/settings.xml)" in makefile
    # the Dockerfile: the version from the pyspark its first stage installed, the same pom,
    # goal and Maven settings
    assert version_probe in runs("python-build")
    assert "pip install ." in runs("python-build")
    assert (None, "deploy/jvm", "./jvm") in copies("jars")
    assert ("python-build", "/opt/fleetwatch/spark.version", "./spark.version") in copies("jars")
    jars = runs("jars")
    assert f"-f jvm/spark-kafka/pom.xml {goal}" in jars
    assert '-Dspark.version="$(cat /build/spark.version)"' in jars
    assert "-s /build/jvm/settings.xml" in jars
    assert "WORKDIR /build" in [f"{i.keyword} {i.args}" for i in stage_of("jars")]


def _spaced(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_the_jars_stage_resolves_the_s3a_connector_as_the_makefile_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile[makefile.index("$(JARS)/s3a/.resolved:") :].split("\n\n")[0]
    goal = "dependency:copy-dependencies -DincludeScope=runtime"
    assert f"cd deploy/jvm/s3a && $(MVN) {goal}" in recipe
    assert "-Dhadoop.version=$$($(HADOOP_VERSION))" in recipe
    probe = re.search(r"HADOOP_VERSION = \$\(abspath \$\(PY\)\) -c '([^']*)'", makefile)
    assert probe
    # the Dockerfile: the Hadoop version probed as the Makefile probes it, from the pyspark its
    # first stage installed, handed to the same pom and goal
    python_build = _spaced(runs("python-build"))
    assert f"-c '{_spaced(probe.group(1))}' > /opt/fleetwatch/hadoop.version" in python_build
    assert ("python-build", "/opt/fleetwatch/hadoop.version", "./hadoop.version") in copies("jars")
    jars = runs("jars")
    assert f"-f jvm/s3a/pom.xml {goal}" in jars
    assert '-Dhadoop.version="$(cat /build/hadoop.version)"' in jars
    assert "-DoutputDirectory=/jars/s3a " in jars
    # …and the build fails without the jar the code requires (object_store.S3A_JAR)
    assert f"test -f /jars/s3a/{S3A_JAR.split('*')[0]}" in jars
    # the probe runs as it stands in the Dockerfile, here on the checkout's pyspark
    (docker_probe,) = re.findall(r"-c '([^']*hadoop-client-api[^']*)'", python_build)
    version = subprocess.run(
        [sys.executable, "-c", docker_probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    # the runtime: the jars where Settings.s3a_jars_dir points, which the image's env sets
    (s3a_dest,) = [
        dest for stage, src, dest in copies("runtime") if (stage, src) == ("jars", "/jars/s3a")
    ]
    env = image_env()
    assert env["FLEETWATCH_OBJECT_STORE__JARS_DIR"] == s3a_dest
    isolate(monkeypatch, tmp_path, {k: v for k, v in env.items() if k.startswith("FLEETWATCH_")})
    assert Settings().s3a_jars_dir == Path(s3a_dest)


def test_the_runtime_puts_the_connector_where_the_code_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = image_env()
    (jars_dest,) = [
        dest for stage, _, dest in copies("runtime") if stage == "jars" and "kafka" in dest
    ]
    assert ("jars", "/jars/spark-kafka", jars_dest) in copies("runtime")
    assert "-DoutputDirectory=/jars/spark-kafka" in runs("jars")
    # the code finds the jars through Settings.spark_jars_dir, which the image's env sets
    isolate(monkeypatch, tmp_path, {k: v for k, v in env.items() if k.startswith("FLEETWATCH_")})
    settings = Settings()
    assert settings.spark_jars_dir == Path(jars_dest)
    assert env["FLEETWATCH_SPARK__JARS_DIR"] == jars_dest
    # …and kafka_connector_jars reads that directory (here a stand-in with the same names)
    stand_in = tmp_path / "jars"
    stand_in.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "hadoop-bare-naked-local-fs-0.1.0.jar"):
        (stand_in / name).touch()
    found = kafka_connector_jars(
        settings.model_copy(
            update={"spark": settings.spark.model_copy(update={"jars_dir": stand_in})}
        )
    )
    assert [Path(j).name for j in found] == [
        "hadoop-bare-naked-local-fs-0.1.0.jar",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]
    # the image's build checks for the jar kafka_connector_jars requires, and the pom brings
    # the local file system the session wants in local mode
    assert "spark-sql-kafka-0-10_2.13-" in runs("jars")
    pom = (DEPLOY / "jvm" / "spark-kafka" / "pom.xml").read_text()
    assert f"<artifactId>{LOCAL_FS_JAR.split('-*')[0]}</artifactId>" in pom


def test_the_entrypoint_is_the_fleetwatch_command_of_the_installed_package() -> None:
    (entrypoint,) = [i for i in stage_of("runtime") if i.keyword == "ENTRYPOINT"]
    command = json.loads(entrypoint.args)
    assert command == ["/usr/bin/tini", "--", "fleetwatch"]
    assert "tini" in runs("runtime")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fleetwatch"] == "fleetwatch.cli.main:app"
    venv = "/opt/fleetwatch/venv"
    assert f"python -m venv {venv}" in runs("python-build")
    assert ("python-build", venv, venv) in copies("runtime")
    assert image_env()["PATH"].split(":")[0] == f"{venv}/bin"


def test_the_runtime_runs_as_a_user_that_is_not_root_with_a_writable_run_directory() -> None:
    (user,) = [i.args for i in stage_of("runtime") if i.keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid not in {"0", "root"}
    assert f"--uid {uid}" in runs("runtime")
    assert f"--gid {gid}" in runs("runtime")
    run_dir = image_env()["FLEETWATCH_RUN_DIR"]
    assert f"chown fleetwatch:fleetwatch {run_dir}" in runs("runtime")
    # every Kubernetes pod of the image runs as that user
    checked = 0
    for doc in k8s_documents():
        for pod, containers in pod_specs(doc):
            for container in (c for c in containers if c.get("image") == IMAGE):
                own = container.get("securityContext", {}).get("runAsUser")
                assert (own or pod["securityContext"]["runAsUser"]) == int(uid), container["name"]
                checked += 1
    assert checked >= 6


def test_spark_finds_the_installed_pyspark_and_the_python_of_the_image() -> None:
    env = image_env()
    python = re.search(r"python:(\d+\.\d+)", build_args()["PYTHON_IMAGE"])
    assert python
    site_packages = f"/opt/fleetwatch/venv/lib/python{python.group(1)}/site-packages"
    assert env["SPARK_HOME"] == f"{site_packages}/pyspark"
    assert env["PYSPARK_PYTHON"] == "/opt/fleetwatch/venv/bin/python"
    assert env["JAVA_HOME"] == "/opt/java"
    assert "/opt/java" in runs("runtime")


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore's rule: the last pattern matching the path or one of its parents wins."""
    result = False
    parts = path.split("/")
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.removeprefix("!").strip("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        suffixes = ["/".join(parts[n:]) for n in range(len(parts))]
        if glob.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(s, glob[3:]) for s in suffixes)
        else:
            hit = any(fnmatch.fnmatchcase(p, glob) for p in prefixes)
        if hit:
            result = not negated
    return result


def test_the_build_context_holds_what_the_dockerfile_copies_and_little_else() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    local = [
        source
        for stage in ("python-build", "jars", "runtime")
        for from_stage, source, _ in copies(stage)
        if from_stage is None
    ]
    assert len(local) >= 5, "the Dockerfile copies from the context"
    for source in local:
        assert (REPO / source).exists(), source
        assert not _ignored(source.rstrip("/"), patterns), source
        if (REPO / source).is_dir():
            for inside in (REPO / source).rglob("*.py"):
                relative = inside.relative_to(REPO).as_posix()
                if "__pycache__" not in relative:
                    assert not _ignored(relative, patterns), relative
    left_out = [
        ".git/HEAD",
        ".venv/bin/python",
        ".run/api.db",
        "tests/unit/test_api.py",
        "deploy/.env",
        "deploy/mosquitto/passwd",
        "bench/common.py",
        "fleetwatch/__pycache__/runtime.cpython-311.pyc",
    ]
    for path in left_out:
        assert _ignored(path, patterns), path


def _fake_tools(tmp_path: Path) -> dict[str, str]:
    """A JAVA_HOME and SPARK_HOME whose java and spark-submit print their arguments."""
    for tool in ("java/bin/java", "spark/bin/spark-submit"):
        path = tmp_path / tool
        path.parent.mkdir(parents=True)
        path.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
        path.chmod(0o755)
    return {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(tmp_path / "java"),
        "SPARK_HOME": str(tmp_path / "spark"),
    }


def _spark_entrypoint(args: list[str], env: dict[str, str]) -> list[str]:
    script = DEPLOY / "spark" / "entrypoint.sh"
    done = subprocess.run(
        ["bash", str(script), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_an_executor_pod_runs_spark_s_executor_backend_as_spark_asks(tmp_path: Path) -> None:
    env = _fake_tools(tmp_path) | {
        "SPARK_CLASSPATH": "/opt/fleetwatch/jars/spark-kafka/*",
        "SPARK_CONF_DIR": "/opt/spark/conf",
        "SPARK_JAVA_OPT_10": "-Dthird=3",
        "SPARK_JAVA_OPT_0": "-Dfirst=1",
        "SPARK_JAVA_OPT_1": "-Dsecond=has spaces",
        "SPARK_EXECUTOR_MEMORY": "2048m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_APPLICATION_ID": "spark-abc",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "fleetwatch-score-exec-3",
    }
    spark_jars = f"{tmp_path}/spark/jars/*"
    assert _spark_entrypoint(["executor"], env) == [
        "-Dfirst=1",
        "-Dsecond=has spaces",
        "-Dthird=3",
        "-Xms2048m",
        "-Xmx2048m",
        "-cp",
        f"/opt/spark/conf:/opt/fleetwatch/jars/spark-kafka/*:{spark_jars}",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        *("--driver-url", "spark://CoarseGrainedScheduler@driver-svc:7078"),
        *("--executor-id", "3", "--cores", "2", "--app-id", "spark-abc"),
        *("--hostname", "10.1.2.3", "--resourceProfileId", "0"),
        *("--podName", "fleetwatch-score-exec-3"),
    ]


def test_a_driver_pod_runs_the_application_in_client_mode_within_itself(tmp_path: Path) -> None:
    env = _fake_tools(tmp_path) | {"SPARK_DRIVER_BIND_ADDRESS": "10.1.2.4"}
    args = ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "app.py", "score"]
    assert _spark_entrypoint(args, env) == [
        *("--conf", "spark.driver.bindAddress=10.1.2.4", "--deploy-mode", "client"),
        *("--properties-file", "/opt/spark/conf/spark.properties", "app.py", "score"),
    ]


def test_anything_else_runs_as_given(tmp_path: Path) -> None:
    assert _spark_entrypoint(["echo", "as", "given"], _fake_tools(tmp_path)) == ["as given"]


def test_the_pod_templates_run_the_entrypoint_the_image_holds() -> None:
    (copied,) = [dest for _, src, dest in copies("runtime") if src == "deploy/spark/entrypoint.sh"]
    (copy_line,) = [i.args for i in stage_of("runtime") if "entrypoint.sh" in i.args]
    assert "--chmod=0755" in copy_line
    for template in ("driver-pod.yaml", "executor-pod.yaml"):
        pod = yaml.safe_load((K8S / "spark" / template).read_text())
        assert pod["spec"]["containers"][0]["command"] == ["/usr/bin/tini", "--", copied]
