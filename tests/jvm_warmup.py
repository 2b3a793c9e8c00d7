"""``python -m tests.jvm_warmup DIR``: a Spark session (the Java options of the environment's
settings) runs the scorer's plan on a few readings from files in ``DIR``, then stops, and the
process exits: the run :func:`tests.jvm.class_archive` has its JVM write the classes it loaded."""

from __future__ import annotations

import sys
from pathlib import Path

from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.spark_session import build_session
from tests.spark.test_scorer_plan import T0, Steps, reading


def main(folder: Path) -> None:
    spark = build_session(Settings(), "fleetwatch-test-warmup")
    try:
        readings = [reading("warm", i, T0 + i * 1000, temperature=21.0) for i in range(5)]
        rows = Steps(spark, folder).run(readings)
        assert rows, "the scorer's plan gave no rows"
    finally:
        spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
