"""Render the probe prompt with the model's own chat template, cut so it ends at an open user header.

`PromptRenderer.user_turn_prompt(messages)` renders `messages + [user SENTINEL]` with the model's template and
cuts at the sentinel (random per renderer, so no content can hold it): the prompt is exactly what the model saw in
training up to the user header (no header is ever appended by hand; reasoning is dropped from history exactly as
the template drops it).

Rendering is byte-identical to `transformers`' `tokenizer.apply_chat_template(..., tokenize=False)` without
importing transformers: the tokenizer files are read here and the template is compiled once with jinja2 the way
transformers compiles it (see `transformers/utils/chat_template_utils.py`). gpt-oss models go through harmony
(`client.render.harmony_render`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
import orjson
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel
from userturn.client.render.special_tokens import SpecialTokens
from userturn.client.render.stops import (
    AddedToken,
    added_tokens,
    end_of_turn_stops,
    eos_stops,
    merge_stops,
    stop_token_ids,
    token_text,
)

from userturn.core.errors import UserError
from userturn.core.packaged import is_gguf
from userturn.core.records import Message, RendererInfo, sha256_text

SENTINEL_PREFIX = "USERTURNSENTINEL"  # + 32 random hex digits per renderer
_PROBE_A, _PROBE_B = "USERTURNPROBEAAA41e2", "USERTURNPROBEBBB58d0"
TOKENIZER_FILES = (
    "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
    "special_tokens_map.json", "generation_config.json", "tokenizer.json",
)
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_CACHE_SIZE = 4096

Family = Literal["qwen3", "glm", "gpt-oss", "chatml", "generic"]


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer files


@dataclass
class TokenizerFiles:
    """The small files of a tokenizer that rendering needs (never weights)."""

    source: str
    config: dict[str, Any]
    chat_template_file: str | None = None  # chat_template.jinja (wins over tokenizer_config, as in transformers)
    chat_template_json: dict[str, Any] | None = None
    special_tokens_map: dict[str, Any] | None = None
    generation_config: dict[str, Any] | None = None
    tokenizer_json_path: Path | None = None
    tokenizer_json: dict[str, Any] | None = field(default=None, repr=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from exc
    return _read_json_cached(path.resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=16)
def _read_json_cached(path: Path, size: int, mtime_ns: int) -> dict[str, Any]:
    """Parsed JSON, kept per (file, size, mtime): tokenizer.json is ~10 MB and takes ~0.4 s to parse."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _files_from_paths(source: str, paths: Mapping[str, Path | None]) -> TokenizerFiles:
    config_path = paths.get("tokenizer_config.json")
    if config_path is None:
        raise UserError(f"{source}: no tokenizer_config.json (not a tokenizer directory)")
    tok_json = paths.get("tokenizer.json")
    template_path = paths.get("chat_template.jinja")
    return TokenizerFiles(
        source=source,
        config=_read_json(config_path),
        chat_template_file=template_path.read_text(encoding="utf-8") if template_path else None,
        chat_template_json=_read_json(p) if (p := paths.get("chat_template.json")) else None,
        special_tokens_map=_read_json(p) if (p := paths.get("special_tokens_map.json")) else None,
        generation_config=_read_json(p) if (p := paths.get("generation_config.json")) else None,
        tokenizer_json_path=tok_json,
        tokenizer_json=_read_tokenizer_json_head(tok_json) if tok_json else None,
    )


_MODEL_KEY = b'\n  "model": '  # tokenizers writes the (large) vocabulary last, at this indentation


def _read_tokenizer_json_head(path: Path) -> dict[str, Any]:
    """tokenizer.json without its `model` (vocabulary/merges): added tokens and post-processor are all we need.

    Parsing only the part before the vocabulary costs kilobytes instead of ~10 MB and ~60 MB of memory; any file
    laid out differently is parsed whole.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(4 << 20)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from exc
    cut = head.find(_MODEL_KEY)
    if cut > 0:
        prefix = head[:cut].rstrip()
        if prefix.endswith(b","):
            try:
                data = orjson.loads(prefix[:-1] + b"}")
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and "added_tokens" in data:
                return data
    return _read_json(path)


def _local_files(folder: Path) -> TokenizerFiles:
    if not folder.is_dir():
        raise UserError(f"tokenizer path {folder} is not a directory")
    paths = {name: folder / name for name in TOKENIZER_FILES if (folder / name).is_file()}
    return _files_from_paths(str(folder), paths)


def _hub_files(repo_id: str, revision: str | None = None) -> TokenizerFiles:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    paths: dict[str, Path | None] = {}
    for name in TOKENIZER_FILES:
        try:
            paths[name] = Path(hf_hub_download(repo_id, name, revision=revision))
        except (EntryNotFoundError, LocalEntryNotFoundError) as exc:
            if name == "tokenizer_config.json":
                if isinstance(exc, LocalEntryNotFoundError):
                    raise UserError(
                        f"hub id {repo_id}: cannot download tokenizer_config.json (hub unreachable or HF_HUB_OFFLINE=1,"
                        " and not in the local cache); pass a local tokenizer directory instead") from exc
                raise UserError(f"hub id {repo_id}: no tokenizer_config.json in the repository") from exc
            paths[name] = None
        except GatedRepoError as exc:
            raise UserError(f"hub id {repo_id}: gated repository; accept its terms and set HF_TOKEN") from exc
        except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
            raise UserError(f"hub id {repo_id}: repository or revision not found on the hub") from exc
        except (HfHubHTTPError, OSError) as exc:
            raise UserError(f"hub id {repo_id}: cannot download {name}: {str(exc).splitlines()[0]}") from exc
    return _files_from_paths(repo_id, paths)


def read_tokenizer_files(name_or_path: str) -> TokenizerFiles:
    """Tokenizer files from a local directory, a GGUF file's metadata, or the HF hub (small files) for a repo id."""
    if is_gguf(name_or_path):  # a .gguf path or pkg:PACKAGE/file.gguf: tokenizer and template from its metadata
        from userturn.core.gguf_tokenizer import gguf_tokenizer_dir

        files = _local_files(gguf_tokenizer_dir(name_or_path))
        files.source = name_or_path
        return files
    path = Path(name_or_path).expanduser()
    if path.exists():
        return _local_files(path)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path
    if looks_like_path or not _REPO_ID.match(name_or_path):
        raise UserError(f"tokenizer directory not found: {name_or_path}")
    return _hub_files(name_or_path)


