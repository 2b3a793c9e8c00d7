"""A Python worker's freed memory given back to the system when its task ends.

A task frees its objects (parsed records, a bucket's detectors as they learn, Arrow buffers), but
the allocators keep the pages: glibc's ``malloc`` keeps each heap at its high-water mark, and
pyarrow's pool (mimalloc) keeps its segments for the next allocation. A trainer's micro-batch
runs its two pools of Python workers in turn (the packing step's, then the buckets'), so pages
kept by one pool while the other works add up in the trainer's peak. Given back at the end of
each task, each pool's peak is its own task's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pyarrow as pa


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (``None`` where the C library has none, e.g. musl or macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's symbols, its C library's included
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_freed() -> None:
    """Give the pages this process's allocators keep free back to the system: pyarrow's pool's
    unused memory and, under glibc, every malloc arena's free pages."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)
