"""The shared error hierarchy: exit codes and the endpoint failures the retry policy acts on."""

from __future__ import annotations

import pydantic
import pytest

from userturn.client.http import endpoint
from userturn.core.errors import (
    EndpointAttemptError,
    EndpointError,
    RequestFailed,
    RetryableError,
    UserError,
    first_error,
)


def test_exit_codes_bad_input_is_2_and_a_stopped_endpoint_is_3() -> None:
    assert UserError("x").exit_code == 2
    assert EndpointError("x").exit_code == 3
    assert isinstance(EndpointError("x"), UserError)


def test_per_request_failures_share_one_base_and_keep_their_reason() -> None:
    retry = RetryableError("503 Service Unavailable", retry_after=2.0, kind="http")
    failed = RequestFailed("404 Not Found", status=404, attempts=1)
    for exc in (retry, failed):
        assert isinstance(exc, EndpointAttemptError)
        assert not isinstance(exc, UserError)  # a sample's failure is not the run's
    assert (retry.reason, retry.retry_after, retry.kind) == ("503 Service Unavailable", 2.0, "http")
    assert (failed.reason, failed.status, failed.endpoint_down) == ("404 Not Found", 404, None)


def test_the_endpoint_raises_the_core_classes() -> None:
    assert endpoint.RequestFailed is RequestFailed and endpoint.RetryableError is RetryableError


class _Cfg(pydantic.BaseModel):
    class Inner(pydantic.BaseModel):
        port: int

    inner: Inner


def test_first_error_names_the_field_path() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        _Cfg.model_validate({"inner": {"port": "x"}})
    assert first_error(info.value).startswith("inner.port: ")
