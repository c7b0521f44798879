"""Text helpers every layer shares: reasoning removed from a reply, message content as text, a text's digest."""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence
from typing import Any

import orjson

_TAGS = "think|thinking|reasoning"
_BLOCK = re.compile(rf"<({_TAGS})>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
_CLOSE = re.compile(rf"</(?:{_TAGS})>", re.IGNORECASE)
_OPEN = re.compile(rf"<(?:{_TAGS})>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """The answer in a reply, stripped: complete `<think>…</think>` blocks (also `<thinking>`, `<reasoning>`, any
    case) removed; only the text after the last lone closing tag (reasoning opened in the prompt); an unclosed
    opening tag (reasoning cut by the token limit) and everything after it dropped."""
    if "<" not in text:
        return text.strip()
    text = _BLOCK.sub("", text)
    closes = list(_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()


_FIRST_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def reasoning_of(text: str) -> str | None:
    """The first complete `<think>…</think>` block of a reply, stripped; None without one."""
    match = _FIRST_THINK.search(text)
    return match.group(1).strip() if match else None


def content_text(content: Any) -> str:
    """Message content as text: a string as is; an OpenAI-style list of parts joined (the `text` of each part
    object, or the part itself when it is a string); None as "". TypeError for anything else."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text", ""), str):
                parts.append(part.get("text", ""))
            else:
                raise TypeError(f"a content part is a {type(part).__name__}, not text")
        return "".join(parts)
    raise TypeError(f"message content is a {type(content).__name__}, not text")


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """' (did you mean X?)' for the likeliest candidate, '' when none is close: one that `word` begins (a flag or key
    cut short: `--temp` -> `--temperature`), the closest of those by difflib; else the closest of all (a typo)."""
    started = [c for c in candidates if c.startswith(word) and c != word]
    close = difflib.get_close_matches(word, started, n=1, cutoff=0) if started else \
        difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def digest(value: object) -> bytes:
    """16 bytes of BLAKE2b identifying `value` (a text, bytes, None, or any JSON value): the same in every process
    and run, unlike `hash()` (salted per process, 64 bits); two different values share one with probability 2**-128.
    For identities compared without keeping the value (a judged turn, a record's key and configuration)."""
    if isinstance(value, str):
        data = b"s" + value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        data = b"b" + value
    else:
        data = b"j" + orjson.dumps(value)
    return hashlib.blake2b(data, digest_size=16).digest()
