"""Loaded by the client processes `bench_probe.py` starts (this folder leads their PYTHONPATH): times every garbage
collection in process CPU time and, at exit, writes `{"gc_s": seconds, "collections": [gen0, gen1, gen2]}` to the
file $BENCH_GC_OUT names. Measurement only; nothing here changes when or how the collector runs."""

import atexit
import gc
import json
import os
import time

_OUT = os.environ.get("BENCH_GC_OUT")
if _OUT:
    _total = [0.0]
    _counts = [0, 0, 0]
    _started = [0.0]

    def _timed(phase: str, info: dict) -> None:
        if phase == "start":
            _started[0] = time.process_time()
        else:
            _total[0] += time.process_time() - _started[0]
            _counts[info["generation"]] += 1

    def _write() -> None:
        with open(_OUT, "w") as fh:
            json.dump({"gc_s": _total[0], "collections": _counts}, fh)

    gc.callbacks.append(_timed)
    atexit.register(_write)
