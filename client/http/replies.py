"""What a reply may be: the byte cap of a response (by its max_tokens), the shape a body must have, the
server's own message in an error reply, the Retry-After header, and the fields engines name each their own way
(the stop that matched, the reasoning text)."""

from __future__ import annotations

import email.utils
import html
import math
import re
import time
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from userturn.client.http.http_client import HttpReply
from userturn.client.http.redact import redact
from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import first_error
from userturn.core.records import Usage

MAX_RETRY_AFTER_S = 120.0  # the longest Retry-After waited for on a 503 or 5xx (a 429 asking for more than a run
# waits stops it: client.http.health)
RETRY_AFTER_READ_MAX_S = 10.0**7  # a Retry-After is read up to this (about four months)
# The response cap: what a reply of `max_tokens` tokens can take, with room to spare. 256 bytes per token is twice
# the longest tokens of common vocabularies (~128 bytes) after JSON escaping; logprobs add an entry per alternative.
RESPONSE_OVERHEAD_BYTES = 1 << 20  # the envelope, usage, ids and whatever extra fields a server adds
BYTES_PER_TOKEN = 256
LOGPROB_BYTES = 512  # one {"token", "logprob", "bytes"} entry
UNBOUNDED_RESPONSE_CAP = 64 << 20  # a request without max_tokens
ReplyShape = Literal["completion", "chat"] | None
# The names engines give a choice's matched stop (SGLang, vLLM) and a message's reasoning text (SGLang, vLLM).
STOP_REASON_FIELDS = ("matched_stop", "stop_reason")
REASONING_FIELDS = ("reasoning_content", "reasoning")
HTML_TITLE = re.compile(r"<title>(.*?)</title>", re.IGNORECASE | re.DOTALL)
HTML_TAG = re.compile(r"<[^>]*>")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date, read up to `RETRY_AFTER_READ_MAX_S`); None
    when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) else max(0.0, min(seconds, RETRY_AFTER_READ_MAX_S))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, min(when.timestamp() - time.time(), RETRY_AFTER_READ_MAX_S))


def response_cap(max_tokens: int | None, n: int = 1, logprobs: int = 0) -> int:
    """The most bytes a response to a request for `n` x `max_tokens` tokens (with `logprobs` alternatives per token,
    0 when not asked for) may take; `UNBOUNDED_RESPONSE_CAP` without max_tokens."""
    if not max_tokens or max_tokens < 1:
        return UNBOUNDED_RESPONSE_CAP
    per_token = BYTES_PER_TOKEN + (LOGPROB_BYTES * (1 + logprobs) if logprobs else 0)
    return RESPONSE_OVERHEAD_BYTES + max(1, n) * max_tokens * per_token


def _positive_int(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def response_cap_for(payload: dict[str, Any]) -> int:
    """`response_cap` from a request body's own `max_tokens` (or `max_completion_tokens`), `n` and logprobs fields
    (`logprobs: k` of the completions API; `logprobs: true` + `top_logprobs: k` of the chat API)."""
    max_tokens = _positive_int(payload.get("max_tokens")) or _positive_int(payload.get("max_completion_tokens"))
    logprobs = payload.get("logprobs")
    chat_style = logprobs is True
    alternatives = (_positive_int(payload.get("top_logprobs")) or 1) if chat_style else (_positive_int(logprobs) or 0)
    return response_cap(max_tokens, _positive_int(payload.get("n")) or 1, alternatives)


def reply_shape(path: str) -> ReplyShape:
    """What a 200 from `path` must contain: a text completion, a chat completion, or (None) any JSON object."""
    path = path.rstrip("/")
    if path.endswith("chat/completions"):
        return "chat"
    return "completion" if path.endswith("completions") else None


def body_problem(data: Any, shape: ReplyShape) -> str | None:
    """Why a 200's JSON is not a usable reply of `shape`, or None when it is."""
    if not isinstance(data, dict):
        return f"JSON {type(data).__name__} instead of an object"
    if shape is None:
        return None
    choices = data.get("choices")
    if not isinstance(choices, list):
        return "no choices list" if choices is None else f"choices is a {type(choices).__name__}, not a list"
    if not choices:
        return "choices is empty"
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return f"choices[{i}] is not an object"
        if shape == "completion":
            if not isinstance(choice.get("text"), str):
                return f"choices[{i}].text is {'missing' if 'text' not in choice else 'not a string'}"
            continue
        message = choice.get("message")
        if not isinstance(message, dict):
            return f"choices[{i}].message is {'missing' if message is None else 'not an object'}"
        if "content" not in message:
            return f"choices[{i}].message.content is missing"
        if not isinstance(message["content"], str | list | None):
            return f"choices[{i}].message.content is not a string"
    return None


def error_text(error: Any) -> str:
    """The message of an OpenAI-style `error` value (an object with `message` or `detail`, or a string)."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def server_message(reply: HttpReply) -> str:
    """The server's own error message, shortened to one line, with API keys scrubbed."""
    text = reply.content.decode("utf-8", "replace").strip()
    try:
        body = orjson.loads(text)
        err = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(err, dict | str):
            text = error_text(err)
        elif isinstance(body, dict) and "detail" in body:
            text = str(body["detail"])
    except (orjson.JSONDecodeError, AttributeError):
        if text.startswith("<"):  # a proxy's or gateway's HTML page: its title, else its text
            title = HTML_TITLE.search(text)
            text = html.unescape(title.group(1) if title else HTML_TAG.sub(" ", text))
    return redact(one_line(text) or reply.reason or "no message")


def _engine_field(obj: dict[str, Any], named: str | None, known: tuple[str, ...], traits: EngineTraits) -> Any:
    """`obj[named]`; for an external endpoint (whose engine is not known) without it, the first of `known` there."""
    value = obj.get(named) if named else None
    if value is None and traits.external:
        value = next((obj[name] for name in known if obj.get(name) is not None), None)
    return value


def matched_stop(choice: dict[str, Any], traits: EngineTraits) -> Any:
    """The stop string (or token id) a completion choice ended at, from the engine's own field
    (`EngineTraits.stop_reason_field`); None when the engine does not say."""
    return _engine_field(choice, traits.stop_reason_field, STOP_REASON_FIELDS, traits)


def reasoning_text(message: dict[str, Any], traits: EngineTraits) -> str | None:
    """The reasoning text of a chat message, from the engine's own field (`EngineTraits.reasoning_field`); None
    when there is none (or it is not text)."""
    value = _engine_field(message, traits.reasoning_field, REASONING_FIELDS, traits)
    return value if isinstance(value, str) else None


def usage_of(value: Any) -> tuple[Usage | None, str | None]:
    """A reply's `usage` (None when it has none) and, when it is malformed (not an object of integer counts), why
    it was dropped: the completion beside it is good, only the count is lost."""
    if value is None:
        return None, None
    try:
        return Usage.model_validate(value), None
    except ValidationError as exc:
        detail = first_error(exc)  # "field: message", or ": message" for the value itself
        return None, redact(one_line("usage" + ("" if detail.startswith(":") else ".") + detail, 200))
