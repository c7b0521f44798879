"""The results file of one run, written record by record: each configuration's line goes in once, right before
the run's first record of that configuration."""

from __future__ import annotations

from collections.abc import Mapping

from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ConfigLine, ProbeRecord


class RecordWriter:
    """Appends records to `out_path` (opened on construction, flushed per event-loop tick); `configs`: the
    configuration line of each fingerprint the run may write, keyed by fingerprint."""

    def __init__(self, out_path: str, configs: Mapping[str, ConfigLine]) -> None:
        self._unwritten = dict(configs)  # configuration lines not yet written by this run
        self._writer = JsonlWriter(out_path, per_tick=True)

    def write(self, record: ProbeRecord) -> None:
        """Write `record`, after its configuration line when it is this run's first record of that configuration."""
        if record.config_fingerprint in self._unwritten:
            self._writer.write_config(self._unwritten.pop(record.config_fingerprint))
        self._writer.write(record)

    def close(self) -> None:
        """Flush and close the file; a write error raises here."""
        self._writer.close()
