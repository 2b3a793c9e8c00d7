"""Checkpoints on an S3-compatible object store (``s3a://``): the Spark and Hadoop confs a
session needs, from :class:`~fleetwatch.contracts.settings.ObjectStoreSettings`.

Hadoop's S3A connector (``hadoop-aws`` at the pyspark wheel's Hadoop version, with its AWS SDK
bundle; ``make setup`` resolves them into :attr:`~fleetwatch.contracts.settings.Settings.
s3a_jars_dir`) goes on the driver's and the executors' class path, not in ``spark.jars``: the
SDK bundle is hundreds of megabytes, which every executor would copy at start.

A checkpoint file is written by creating a temporary file and renaming it, which S3 does as a
copy and a delete: slow, and not atomic. On ``s3a://`` the checkpoint file manager is Spark's
``AbortableStreamBasedCheckpointFileManager`` instead (module ``spark-hadoop-cloud``): it writes
each file in place through S3A's abortable stream, so an object appears whole on close or not at
all. Like any checkpoint, one location serves one running query.

The credentials never reach a command line or a log: they are set on the session's Hadoop
configuration once its JVM runs (:func:`set_credentials`), from where Spark hands them to the
executors with each stateful task's configuration.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.contracts.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
ABORTABLE_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
S3A_JAR = "hadoop-aws-*.jar"


def scheme(uri: str) -> str:
    """The filesystem scheme of a checkpoint URI (``file`` for a plain path)."""
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", uri)
    return found.group(1).lower() if found else "file"


def on_s3a(settings: Settings) -> bool:
    return scheme(settings.checkpoint_root) == "s3a"


def s3a_class_path(settings: Settings) -> str:
    """The S3A jars as a class path entry (``{dir}/*``); refused when they are not there."""
    folder = settings.s3a_jars_dir
    if not any(folder.glob(S3A_JAR)):
        raise ConfigurationError(
            f"the checkpoints are on s3a:// but no {S3A_JAR} is in {folder}; run `make setup` "
            "(or set FLEETWATCH_OBJECT_STORE__JARS_DIR)"
        )
    return f"{folder.resolve()}/*"


def object_store_conf(settings: Settings) -> dict[str, str]:
    """Spark confs for checkpoints on ``s3a://`` (none for other filesystems): the store's
    address, the checkpoint file manager, and the executors' class path."""
    if not on_s3a(settings):
        return {}
    store = settings.object_store
    conf = {
        CHECKPOINT_FILE_MANAGER: ABORTABLE_MANAGER,
        "spark.executor.extraClassPath": s3a_class_path(settings),
        "spark.hadoop.fs.s3a.path.style.access": str(store.path_style_access).lower(),
    }
    if store.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = store.endpoint
    if store.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = store.region
    return conf


def driver_class_path(settings: Settings) -> list[str]:
    """What the driver's class path needs for the checkpoints (set when fleetwatch launches the
    driver's JVM; under ``spark-submit``, ``--driver-class-path``)."""
    return [s3a_class_path(settings)] if on_s3a(settings) else []


def set_credentials(spark: SparkSession, settings: Settings) -> None:
    """Give the session the store's keys, if set, and check that the driver can reach
    ``s3a://`` at all."""
    if not on_s3a(settings):
        return
    jvm: Any = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", False, loader)
    except Py4JJavaError as exc:  # ClassNotFoundException
        raise ConfigurationError(
            "the driver cannot load Hadoop's S3A connector: under spark-submit, add "
            f"--driver-class-path '{s3a_class_path(settings)}'"
        ) from exc
    store = settings.object_store
    if store.access_key is None or store.secret_key is None:
        logger.info("s3a credentials: the connector's own chain (environment, instance role)")
        return
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.s3a.access.key", store.access_key.get_secret_value())
    conf.set("fs.s3a.secret.key", store.secret_key.get_secret_value())
