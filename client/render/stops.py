"""Stop strings and stop token ids for a generated user turn, derived from the tokenizer files.

The template tells where a user turn ends: render `[user S1, assistant S2]` and read the special tokens
between S1 and S2 (Qwen3: `<|im_end|>`, `<|im_start|>`; GLM: `<|assistant|>`; gpt-oss: `<|end|>`, `<|start|>`).
The tokenizer adds its end-of-sequence tokens (tokenizer_config `eos_token`, generation_config `eos_token_id`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from userturn.core.errors import UserError


@dataclass(frozen=True)
class AddedToken:
    """One added token of a tokenizer (`added_tokens_decoder` / tokenizer.json `added_tokens`)."""

    id: int
    content: str
    special: bool


def token_text(value: Any) -> str | None:
    """Text of a token entry in tokenizer_config.json: a string or an AddedToken dict (`{"content": ...}`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def added_tokens(config: Mapping[str, Any], tokenizer_json: Mapping[str, Any] | None) -> dict[str, AddedToken]:
    """Added tokens by content, from tokenizer.json `added_tokens` and tokenizer_config `added_tokens_decoder`."""
    tokens: dict[str, AddedToken] = {}
    for entry in (tokenizer_json or {}).get("added_tokens") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("content"), str) and isinstance(entry.get("id"), int):
            tokens[entry["content"]] = AddedToken(entry["id"], entry["content"], bool(entry.get("special")))
    for key, entry in (config.get("added_tokens_decoder") or {}).items():
        content = token_text(entry)
        if content is not None and str(key).lstrip("-").isdigit():
            tokens[content] = AddedToken(int(key), content, bool(entry.get("special")))
    return tokens


def leading_special_tokens(gap: str, specials: Iterable[str]) -> list[str]:
    """The run of special tokens, separated by whitespace only, from the first one in `gap` (the text between a
    user message and the assistant's reply) to the first other text: Qwen3 `<|im_end|>\\n<|im_start|>assistant`
    gives `<|im_end|>`, `<|im_start|>`; text before the first (GLM's `/nothink`) is skipped."""
    ordered = sorted(set(specials), key=len, reverse=True)
    if not ordered:
        return []
    token = "|".join(map(re.escape, ordered))
    run = re.search(rf"(?:{token})(?:\s*(?:{token}))*", gap)
    return list(dict.fromkeys(re.findall(rf"\s*({token})", run.group()))) if run else []


def end_of_turn_stops(gap: str, tokens: Mapping[str, AddedToken]) -> list[str]:
    """Stops that end a user turn: `leading_special_tokens` of the gap between a user message and the reply, or
    for plain-text role markers (`### Assistant:`) the gap's first non-blank line."""
    run = leading_special_tokens(gap, (tok.content for tok in tokens.values() if tok.special))
    return run or [line.strip() for line in gap.splitlines() if line.strip()][:1]


def eos_stops(
    config: Mapping[str, Any],
    generation_config: Mapping[str, Any] | None,
    tokens: Mapping[str, AddedToken],
) -> list[str]:
    """End-of-sequence token texts: tokenizer_config `eos_token`, then generation_config `eos_token_id`(s)."""
    by_id = {tok.id: tok.content for tok in tokens.values()}
    ids = (generation_config or {}).get("eos_token_id")
    from_ids = [by_id[i] for i in (ids if isinstance(ids, list) else [ids]) if isinstance(i, int) and i in by_id]
    return merge_stops([token_text(config.get("eos_token")) or ""], from_ids)


def merge_stops(*groups: Iterable[str]) -> list[str]:
    """Concatenate stop lists in order, without duplicates or empty strings."""
    return [stop for stop in dict.fromkeys(itertools.chain(*groups)) if stop]


def stop_token_ids(stops: Iterable[str], tokens: Mapping[str, AddedToken]) -> list[int]:
    """Ids of the stops that are single added tokens (plain-text stops have no id)."""
    return [tokens[stop].id for stop in stops if stop in tokens]


def fit_stops(stops: Sequence[str], ids: Sequence[int], token_ids: Mapping[str, int], limit: int | None, *,
              send_ids: bool, ids_carry: bool, engine: str, external: bool = False) -> tuple[list[str], list[int]]:
    """(stop strings, stop token ids) one request sends: every string, and `ids` when `send_ids`, where `limit` (the
    engine's most stop strings per request; None: no limit) allows. Over the limit, when `ids_carry` (the engine
    honours stop_token_ids): every string without a token id in `token_ids`, then the others in order while room is
    left; the ids of the strings left out are sent (after `ids` when `send_ids`), so generation stops at the same
    places (`external`: an endpoint whose engine is not known). UserError in one line when the ids cannot carry what
    is left out."""
    if limit is None or len(stops) <= limit:
        return list(stops), list(ids) if send_ids else []
    shown = ", ".join(stops)
    head = f"{len(stops)} stop strings ({shown}), but {engine} accepts at most {limit} per request"
    if not ids_carry and external:
        raise UserError(f"{head} (OpenAI's limit) and is not known to honour stop_token_ids: pass "
                        "--send-stop-token-ids (send_stop_token_ids: true) if it does (SGLang, vLLM), or shorten the "
                        "stop list (the manifest's or experiment's probe stop)")
    if not ids_carry:
        raise UserError(f"{head} and does not honour stop_token_ids: shorten the stop list (the manifest's or "
                        "experiment's probe stop), or serve the model with an engine that honours stop_token_ids")
    plain = [stop for stop in stops if stop not in token_ids]
    if len(plain) > limit:
        raise UserError(f"{head}; {len(plain)} of them are not single tokens ({', '.join(plain)}), so stop_token_ids "
                        "cannot carry them: shorten the stop list")
    room = limit - len(plain)
    carried = [stop for stop in stops if stop in token_ids]
    kept = set(plain) | set(carried[:room])
    dropped_ids = [token_ids[stop] for stop in carried[room:]]
    return [stop for stop in stops if stop in kept], list(dict.fromkeys([*(ids if send_ids else []), *dropped_ids]))
