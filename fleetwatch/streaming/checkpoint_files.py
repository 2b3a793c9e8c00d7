"""The few file operations fleetwatch does on a checkpoint itself (Spark does the rest): on any
Hadoop filesystem through the session's JVM, or on a local folder.

A checkpoint is named by a Hadoop filesystem URI (``s3a://bucket/checkpoints/score-v14``,
``hdfs://…``) or a local path; :func:`join` builds one from its root. :class:`HadoopFiles`
goes through Hadoop's ``FileSystem`` API with the session's Hadoop configuration (the object
store's endpoint and credentials included), so the checkpoint is read where Spark wrote it.
:class:`LocalFiles` reads a local checkpoint without a JVM (the tests and benches do).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def join(root: str, *names: str) -> str:
    """``root`` (a URI or a path) with ``names`` below it."""
    return "/".join([root.rstrip("/"), *names])


class CheckpointFiles(Protocol):
    def exists(self, path: str) -> bool: ...

    def names(self, folder: str) -> list[str]:
        """The names of the entries of ``folder`` (none when it does not exist)."""
        ...

    def read_text(self, path: str) -> str: ...

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything under it (nothing when it does not exist)."""
        ...


class LocalFiles:
    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def names(self, folder: str) -> list[str]:
        return [p.name for p in Path(folder).iterdir()] if Path(folder).is_dir() else []

    def read_text(self, path: str) -> str:
        return Path(path).read_text()

    def delete(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


class HadoopFiles:
    """Through the JVM of ``spark``: Hadoop's ``FileSystem`` for the path's scheme."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _at(self, path: str) -> tuple[Any, Any]:
        where = self._jvm.org.apache.hadoop.fs.Path(path)
        return where.getFileSystem(self._conf), where

    def exists(self, path: str) -> bool:
        fs, where = self._at(path)
        return bool(fs.exists(where))

    def names(self, folder: str) -> list[str]:
        fs, where = self._at(folder)
        if not fs.exists(where):
            return []
        return [str(status.getPath().getName()) for status in fs.listStatus(where)]

    def read_text(self, path: str) -> str:
        fs, where = self._at(path)
        stream = fs.open(where)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def delete(self, path: str) -> None:
        fs, where = self._at(path)
        fs.delete(where, True)