# ---------------------------------------------------------------------------------------------------------------
# What transformers passes to the template


def template_source(files: TokenizerFiles, override: str | None) -> str:
    """The chat template used: the override (a file path, a template name, or literal Jinja), else the model's."""
    config_template = files.config.get("chat_template")
    named: dict[str, str] = {}
    if isinstance(config_template, list):
        named = {t["name"]: t["template"] for t in config_template if isinstance(t, Mapping) and "name" in t}
    if override is not None:
        override_path = Path(override).expanduser()
        if "\n" not in override and len(override) < 4096 and override_path.is_file():
            return override_path.read_text(encoding="utf-8")
        if override in named:
            return named[override]
        if "{{" in override or "{%" in override:
            return override
        raise UserError(f"--chat-template: file not found: {override}")
    if files.chat_template_file is not None:
        return files.chat_template_file
    if isinstance(config_template, str):
        return config_template
    if named:
        if "default" not in named:
            raise UserError(f"{files.source}: several chat templates ({', '.join(sorted(named))}) and no 'default';"
                            " pick one with --chat-template NAME")
        return named["default"]
    json_template = (files.chat_template_json or {}).get("chat_template")
    if isinstance(json_template, str):
        return json_template
    raise UserError(f"{files.source}: no chat template (tokenizer_config.json has none and no chat_template.jinja);"
                    " pass --chat-template FILE")


def special_token_variables(config: Mapping[str, Any], special_tokens_map: Mapping[str, Any] | None) -> dict[str, str]:
    """`tokenizer.special_tokens_map` as transformers builds it: named special tokens passed to the template."""
    merged = dict(config)
    if "added_tokens_decoder" not in config and special_tokens_map:  # legacy: special_tokens_map.json is merged
        merged.update({k: v for k, v in special_tokens_map.items() if k != "extra_special_tokens"})
    out: dict[str, str] = {}
    for key in NAMED_SPECIAL_TOKENS:
        if (text := token_text(merged.get(key))) is not None:
            out[key] = text
    extra = merged.get("extra_special_tokens")
    model_specific = dict(extra) if isinstance(extra, Mapping) else {}
    for key, value in merged.items():
        if key.endswith("_token") and key not in NAMED_SPECIAL_TOKENS and token_text(value) is not None:
            model_specific.setdefault(key, value)
    for key, value in model_specific.items():
        if (text := token_text(value)) is not None:
            out[key] = text
    return out


def template_messages(messages: Sequence[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as transformers hands them to a template: dicts, None values dropped, reasoning aliased.

    A message with reasoning (`reasoning_content`, `thinking` or `reasoning`) gets both `thinking` (read by
    gpt-oss templates) and `reasoning_content` (read by Qwen3/GLM templates), exactly as transformers does.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if type(message) is Message and not message.__pydantic_extra__:  # role and content, both set: no reasoning
            out.append(dict(message.__dict__))  # (an extra) and no None to drop
            continue
        if isinstance(message, BaseModel):  # fields then extras, as model_dump() orders them, without copying
            raw = {**message.__dict__, **(message.__pydantic_extra__ or {})}
        else:
            raw = dict(message)
        item = {k: v for k, v in raw.items() if v is not None}
        reasoning = next((item[k] for k in REASONING_FIELDS if item.get(k) is not None), None)
        if reasoning is not None:
            item = {"thinking": reasoning, **item, "reasoning_content": reasoning}
        out.append(item)
    return out


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (assistant-mask markers some templates use): renders its body."""

    tags = {"generation"}  # noqa: RUF012  (jinja reads a class attribute)

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


class _TemplateDict:
    """`dict(...)` for templates, without attribute access to the real type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore-prefixed attributes, as transformers does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with an underscore")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class CachedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with its two per-access checks memoised; what it allows and refuses is unchanged.

    `is_safe_attribute` depends only on the object's type and the attribute name (name prefixes and `isinstance`
    tests against builtin and abstract types), so its answer is cached per (type, name). `is_safe_callable` reads
    two marker attributes that a builtin method cannot carry, so builtin methods (`.startswith`, `.split`...)
    skip the lookups. Together they take about a third off a Qwen3 render.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._safe_attributes: dict[tuple[type, str], bool] = {}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        key = (type(obj), attr)
        try:
            return self._safe_attributes[key]
        except KeyError:
            safe = self._safe_attributes[key] = super().is_safe_attribute(obj, attr, value)
            return safe

    def is_safe_callable(self, obj: Any) -> bool:
        if type(obj) is _BUILTIN_METHOD:
            return True
        return super().is_safe_callable(obj)


_BUILTIN_METHOD = type("".startswith)


def compile_template(source: str, now: datetime) -> jinja2.Template:
    """Compile a chat template in the environment transformers uses; `strftime_now` reads the frozen `now`."""
    env = CachedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = now.strftime
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"chat template line {exc.lineno}: syntax error: {exc.message}") from exc


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
            if len(self._cache) > _CACHE_SIZE:
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
            if len(self._counts) > _CACHE_SIZE:
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
