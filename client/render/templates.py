"""Render the probe prompt with the model's own chat template, cut so it ends at an open user header.

`PromptRenderer.user_turn_prompt(messages)` renders `messages + [user SENTINEL]` with the model's template and
cuts at the sentinel (random per renderer, so no content can hold it): the prompt is exactly what the model saw in
training up to the user header (no header is ever appended by hand; reasoning is dropped from history exactly as
the template drops it).

Rendering is byte-identical to `transformers`' `tokenizer.apply_chat_template(..., tokenize=False)` without
importing transformers: the tokenizer files are read by `client.render.tokenizer_files` and the template is
compiled once with jinja2 the way transformers compiles it (`client.render.jinja_env`). gpt-oss models go through
harmony (`client.render.harmony_render`).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
import orjson
from userturn.client.render.jinja_env import (
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


# ---------------------------------------------------------------------------------------------------------------
# Facts derived from the tokenizer


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
    """The text of the tokens the tokenizer itself puts in front of a prompt (BOS), '' if none.

    `add_bos_token` in tokenizer_config decides when present; otherwise the tokenizer.json post-processor does.
    """
    add_bos = files.config.get("add_bos_token")
    from_processor = _post_processor_prefix((files.tokenizer_json or {}).get("post_processor"))
    if add_bos is False:
        from_processor = [tok for tok in from_processor if tok != bos_token]
    elif add_bos is True and bos_token and bos_token not in from_processor:
        from_processor = [bos_token, *from_processor]
    return "".join(from_processor)


def tokenizer_special_tokens(files: TokenizerFiles, variables: Mapping[str, str] | None = None,
                             tokens: Mapping[str, AddedToken] | None = None) -> SpecialTokens:
    """The tokenizer's special tokens: added tokens marked `special` and the named ones (`bos_token`, ...)."""
    if variables is None:
        variables = special_token_variables(files.config, files.special_tokens_map)
    if tokens is None:
        tokens = added_tokens(files.config, files.tokenizer_json)
    return SpecialTokens([*(t.content for t in tokens.values() if t.special), *variables.values()])


# ---------------------------------------------------------------------------------------------------------------
# The renderer


class _Backend(Protocol):
    engine: str

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str: ...


class JinjaBackend:
    """A chat template compiled once, rendered with the variables transformers passes."""

    engine = "jinja"

    def __init__(self, source: str, variables: Mapping[str, Any], now: datetime, name: str) -> None:
        self.source = source
        self.template = compile_template(source, now)
        self.variables = dict(variables)
        self.name = name

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        try:
            return self.template.render(messages=list(messages), tools=None, documents=None,
                                        add_generation_prompt=add_generation_prompt, **self.variables)
        except Exception as exc:  # a template is code: whatever it raises (TypeError, RecursionError) is its failure
            detail = _first_line(exc)
            if not isinstance(exc, jinja2.TemplateError):
                detail = f"{type(exc).__name__}: {detail}"
            raise UserError(f"chat template of {self.name} failed: {detail}") from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "no message"


