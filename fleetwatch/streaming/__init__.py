"""The Spark jobs, the scorer and the trainer, and what they share: the Spark session, the
Kafka reader, the run loop, checkpoints and device buckets."""
