"""Detectors: pure Python/numpy, no Spark. The same code scores in Spark, backfills and tests."""
