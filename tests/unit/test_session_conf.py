"""The Spark confs every fleetwatch session starts with."""

from pathlib import Path

import pytest

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import Settings, SparkSettings
from fleetwatch.streaming.object_store import CHECKPOINT_FILE_MANAGER
from fleetwatch.streaming.spark_session import (
    CHANGELOG,
    ROCKSDB_PROVIDER,
    local_file_system_conf,
    session_conf,
)


def test_state_is_on_rocksdb_with_changelog_checkpointing_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLEETWATCH_SPARK__STATE_CHANGELOG", raising=False)
    conf = session_conf(Settings())
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf[CHANGELOG] == "true"


def test_changelog_checkpointing_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_SPARK__STATE_CHANGELOG", "false")
    assert session_conf(Settings())[CHANGELOG] == "false"


def test_shuffle_partitions_come_from_the_settings() -> None:
    settings = Settings(spark=SparkSettings(shuffle_partitions=3))
    assert session_conf(settings)["spark.sql.shuffle.partitions"] == "3"


def test_checkpoints_are_written_through_the_filesystem_api_unless_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLEETWATCH_SPARK__CHECKPOINT_FILE_MANAGER", raising=False)
    conf = session_conf(Settings())
    assert conf[CHECKPOINT_FILE_MANAGER].endswith(".FileSystemBasedCheckpointFileManager")
    unset = Settings(spark=SparkSettings(checkpoint_file_manager=None))
    assert CHECKPOINT_FILE_MANAGER not in session_conf(unset)


def test_a_launched_session_writes_local_files_through_javas_file_api(tmp_path: Path) -> None:
    """The class and its jar (found in the jars dir) on the driver's classpath; none without
    the setting or on a cluster; a clear error when `make setup` has not fetched the jar."""
    jar = tmp_path / "hadoop-bare-naked-local-fs-0.1.0.jar"
    jar.write_bytes(b"")
    settings = Settings(spark=SparkSettings(jars_dir=tmp_path))
    conf = local_file_system_conf(settings)
    assert conf["spark.hadoop.fs.file.impl"] == settings.spark.local_file_system
    assert conf["spark.driver.extraClassPath"] == str(jar)
    off = Settings(spark=SparkSettings(jars_dir=tmp_path, local_file_system=None))
    assert local_file_system_conf(off) == {}
    cluster = Settings(spark=SparkSettings(jars_dir=tmp_path, master="spark://host:7077"))
    assert local_file_system_conf(cluster) == {}
    jar.unlink()
    with pytest.raises(ConfigurationError, match="make setup"):
        local_file_system_conf(settings)


def test_none_in_the_environment_unsets_an_optional_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETWATCH_SPARK__LOCAL_FILE_SYSTEM", "none")
    assert Settings().spark.local_file_system is None


def test_confs_of_the_settings_come_last_and_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "FLEETWATCH_SPARK__CONF",
        '{"spark.sql.shuffle.partitions": "5", "spark.driver.extraJavaOptions": "-Xlog:gc"}',
    )
    conf = session_conf(Settings())
    assert conf["spark.sql.shuffle.partitions"] == "5"
    assert conf["spark.driver.extraJavaOptions"] == "-Xlog:gc"


def test_the_jvms_get_the_java_options_of_the_settings() -> None:
    conf = session_conf(Settings(spark=SparkSettings(java_options="-XX:G1HeapRegionSize=4m")))
    assert conf["spark.driver.extraJavaOptions"] == "-XX:G1HeapRegionSize=4m"
    assert conf["spark.executor.extraJavaOptions"] == "-XX:G1HeapRegionSize=4m"
    unset = session_conf(Settings(spark=SparkSettings(java_options="")))
    assert "spark.driver.extraJavaOptions" not in unset


def test_the_scoring_query_runs_without_code_generation_unless_asked() -> None:
    from fleetwatch.contracts.settings import ScoreSettings
    from fleetwatch.streaming.scorer.job import query_confs

    off = query_confs(Settings())
    assert off["spark.sql.codegen.wholeStage"] == "false"
    assert off["spark.sql.codegen.factoryMode"] == "NO_CODEGEN"
    on = query_confs(Settings(score=ScoreSettings(code_generation=True)))
    assert "spark.sql.codegen.wholeStage" not in on
    assert "spark.sql.codegen.factoryMode" not in on


def test_the_scoring_query_runs_its_stateful_step_in_one_task_unless_set() -> None:
    from fleetwatch.contracts.settings import ScoreSettings
    from fleetwatch.streaming.scorer.job import query_confs

    assert query_confs(Settings())["spark.sql.shuffle.partitions"] == "1"
    two = Settings(score=ScoreSettings(shuffle_partitions=2))
    assert query_confs(two)["spark.sql.shuffle.partitions"] == "2"
