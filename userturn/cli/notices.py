"""Where the orchestration's notices go: `userturn.orchestrate` never prints; it logs one-line notices (warnings,
post-training stages) to the `userturn` logger, and the command line shows each as a line on stderr.

Outside the command line (the Python API) Python's own last-resort handler still shows the warnings."""

from __future__ import annotations

import logging
import sys

LOGGER = "userturn"


class StderrLines(logging.Handler):
    """Each notice, as it was written, on the stderr of the moment (a test's captured one included)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(record.getMessage(), file=sys.stderr, flush=True)
        except Exception:  # logging's own contract: a failing handler must not raise
            self.handleError(record)


def install() -> None:
    """Show the `userturn` logger's notices (info and up) on stderr, once per process."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, StderrLines) for h in logger.handlers):
        logger.addHandler(StderrLines())
    logger.setLevel(logging.INFO)
    logger.propagate = False
