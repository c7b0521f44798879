"""User-facing errors: one clear line, non-zero exit, no traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(Exception):
    """A fatal problem with the user's input or environment, printed as one line by the CLI."""

    exit_code = 2


class EndpointError(UserError):
    """An endpoint refused or could not serve a request (after retries, or a non-retryable 4xx)."""

    exit_code = 3


def first_error(exc: ValidationError, whole: str = "") -> str:
    """`field.path: message` of a validation error's first problem; `whole` names the location when the problem
    is with the object itself."""
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or whole}: {err['msg']}"
