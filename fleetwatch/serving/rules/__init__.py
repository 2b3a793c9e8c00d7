"""Operators' rules in the API: checked by Spark in a child process, published on ``rules``."""
