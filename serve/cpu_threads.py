"""How many threads a CPU engine computes with when the manifest does not say: the embedded engine's torch threads
and llama-server's `--threads`, chosen once for both."""

from __future__ import annotations

import os


def default_threads() -> int:
    """Half the CPUs this process may use (hyperthreads share a core; threads that spin while waiting for each
    other collapse on a busy machine: OpenMP's made the embedded engine's decoding ~10x slower, and llama-server with
    every core ran at 0.11-0.48x the speed of one thread on a shared 2-core machine), at least 1 and at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 2))