class PromptRenderer:
    """A model's chat template, loaded once, rendering probe prompts that end at an open user header."""

    family: Family
    template_sha256: str
    stop: list[str]
    stop_token_ids: list[int]

    def __init__(
        self,
        *,
        name: str,
        family: Family,
        backend: _Backend,
        template_sha256: str,
        stop: list[str],
        stop_token_ids: list[int],
        strip_prefix: str = "",
        tokenizer_json_path: Path | None = None,
        count_fn: Any = None,
        special_tokens: SpecialTokens | None = None,
        info: RendererInfo | None = None,
    ) -> None:
        self.name = name
        self.info = info  # what renders the same prompts again (recorded in the results file's configuration line)
        self.family = family
        self.backend = backend
        self.engine: str = backend.engine
        self.template_sha256 = template_sha256
        self.stop = stop
        self.stop_token_ids = stop_token_ids
        self.strip_prefix = strip_prefix
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
        family = detect_family(source, name_or_path)
        variables = special_token_variables(files.config, files.special_tokens_map)
        extra = dict(template_kwargs or {})
        if enable_thinking is not None:
            extra["enable_thinking"] = enable_thinking
        use_harmony = (family == "gpt-oss" and chat_template is None) if harmony is None else harmony
        if use_harmony:
            from userturn.client.render.harmony_render import HarmonyRenderer

            harmony_backend = HarmonyRenderer(today=now, reasoning_effort=str(extra.get("reasoning_effort", "medium")),
                                              model_identity=extra.get("model_identity"))
            info = RendererInfo(tokenizer=name_or_path, renderer="harmony", chat_template=chat_template,
                                template_sha256=harmony_backend.template_sha256, enable_thinking=enable_thinking,
                                harmony={"today": harmony_backend.today,
                                         "reasoning_effort": harmony_backend.reasoning_effort,
                                         "model_identity": harmony_backend.model_identity})
            return cls(name=name_or_path, family="gpt-oss", backend=harmony_backend,
                       template_sha256=harmony_backend.template_sha256, stop=harmony_backend.stop,
                       stop_token_ids=harmony_backend.stop_token_ids, count_fn=harmony_backend.count_tokens,
                       special_tokens=tokenizer_special_tokens(files, variables) | harmony_backend.special_tokens,
                       info=info)
        jinja = JinjaBackend(source, {**variables, **extra}, now, name_or_path)
        tokens = added_tokens(files.config, files.tokenizer_json)
        stop = merge_stops(_end_of_turn(jinja, tokens), eos_stops(files.config, files.generation_config, tokens))
        strip_prefix = tokenizer_prefix(files, variables.get("bos_token"))
        info = RendererInfo(tokenizer=name_or_path, renderer="jinja", chat_template=chat_template, template=source,
                            template_sha256=sha256_text(source), enable_thinking=enable_thinking,
                            variables=jinja.variables, strip_prefix=strip_prefix, now=now.isoformat())
        return cls(
            name=name_or_path, family=family, backend=jinja, template_sha256=sha256_text(source),
            stop=stop, stop_token_ids=stop_token_ids(stop, tokens), strip_prefix=strip_prefix,
            tokenizer_json_path=files.tokenizer_json_path,
            special_tokens=tokenizer_special_tokens(files, variables, tokens), info=info,
        )

    @classmethod
    def from_info(cls, info: RendererInfo) -> PromptRenderer:
        """The renderer a results file's configuration line describes, for rendering its prompts again (no
        tokenizer files, no network): the same template, variables, date and BOS handling. Stops and token counts
        are not restored (a replay needs neither)."""
        if info.renderer == "harmony":
            from userturn.client.render.harmony_render import HarmonyRenderer

            settings = info.harmony or {}
            harmony_backend = HarmonyRenderer(today=settings.get("today"),
                                              reasoning_effort=str(settings.get("reasoning_effort", "medium")),
                                              model_identity=settings.get("model_identity"))
            return cls(name=info.tokenizer, family="gpt-oss", backend=harmony_backend,
                       template_sha256=harmony_backend.template_sha256, stop=[], stop_token_ids=[], info=info)
        if info.template is None:
            raise UserError(f"the configuration of {info.tokenizer} does not hold its chat template text")
        now = datetime.fromisoformat(info.now) if info.now else datetime.now()
        jinja = JinjaBackend(info.template, info.variables, now, info.tokenizer)
        return cls(name=info.tokenizer, family=detect_family(info.template, info.tokenizer), backend=jinja,
                   template_sha256=sha256_text(info.template), stop=[], stop_token_ids=[],
                   strip_prefix=info.strip_prefix, info=info)

    # -- rendering --------------------------------------------------------------------------------------------

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
        if self.strip_prefix and text.startswith(self.strip_prefix):
            text = text[len(self.strip_prefix):]  # the server's tokenizer adds it: one BOS only
        if cache:
            self._cache[key] = text
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return text

    def user_turn_prompt(self, messages: Sequence[Message | Mapping[str, Any]], *, cache: bool = True) -> str:
        """The prompt for the model to write the next user turn: ends at the open user header. `cache=False` for
        a caller that renders each conversation once (the probe: one render per item and perturbation, whatever
        the samples), whose renders would only fill the cache (~28 MB of prompts at 4,096 entries of GSM8K size)."""
        return self._render(messages, user_turn=True, cache=cache)

    def assistant_prompt(self, messages: Sequence[Message | Mapping[str, Any]]) -> str:
        """The prompt for the model to answer (add_generation_prompt=True)."""
        return self._render(messages, user_turn=False)

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None:
        """Tokens the server will see for `text` (incl. a BOS its tokenizer adds); None without tokenizer.json.
        `cache=False` for a caller that counts each text once (the probe under --tpm)."""
        if cache and (cached := self._counts.get(text)) is not None:
            return cached
        count = self._count(text)
        if count is not None and cache:
            self._counts[text] = count
            if len(self._counts) > CACHE_SIZE:
                self._counts.popitem(last=False)
        return count

    def _count(self, text: str) -> int | None:
        if self._count_fn is not None:
            return self._count_fn(text)
        if self._tokenizer is None:
            if self._tokenizer_json_path is None:
                return None
            try:
                from tokenizers import Tokenizer
            except ImportError:
                self._tokenizer_json_path = None
                return None
            self._tokenizer = Tokenizer.from_file(str(self._tokenizer_json_path))
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)

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
