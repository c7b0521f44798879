"""Special tokens in dataset content: found before any request, refused unless the user opts in.

A server tokenizes the prompt with special tokens enabled, so `<|im_start|>assistant` typed in a message becomes
the control token and forges a turn. `SpecialTokens` finds one tokenizer's special tokens with one trie regex
(linear in the text, whatever the number of tokens: harmony has ~1,100).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from userturn.core.errors import UserError

ALLOW_FLAG = "--allow-special-tokens"


def _trie_pattern(words: Iterable[str]) -> str:
    """A regex matching exactly `words`, as a trie (`<\\|(?:end\\|>|start\\|>)`), preferring the longest word."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        ends_here = "" in node
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and not ends_here else f"(?:{'|'.join(branches)})"
        return f"(?:{body})?" if ends_here else body

    return build(trie)


def _byte_screen(tokens: frozenset[str]) -> re.Pattern[bytes] | None:
    """A bytes regex finding the tokens' UTF-8 in a raw JSON line; None when a token holds a character that JSON
    writes escaped (`"`, backslash, control characters), where the bytes cannot tell."""
    if not tokens or any(c in '"\\' or c < " " for t in tokens for c in t):
        return None
    one_char_per_byte = [t.encode().decode("latin-1") for t in tokens]
    return re.compile(_trie_pattern(one_char_per_byte).encode("latin-1"))


class SpecialTokens:
    """The special-token texts of one tokenizer, and where they occur in messages."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = frozenset(t for t in tokens if t and not t.isspace())
        self._pattern = re.compile(_trie_pattern(self.tokens)) if self.tokens else None
        self._screen = _byte_screen(self.tokens)
        # Few first characters (`<` for most tokenizers): a text holding none of them (a memchr each) holds no token.
        leads = frozenset(t[0] for t in self.tokens)
        self._leads = leads if len(leads) <= 4 else None
        self._lead_bytes = None if self._leads is None else [lead.encode() for lead in self._leads]

    def may_occur_in_json(self, raw: bytes) -> bool:
        """False only when no string of the JSON text `raw` can hold a special token, told from the bytes alone
        (without a `\\u` or `\\/` escape, a token free of `"`, backslash and control characters occurs in a decoded
        string only if its UTF-8 occurs in `raw`). True means: parse and look."""
        if not self.tokens:
            return False
        if self._screen is None or (b"\\" in raw and (b"\\u" in raw or b"\\/" in raw)):  # memchr decides most
            return True
        if self._lead_bytes is not None and not any(lead in raw for lead in self._lead_bytes):
            return False
        return self._screen.search(raw) is not None

    def __len__(self) -> int:
        return len(self.tokens)

    def __or__(self, other: SpecialTokens) -> SpecialTokens:
        return SpecialTokens(self.tokens | other.tokens)

    def find(self, text: str) -> str | None:
        """The first special token in `text`, or None."""
        if self._pattern is None:
            return None
        match = self._pattern.search(text)
        return match.group() if match else None

    def first_in(self, messages: Sequence[BaseModel | Mapping[str, Any]]) -> str | None:
        """`messages.N.field: '<token>'` for the first special token in any text of the messages, or None.
        One search over all the texts joined decides most calls; only a hit is located text by text."""
        if self._pattern is None:
            return None
        joined = "\x00".join(_texts(messages))
        if self._leads is not None and not any(lead in joined for lead in self._leads):
            return None
        if self._pattern.search(joined) is None:
            return None
        for index, message in enumerate(messages):
            for path, text in _message_strings(message):
                if (token := self.find(text)) is not None:
                    return f"messages.{index}.{path}: {token!r}"
        return None

    def __repr__(self) -> str:
        return f"SpecialTokens({len(self.tokens)} tokens)"


def _texts(messages: Sequence[BaseModel | Mapping[str, Any]]) -> list[str]:
    """Every string of the messages, read directly off models whose fields are all strings (most messages)."""
    texts: list[str] = []
    for message in messages:
        if isinstance(message, BaseModel) and not message.__pydantic_extra__:
            values = message.__dict__.values()
            if all(type(value) is str for value in values):
                texts.extend(values)
                continue
        texts.extend(text for _, text in _message_strings(message))
    return texts


def _message_strings(message: BaseModel | Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, text) of every string in one message: fields and extra keys, nested values walked."""
    if isinstance(message, BaseModel):  # the attributes directly: ~10x cheaper than iterating the model
        extra = message.__pydantic_extra__
        message = {**message.__dict__, **extra} if extra else message.__dict__
    for key, value in message.items():
        if isinstance(value, str):
            yield key, value
        elif isinstance(value, Mapping | list | tuple):
            yield from _strings(value, key)


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, text) of every string (keys included) in a JSON-like value, depth first."""
    stack = [(path, value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, Mapping):
            for key, child in reversed(list(node.items())):
                child_path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str):
                    yield child_path, key
                stack.append((child_path, child))
        elif isinstance(node, list | tuple):
            stack.extend((f"{where}.{i}" if where else str(i), child) for i, child in reversed(list(enumerate(node))))


def check_items(items: Sequence[Any], tokens: SpecialTokens | None, *, allow: bool, tokenizer: str) -> int:
    """Refuse (UserError naming the item's file:line) an item whose messages hold a special token, unless `allow`;
    returns how many items hold one (probed and flagged when `allow`)."""
    if not tokens:
        return 0
    affected = 0
    raw_lines = getattr(items, "raw_lines", None)  # a dataset kept on disk: parse only lines the bytes can't clear
    candidates: Iterable[Any] = items if raw_lines is None else (
        items[i] for i, raw in raw_lines(tokens.may_occur_in_json) if tokens.may_occur_in_json(raw))
    for item in candidates:
        found = tokens.first_in(item.messages)
        if found is None:
            continue
        if not allow:
            where = getattr(item, "where", None) or f"item {item.id!r}"
            raise UserError(f"{where}: {found} is a special token of the tokenizer ({tokenizer}), read by the "
                            f"server as a control token, forging the prompt; remove it, or pass {ALLOW_FLAG} "
                            "(experiment file: allow_special_tokens: true) to probe such items anyway, flagged in "
                            "their records")
        affected += 1
    return affected


__all__ = ["ALLOW_FLAG", "SpecialTokens", "check_items"]
