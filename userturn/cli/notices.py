"""The `userturn` logger's one-line notices (warnings, post-training stages; `userturn.orchestrate` never prints),
shown by the command line as lines on stderr."""

from __future__ import annotations

import logging
import sys

LOGGER = "userturn"


class StderrLines(logging.Handler):
    """Each notice, as it was written, on the stderr of the moment (a test's captured one included); a warning
    once per command however many models or runs raise it (`seen` is cleared by `install`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(record.getMessage(), file=sys.stderr, flush=True)
        except Exception:  # logging's own contract: a failing handler must not raise
            self.handleError(record)


def install() -> None:
    """Show the `userturn` logger's notices (info and up) on stderr: the handler once per process, its memory of
    the warnings shown anew for each command."""
    logger = logging.getLogger(LOGGER)
    handler = next((h for h in logger.handlers if isinstance(h, StderrLines)), None)
    if handler is None:
        logger.addHandler(handler := StderrLines())
    handler.seen.clear()
    logger.setLevel(logging.INFO)
    logger.propagate = False
