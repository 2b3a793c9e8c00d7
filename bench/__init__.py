"""Benchmarks, grouped by what they measure: ``micro`` (one component alone), ``pipeline``
(the streaming jobs running on the stack), ``quality`` (detection quality); ``common``, the
helpers they share. Each script prints its figures and, last, one JSON line."""
