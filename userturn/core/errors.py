"""User-facing errors: one clear line, non-zero exit, no traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(Exception):
    """A fatal problem with the user's input or environment, printed as one line by the CLI."""

    exit_code = 2


class EndpointError(UserError):
    """The run must stop (exit 3, completed records kept): an endpoint refused the whole run (401/403/404) or is
    down, hung, still loading or throttled. `resumable`: rerunning the same command can go on (False when the
    command itself must change, e.g. a base URL that answers 404)."""

    exit_code = 3

    def __init__(self, message: str, *, resumable: bool = True) -> None:
        super().__init__(message)
        self.resumable = resumable


# What one HTTP attempt can end in (client.http.endpoint.Endpoint): RetryableError is retried with backoff,
# RequestFailed fails the sample (an error record), EndpointError stops the run.
AttemptKind = Literal["http", "malformed", "connect", "gateway", "dropped", "timeout", "loading", "throttled"]


class EndpointAttemptError(Exception):
    """Base of the per-request endpoint failures; `reason` is one line with server text already redacted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RetryableError(EndpointAttemptError):
    """A failure worth another attempt (429/408/5xx, reset, timeout, malformed response). `kind`: "http" (a
    retryable status or a malformed body), "malformed" (not valid HTTP), "connect", "gateway" (a 502/503/504),
    "dropped" (the connection broke), "timeout", "loading" (a 503 with Retry-After) or "throttled" (a 429); the
    last two spend no attempt (client.http.health)."""

    def __init__(self, reason: str, retry_after: float | None = None, kind: AttemptKind = "http") -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.kind: AttemptKind = kind


class RequestFailed(EndpointAttemptError):
    """A request that will not succeed: a non-retryable 4xx, an oversized response, or retries exhausted.
    `endpoint_down` (a one-line reason): the endpoint is unreachable, the caller should stop the run."""

    def __init__(self, reason: str, status: int | None = None, attempts: int = 1,
                 endpoint_down: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.attempts = attempts
        self.endpoint_down = endpoint_down


class RetryLater(EndpointAttemptError):
    """A request's first attempt timed out and its caller asked to send it again only after the requests not yet
    tried (`Endpoint.post_json(defer=True)`): put it behind them and call again with `tried=1`."""


def first_error(exc: ValidationError, whole: str = "") -> str:
    """`field.path: message` of a validation error's first problem; `whole` names the location when the problem
    is with the object itself."""
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or whole}: {err['msg']}"


def damaged_line(path: object, number: int | str, why: str) -> UserError:
    """The one error for a complete line of a results file that is no record, whichever command reads it (probe
    resume, report, judge, compact, show, export): names file:line, why, and the way out (delete the line; the
    probe's rerun makes only its record again)."""
    return UserError(f"{path}:{number}: not a userturn record ({why}); the line is damaged: delete it (e.g. "
                     f"sed -i '{number}d' {path}) and rerun; the probe's rerun makes that record again and keeps "
                     "every other line")
