"""The Spark confs every fleetwatch session starts with."""

import pytest

from fleetwatch.contracts.settings import Settings, SparkSettings
from fleetwatch.streaming.session import (
    CHANGELOG,
    CHECKPOINT_FILE_MANAGER,
    ROCKSDB_PROVIDER,
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
