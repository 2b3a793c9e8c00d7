"""Entry file for ``spark-submit``, to run a fleetwatch job (the scorer or the trainer) on a
cluster::

    spark-submit --master spark://host:7077 \\
        --jars "$(ls .cache/jvm/spark-kafka/*.jar | paste -sd,)" \\
        "$(python -c 'import fleetwatch.streaming.submit as m; print(m.__file__)')" score|train

With checkpoints on ``s3a://`` the driver needs Hadoop's S3A connector on its class path too:
``--driver-class-path '.cache/jvm/s3a/*'`` (the executors get it from the session's confs;
:mod:`fleetwatch.streaming.object_store`).

The master given to spark-submit wins over ``FLEETWATCH_SPARK__MASTER``. The executors need
fleetwatch installed (``pip install`` it into the same environment on every node, or ship it
with ``--py-files``) and ``PYSPARK_PYTHON`` pointing at that environment's python. The trainer
tracks its runs in ``FLEETWATCH_MLFLOW__TRACKING_URI`` (a server, on a cluster).

On Kubernetes (``--master k8s://…``, cluster mode) the driver and the executors are pods of the
fleetwatch image, which holds fleetwatch, its Python environment and the connector jars: the
entry file is given as ``local:///opt/fleetwatch/venv/lib/python3.11/site-packages/fleetwatch/
streaming/submit.py``, the jars go on ``spark.driver.extraClassPath`` and
``spark.executor.extraClassPath`` (``/opt/fleetwatch/jars/spark-kafka/*``), and the pods need
the image's Spark entrypoint as their command. The whole command, the driver's RBAC and the
pod templates are in ``deploy/k8s/``.
"""

from __future__ import annotations

import sys

from fleetwatch.contracts.logs import configure_logging
from fleetwatch.contracts.settings import Settings
from fleetwatch.runtime import stop_event
from fleetwatch.streaming.scorer import job as scorer
from fleetwatch.streaming.trainer import job as trainer
from fleetwatch.streaming.trainer.observer import default_observer

JOBS = ("score", "train")


def main(argv: list[str]) -> None:
    job = argv[1] if len(argv) > 1 else "score"
    if job not in JOBS:
        raise SystemExit(f"fleetwatch: unknown job {job!r}; choose one of {', '.join(JOBS)}")
    settings = Settings()
    configure_logging(settings.log_level)
    if job == "score":
        scorer.run(settings, stop_event())
        return
    trainer.run(settings, stop_event(), default_observer(settings))


if __name__ == "__main__":
    main(sys.argv)
