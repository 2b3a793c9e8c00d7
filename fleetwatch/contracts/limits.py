"""The bounds of a telemetry record's fields, shared by the pydantic contract
(:mod:`~fleetwatch.contracts.telemetry`) and the compiled record check
(:mod:`~fleetwatch.contracts.raw_records`). Plain numbers, so a process that only checks
records (the trainer's packing workers) loads no validation framework."""

from __future__ import annotations

INT64_MAX = 2**63 - 1
"""The largest ``seq`` (and any integer field of a record): every stage holds them as signed
64-bit integers (numpy, Spark's BIGINT, the API's database)."""
VALUE_LIMIT = 1e15
"""The largest magnitude of a metric value. Far beyond any sensor's range (a lifetime energy
counter in Wh included), and small enough that sums of squares over any window stay finite."""
LABEL_LENGTH = 64
"""The longest ``firmware`` or ``status`` a reading carries."""
