"""Checkpoints on any Hadoop filesystem: the settings keep URIs, an ``s3a://`` checkpoint gets
the S3A connector's confs and the abortable-stream file manager, and the checkpoint files are
read through an interface that knows no local path."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import ObjectStoreSettings, Settings, SparkSettings
from fleetwatch.streaming.checkpoint_files import join
from fleetwatch.streaming.checkpoints import committed_offsets, previous_offsets, versioned
from fleetwatch.streaming.object_store import (
    ABORTABLE_MANAGER,
    CHECKPOINT_FILE_MANAGER,
    object_store_conf,
    scheme,
)
from fleetwatch.streaming.spark_session import launch_conf, session_conf


def s3a_settings(jars: Path, **store: object) -> Settings:
    (jars / "hadoop-aws-3.5.0.jar").write_bytes(b"")
    return Settings(
        spark=SparkSettings(checkpoint_dir="s3a://fleet/checkpoints/"),
        object_store=ObjectStoreSettings(jars_dir=jars, **store),
    )


@pytest.mark.parametrize(
    "uri", ["s3a://fleet/cp", "hdfs://namenode:8020/cp", "abfss://c@acct.dfs.core.windows.net/cp"]
)
def test_a_filesystem_uri_is_kept_as_it_is(uri: str) -> None:
    settings = Settings(spark=SparkSettings(checkpoint_dir=uri + "/"))
    assert settings.checkpoint_root == uri
    assert versioned(settings.checkpoint_root, "score", 14) == f"{uri}/score-v14"


def test_a_local_path_is_made_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(spark=SparkSettings(checkpoint_dir="cp"))
    assert settings.checkpoint_root == str(tmp_path.resolve() / "cp")
    assert scheme(settings.checkpoint_root) == "file"


@pytest.mark.parametrize("uri", ["s3://fleet/cp", "s3n://fleet/cp"])
def test_s3_without_the_a_is_refused_with_the_scheme_to_use(uri: str) -> None:
    with pytest.raises(ValidationError, match="s3a://"):
        SparkSettings(checkpoint_dir=uri)


def test_the_keys_go_together() -> None:
    with pytest.raises(ValidationError, match="both or neither"):
        ObjectStoreSettings(access_key="key")


def test_an_s3a_checkpoint_gets_the_connector_and_the_abortable_file_manager(
    tmp_path: Path,
) -> None:
    settings = s3a_settings(
        tmp_path,
        endpoint="http://127.0.0.1:9000",
        region="eu-west-1",
        path_style_access=True,
        access_key="the-access-key",
        secret_key="the-secret-key",
    )
    conf = session_conf(settings)
    assert conf[CHECKPOINT_FILE_MANAGER] == ABORTABLE_MANAGER
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.executor.extraClassPath"] == f"{tmp_path.resolve()}/*"
    launched = launch_conf(settings)
    assert launched["spark.driver.extraClassPath"].endswith(f":{tmp_path.resolve()}/*")
    # the keys are set on the running JVM's Hadoop configuration, never passed as confs
    # (pyspark launches its JVM with every conf on the command line)
    every = " ".join([*conf.values(), *launched.values(), *conf, *launched])
    assert "the-access-key" not in every
    assert "the-secret-key" not in every
    assert "the-secret-key" not in repr(settings)


def test_an_operators_conf_wins_over_the_file_manager(tmp_path: Path) -> None:
    settings = s3a_settings(tmp_path).model_copy(
        update={
            "spark": SparkSettings(
                checkpoint_dir="s3a://b/cp", conf={CHECKPOINT_FILE_MANAGER: "x.Y"}
            )
        }
    )
    assert session_conf(settings)[CHECKPOINT_FILE_MANAGER] == "x.Y"


@pytest.mark.parametrize("uri", [None, "hdfs://namenode:8020/cp", "file:///var/cp"])
def test_other_filesystems_keep_the_rename_based_file_manager(uri: str | None) -> None:
    settings = Settings(spark=SparkSettings(checkpoint_dir=uri))
    assert object_store_conf(settings) == {}
    assert session_conf(settings)[CHECKPOINT_FILE_MANAGER].endswith(
        ".FileSystemBasedCheckpointFileManager"
    )


def test_an_s3a_checkpoint_without_the_connectors_jars_says_how_to_get_them(
    tmp_path: Path,
) -> None:
    settings = s3a_settings(tmp_path)
    (tmp_path / "hadoop-aws-3.5.0.jar").unlink()
    with pytest.raises(ConfigurationError, match="make setup"):
        session_conf(settings)


class StoreFiles:
    """A checkpoint in a dict keyed by URI: what the checkpoint code may do, and no more."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def exists(self, path: str) -> bool:
        return any(p == path or p.startswith(path + "/") for p in self.files)

    def names(self, folder: str) -> list[str]:
        below = (p[len(folder) + 1 :] for p in self.files if p.startswith(folder + "/"))
        return sorted({p.split("/", 1)[0] for p in below})

    def read_text(self, path: str) -> str:
        return self.files[path]

    def delete(self, path: str) -> None:
        for p in [p for p in self.files if p == path or p.startswith(path + "/")]:
            del self.files[p]


def offsets_file(offsets: dict[str, dict[str, int]]) -> str:
    return f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}'


def test_offsets_are_read_from_a_checkpoint_on_an_object_store() -> None:
    root = "s3a://fleet/checkpoints"
    old = versioned(root, "score", 13)
    files = StoreFiles(
        {
            join(old, "offsets", "9"): offsets_file({"raw": {"0": 10}}),
            join(old, "offsets", "10"): offsets_file({"raw": {"0": 12, "1": 3}}),
            join(old, "offsets", "11"): offsets_file({"raw": {"0": 20, "1": 9}}),
            join(old, "commits", "9"): "v1\n{}",
            join(old, "commits", "10"): "v1\n{}",
            join(old, "commits", ".10.crc"): "",
        }
    )
    assert committed_offsets(old, "raw", files) == {0: 12, 1: 3}
    assert previous_offsets(root, "score", 14, "raw", files) == {0: 12, 1: 3}
    files.files[join(versioned(root, "score", 14), "metadata")] = "{}"
    assert previous_offsets(root, "score", 14, "raw", files) == {}
