"""Keep API keys out of everything userturn prints or stores.

Every `Endpoint` registers the key it sends; server-provided text passes through `redact` / `redact_bytes` before it
can reach stderr, a log or a record. A key is replaced as is, percent-encoded, JSON-escaped or base64-encoded.
Values shorter than `MIN_SECRET_LENGTH` (placeholders such as `EMPTY`) are not secrets.
"""

from __future__ import annotations

import base64
import urllib.parse

import orjson

MIN_SECRET_LENGTH = 8

_forms: dict[str, str] = {}  # an encoded form of a key -> its replacement
_byte_forms: dict[bytes, bytes] = {}


def register_secret(value: str | None, label: str) -> None:
    """Scrub `value` (and its encoded forms) from now on, replaced by `[redacted $label]` for a variable's name,
    `[redacted label]` for another description of where it came from (`key file PATH`)."""
    if not value or len(value) < MIN_SECRET_LENGTH or value in _forms:
        return
    label = label.removeprefix("$")
    replacement = f"[redacted ${label}]" if label.isidentifier() else f"[redacted {label}]"
    escaped = orjson.dumps(value).decode()[1:-1]
    for form in (value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe=""), escaped,
                 escaped.replace("/", "\\/"), base64.b64encode(value.encode()).decode()):
        _forms.setdefault(form, replacement)
    ordered = sorted(_forms.items(), key=lambda item: len(item[0]), reverse=True)  # longest first: no partial hits
    _forms.clear()
    _forms.update(ordered)
    _byte_forms.clear()
    _byte_forms.update((form.encode(), text.encode()) for form, text in ordered)


def redact(text: str) -> str:
    """`text` with every registered key replaced."""
    for form, replacement in _forms.items():
        if form in text:
            text = text.replace(form, replacement)
    return text


def redact_bytes(data: bytes) -> bytes:
    """`data` (e.g. a response body) with every registered key replaced; the same object when none occurs."""
    for form, replacement in _byte_forms.items():
        if form in data:
            data = data.replace(form, replacement)
    return data
