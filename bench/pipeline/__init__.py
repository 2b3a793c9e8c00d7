"""The streaming jobs on a running stack: latency and throughput of the whole path, where a
scorer micro-batch's time goes, and the trainer's parameter freshness."""
