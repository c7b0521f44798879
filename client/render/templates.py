"""Render the probe prompt with the model's own chat template, cut so it ends at an open user header.

`PromptRenderer.user_turn_prompt(messages)` renders `messages + [user SENTINEL]` and cuts at the sentinel (random
per renderer, so no content can hold it): the prompt is exactly what the model saw in training up to the user
header. Rendering is byte-identical to transformers' `apply_chat_template(..., tokenize=False)` without importing
transformers (`client.render.jinja_env`); gpt-oss models go through harmony (`client.render.harmony_render`).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import jinja2
import orjson

from userturn.client.render.jinja_env import (
    MAX_OUTPUT_CHARS,
    RENDER_DEADLINE_S,
    TemplateLimit,
    bounded_render,
    compile_template,
    special_token_variables,
    template_messages,
    template_source,
)
from userturn.client.render.special_tokens import SpecialTokens
from userturn.client.render.stops import (
    AddedToken,
    added_tokens,
    end_of_turn_stops,
    eos_stops,
    merge_stops,
    stop_token_ids,
)
from userturn.client.render.tokenizer_files import CACHE_SIZE, TokenizerFiles, read_tokenizer_files
from userturn.core.errors import UserError
from userturn.core.records import Message, RendererInfo, sha256_text

SENTINEL_PREFIX = "USERTURNSENTINEL"  # + 32 random hex digits per renderer
_PROBE_A, _PROBE_B = "USERTURNPROBEAAA41e2", "USERTURNPROBEBBB58d0"

Family = Literal["qwen3", "glm", "gpt-oss", "chatml", "generic"]


def detect_family(source: str, name: str) -> Family:
    """Informative model family from the template text (and the model name for gpt-oss)."""
    lowered = name.lower()
    if ("<|channel|>" in source and "<|start|>" in source) or "gpt-oss" in lowered or "gpt_oss" in lowered:
        return "gpt-oss"
    if "[gMASK]" in source or ("<|user|>" in source and "<|assistant|>" in source and "<|observation|>" in source):
        return "glm"
    if "<|im_start|>" in source:
        return "qwen3" if ("<think>" in source or "enable_thinking" in source or "qwen3" in lowered) else "chatml"
    return "generic"


def _post_processor_prefix(processor: Mapping[str, Any] | None) -> list[str]:
    """Special tokens a tokenizer.json post-processor puts before the text (`TemplateProcessing` single)."""
    if not processor:
        return []
    if processor.get("type") == "Sequence":
        for inner in processor.get("processors") or []:
            if found := _post_processor_prefix(inner):
                return found
        return []
    if processor.get("type") != "TemplateProcessing":
        return []
    prefix: list[str] = []
    for piece in processor.get("single") or []:
        if "Sequence" in piece:
            break
        if "SpecialToken" in piece:
            prefix.append(piece["SpecialToken"]["id"])
    return prefix


def tokenizer_prefix(files: TokenizerFiles, bos_token: str | None) -> str:
    """The text of the tokens the tokenizer itself puts in front of a prompt (BOS), '' if none: tokenizer_config's
    `add_bos_token` decides when present, else the tokenizer.json post-processor."""
    add_bos = files.config.get("add_bos_token")
    from_processor = _post_processor_prefix((files.tokenizer_json or {}).get("post_processor"))
    if add_bos is False:
        from_processor = [tok for tok in from_processor if tok != bos_token]
    elif add_bos is True and bos_token and bos_token not in from_processor:
        from_processor = [bos_token, *from_processor]
    return "".join(from_processor)


class _Backend(Protocol):
    engine: str
    template_sha256: str  # the identity of what this backend renders (a record's `template_sha256`)

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str: ...


class JinjaBackend:
    """A chat template compiled once, rendered with the variables transformers passes."""

    engine = "jinja"

    def __init__(self, source: str, variables: Mapping[str, Any], now: datetime, name: str) -> None:
        self.template = compile_template(source, now)
        self.template_sha256 = sha256_text(source)
        self.variables = dict(variables)
        self.name = name

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        try:
            return bounded_render(self.template, {"messages": list(messages), "tools": None, "documents": None,
                                                  "add_generation_prompt": add_generation_prompt, **self.variables})
        except TemplateLimit as exc:
            raise UserError(f"chat template of {self.name} refused: {exc} (a chat template comes with the model's "
                            f"files and is untrusted: a render is bounded to {RENDER_DEADLINE_S:g} s and "
                            f"{MAX_OUTPUT_CHARS:,} characters)") from None
        except Exception as exc:  # a template is code: whatever it raises (TypeError, RecursionError) is its failure
            lines = str(exc).strip().splitlines()
            detail = lines[0] if lines else "no message"
            if not isinstance(exc, jinja2.TemplateError):
                detail = f"{type(exc).__name__}: {detail}"
            raise UserError(f"chat template of {self.name} failed: {detail}") from exc


def _remember(cache: OrderedDict[Any, Any], key: Hashable, value: object) -> None:
    """Keep `value` under `key`, forgetting the oldest entry past `CACHE_SIZE`."""
    cache[key] = value
    if len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


class PromptRenderer:
    """A model's chat template, loaded once, rendering probe prompts that end at an open user header; `info` (kept
    in the results file's configuration line) renders the same prompts again."""

    def __init__(self, info: RendererInfo, backend: _Backend, *, stop: list[str] | None = None,
                 stop_token_ids: list[int] | None = None, tokenizer_json_path: Path | None = None,
                 count_fn: Any = None, special_tokens: SpecialTokens | None = None,
                 token_ids: Mapping[str, int] | None = None) -> None:
        self.info = info
        self.name = info.tokenizer
        self.family: Family = "gpt-oss" if info.renderer == "harmony" else detect_family(info.template or "",
                                                                                          info.tokenizer)
        self.backend = backend
        self.engine: str = backend.engine
        self.template_sha256 = backend.template_sha256  # not the recorded one: a replay compares the two
        self.stop = stop or []
        self.stop_token_ids = stop_token_ids or []
        self.token_ids = dict(token_ids or {})  # the single-token texts a stop string may be (sent as ids instead)
        self.strip_prefix = info.strip_prefix
        self._tokenizer_json_path = tokenizer_json_path
        self._count_fn = count_fn
        self._tokenizer: Any = None
        self._cache: OrderedDict[bytes, str] = OrderedDict()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self.special_tokens = special_tokens or SpecialTokens(())
        self.sentinel = SENTINEL_PREFIX + secrets.token_hex(16)  # content cannot hold what it cannot guess

    @classmethod
    def load(
        cls,
        name_or_path: str,
        *,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        harmony: bool | None = None,
    ) -> PromptRenderer:
        """Load a local tokenizer dir or a hub id (small files only).

        chat_template: a file path, a template name, or literal Jinja, used instead of the model's template.
        enable_thinking: passed to the template only when set (as `apply_chat_template(enable_thinking=...)`).
        template_kwargs: more template variables (e.g. `reasoning_effort` for gpt-oss, `clear_thinking` for GLM).
        now: the clock for `strftime_now` and gpt-oss's current date (default: frozen at load time).
        harmony: render gpt-oss with openai-harmony (default: yes for a gpt-oss model without a template override).
        """
        now = now or datetime.now()
        files = read_tokenizer_files(name_or_path)
        try:
            source = template_source(files, chat_template)
        except UserError:
            if chat_template is not None or harmony is False or detect_family("", name_or_path) != "gpt-oss":
                raise
            source = ""  # a gpt-oss model renders through harmony, which needs no template file
        variables = special_token_variables(files.config, files.special_tokens_map)
        tokens = added_tokens(files.config, files.tokenizer_json)
        specials = SpecialTokens([*(t.content for t in tokens.values() if t.special), *variables.values()])
        extra = dict(template_kwargs or {})
        if enable_thinking is not None:
            extra["enable_thinking"] = enable_thinking
        use_harmony = (detect_family(source, name_or_path) == "gpt-oss" and chat_template is None) if harmony is None \
            else harmony
        if use_harmony:
            from userturn.client.render.harmony_render import HarmonyRenderer

            backend = HarmonyRenderer(today=now, reasoning_effort=str(extra.get("reasoning_effort", "medium")),
                                      model_identity=extra.get("model_identity"))
            info = RendererInfo(tokenizer=name_or_path, renderer="harmony", chat_template=chat_template,
                                template_sha256=backend.template_sha256, enable_thinking=enable_thinking,
                                harmony={"today": backend.today, "reasoning_effort": backend.reasoning_effort,
                                         "model_identity": backend.model_identity})
            return cls(info, backend, stop=backend.stop, stop_token_ids=backend.stop_token_ids,
                       count_fn=backend.count_tokens, special_tokens=specials | backend.special_tokens,
                       token_ids=dict(zip(backend.stop, backend.stop_token_ids, strict=True)))
        jinja = JinjaBackend(source, {**variables, **extra}, now, name_or_path)
        stop = merge_stops(_end_of_turn(jinja, tokens), eos_stops(files.config, files.generation_config, tokens))
        info = RendererInfo(tokenizer=name_or_path, renderer="jinja", chat_template=chat_template, template=source,
                            template_sha256=jinja.template_sha256, enable_thinking=enable_thinking,
                            variables=jinja.variables, strip_prefix=tokenizer_prefix(files, variables.get("bos_token")),
                            now=now.isoformat())
        return cls(info, jinja, stop=stop, stop_token_ids=stop_token_ids(stop, tokens),
                   tokenizer_json_path=files.tokenizer_json_path, special_tokens=specials,
                   token_ids={tok.content: tok.id for tok in tokens.values()})

    @classmethod
    def from_info(cls, info: RendererInfo) -> PromptRenderer:
        """The renderer a results file's configuration line describes, for rendering its prompts again (no
        tokenizer files, no network). Stops and token counts are not restored (a replay needs neither)."""
        if info.renderer == "harmony":
            from userturn.client.render.harmony_render import HarmonyRenderer

            settings = info.harmony or {}
            return cls(info, HarmonyRenderer(today=settings.get("today"),
                                             reasoning_effort=str(settings.get("reasoning_effort", "medium")),
                                             model_identity=settings.get("model_identity")))
        if info.template is None:
            raise UserError(f"the configuration of {info.tokenizer} does not hold its chat template text")
        now = datetime.fromisoformat(info.now) if info.now else datetime.now()
        return cls(info, JinjaBackend(info.template, info.variables, now, info.tokenizer))

    def _render(self, messages: Sequence[Message | Mapping[str, Any]], user_turn: bool, cache: bool = True) -> str:
        converted = template_messages(messages)
        key = orjson.dumps([user_turn, converted], default=str)
        if cache and (cached := self._cache.get(key)) is not None:
            return cached
        if user_turn:
            if self.sentinel.encode() in key:  # 128 random bits: only content that read this renderer's memory
                raise UserError(f"message content contains the prompt renderer's sentinel {self.sentinel}")
            text = self.backend.render([*converted, {"role": "user", "content": self.sentinel}],
                                       add_generation_prompt=False)
            cut = text.find(self.sentinel)
            if cut < 0:
                raise UserError(f"chat template of {self.name} dropped the final user message; cannot cut the prompt"
                                " at the user header")
            text = text[:cut]
        else:
            text = self.backend.render(converted, add_generation_prompt=True)
        text = self.without_prefix(text)
        if cache:
            _remember(self._cache, key, text)
        return text

    def without_prefix(self, text: str) -> str:
        """`text` without the BOS the server's tokenizer adds itself (one BOS only)."""
        return text[len(self.strip_prefix):] if self.strip_prefix and text.startswith(self.strip_prefix) else text

    def user_turn_prompt(self, messages: Sequence[Message | Mapping[str, Any]], *, cache: bool = True) -> str:
        """The prompt for the model to write the next user turn: ends at the open user header. `cache=False` for
        a caller that renders each conversation once (the probe), whose renders would only fill the cache."""
        return self._render(messages, user_turn=True, cache=cache)

    def assistant_prompt(self, messages: Sequence[Message | Mapping[str, Any]]) -> str:
        """The prompt for the model to answer (add_generation_prompt=True)."""
        return self._render(messages, user_turn=False)

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None:
        """Tokens the server will see for `text` (incl. a BOS its tokenizer adds); None without tokenizer.json.
        `cache=False` for a caller that counts each text once (the probe under --tpm)."""
        if cache and (cached := self._counts.get(text)) is not None:
            return cached
        if self._count_fn is not None:
            count = self._count_fn(text)
        elif self._tokenizer_json_path is None:
            return None
        else:
            if self._tokenizer is None:
                from tokenizers import Tokenizer

                self._tokenizer = Tokenizer.from_file(str(self._tokenizer_json_path))
            count = len(self._tokenizer.encode(text, add_special_tokens=True).ids)
        if cache:
            _remember(self._counts, text, count)
        return count

    def __repr__(self) -> str:
        return (f"PromptRenderer({self.name!r}, family={self.family}, engine={self.engine}, "
                f"template_sha256={self.template_sha256[:12]}, stop={self.stop})")


def _end_of_turn(backend: JinjaBackend, tokens: Mapping[str, AddedToken]) -> list[str]:
    """Stops that end a user turn, read off the template: what it writes between a user message and the reply."""
    try:
        text = backend.render([{"role": "user", "content": _PROBE_A}, {"role": "assistant", "content": _PROBE_B}],
                              add_generation_prompt=False)
    except UserError:
        return []
    start, end = text.find(_PROBE_A), text.find(_PROBE_B)
    if start < 0 or end < start:
        return []
    return end_of_turn_stops(text[start + len(_PROBE_A):end], tokens)
