"""User-facing errors: one clear line, non-zero exit, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """A fatal problem with the user's input or environment, printed as one line by the CLI."""

    exit_code = 2


class EndpointError(UserError):
    """An endpoint refused or could not serve a request (after retries, or a non-retryable 4xx)."""

    exit_code = 3
