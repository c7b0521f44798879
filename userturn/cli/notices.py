"""The `userturn` logger's one-line notices (warnings, post-training stages; `userturn.orchestrate` never prints),
shown by the command line as lines on stderr."""

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
