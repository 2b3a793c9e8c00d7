"""Operator rules in the scorer: Spark SQL conditions over a device's readings, followed from the
``rules`` topic and judged beside the learned models (:mod:`~fleetwatch.streaming.rules.job`)."""
