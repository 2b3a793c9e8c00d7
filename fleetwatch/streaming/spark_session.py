"""The Spark session every fleetwatch job starts from."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming import object_store
from fleetwatch.streaming.object_store import CHECKPOINT_FILE_MANAGER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def kafka_connector_jars(settings: Settings) -> list[str]:
    jars = sorted(str(p) for p in settings.spark_jars_dir.glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        raise ConfigurationError(
            f"Spark's Kafka connector is missing from {settings.spark_jars_dir}; run `make setup`"
        )
    return jars


CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


UDF_INLINE_BYTES = 256 * 1024 * 1024
"""Python functions up to this size are sent with each task, not as a broadcast."""


def session_conf(settings: Settings) -> dict[str, str]:
    """The Spark confs every fleetwatch session gets (besides the master and the jars)."""
    conf = {
        "spark.driver.memory": settings.spark.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # see SparkSettings.state_changelog: the state commit on every micro-batch's path
        CHANGELOG: str(settings.spark.state_changelog).lower(),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # a Python function pickled larger than this goes as a broadcast, which pyspark 4.2's
        # streaming runner of transformWithStateInPandas does not load (BROADCAST_VARIABLE_NOT_
        # LOADED): the rules' processor carries its rules, 1.5 MB for 1,000 rules of 100 devices
        "spark.broadcast.UDFCompressionThreshold": str(UDF_INLINE_BYTES),
    }
    if settings.spark.checkpoint_file_manager:
        # see SparkSettings.checkpoint_file_manager: the logs' and state's writes, every batch
        conf[CHECKPOINT_FILE_MANAGER] = settings.spark.checkpoint_file_manager
    if settings.spark.java_options:
        conf["spark.driver.extraJavaOptions"] = settings.spark.java_options
        conf["spark.executor.extraJavaOptions"] = settings.spark.java_options
    conf.update(object_store.object_store_conf(settings))  # on s3a://, its own file manager
    conf.update(settings.spark.conf)
    return conf


LOCAL_FS_JAR = "hadoop-bare-naked-local-fs-*.jar"


def launch_conf(settings: Settings) -> dict[str, str]:
    """The confs that only the driver's launch can set, when this process launches it: the
    local file system's (:func:`local_file_system_conf`) and the driver's class path."""
    conf = local_file_system_conf(settings)
    class_path = [conf.get("spark.driver.extraClassPath", "")]
    class_path += object_store.driver_class_path(settings)
    if entries := [c for c in class_path if c]:
        conf["spark.driver.extraClassPath"] = ":".join(entries)
    return conf


def local_file_system_conf(settings: Settings) -> dict[str, str]:
    """The confs that give a session launched here in local mode :attr:`~fleetwatch.contracts.
    settings.SparkSettings.local_file_system` for ``file:`` paths: the class, and its jar on
    the driver's classpath (Spark touches local files through Hadoop before ``spark.jars``
    are loaded, and in local mode the executors are the driver)."""
    impl = settings.spark.local_file_system
    if impl is None or not settings.spark.master.startswith("local"):
        return {}  # a cluster's checkpoints are not on the driver's local disk
    jars = sorted(settings.spark_jars_dir.glob(LOCAL_FS_JAR))
    if not jars:
        raise ConfigurationError(
            f"{impl} is set as the local file system, but no {LOCAL_FS_JAR} is in "
            f"{settings.spark_jars_dir}; run `make setup` (or set "
            "FLEETWATCH_SPARK__LOCAL_FILE_SYSTEM=none for Hadoop's own)"
        )
    return {"spark.hadoop.fs.file.impl": impl, "spark.driver.extraClassPath": str(jars[-1])}


def under_spark_submit() -> bool:
    """Whether ``spark-submit`` started this process, whose JVM then runs already with the
    master and confs given there (it hands the Python driver its gateway's port). A
    ``SparkConf`` made before the context cannot tell: it reads the JVM's confs only once a
    context has attached to it."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: Settings, app_name: str) -> SparkSession:
    """A session with the Kafka connector on the classpath and the workers on this interpreter.

    Under ``spark-submit`` the master given there wins over ``settings.spark.master``.
    """
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql import SparkSession

    # PySpark's context takes the worker interpreter from the environment, not from the conf:
    # without it the workers start a python that lacks pandas. An operator's value wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():  # getOrCreate() starts the JVM, with these
        builder = builder.master(settings.spark.master)
        for key, value in launch_conf(settings).items():
            builder = builder.config(key, value)
    builder = builder.config("spark.jars", ",".join(kafka_connector_jars(settings)))
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    object_store.set_credentials(session, settings)
    session.sparkContext.setLogLevel("WARN")
    logger.info("spark session %s on %s", app_name, session.sparkContext.master)
    return session
