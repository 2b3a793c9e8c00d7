"""The JIT of the JVMs the tests start: a Spark JVM lives a minute or two in a test, and on
two cores the C2 compiler threads of JVMs starting at once take the CPU the stages need to
start and run their first batches. C1 alone (the same code, compiled less hard) starts them
sooner; the configured Java options are kept and this one added."""

from __future__ import annotations

from fleetwatch.contracts.settings import Settings

QUICK_JIT = "-XX:TieredStopAtLevel=1"


def quick_jit_options(settings: Settings) -> str:
    """``spark.java_options`` of ``settings`` with :data:`QUICK_JIT`."""
    return f"{settings.spark.java_options} {QUICK_JIT}".strip()


def with_quick_jit(settings: Settings) -> Settings:
    """``settings`` whose Spark JVMs run with :data:`QUICK_JIT`."""
    spark = settings.spark.model_copy(update={"java_options": quick_jit_options(settings)})
    return settings.model_copy(update={"spark": spark})
