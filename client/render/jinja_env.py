"""What transformers passes to a chat template, and the sandboxed jinja2 environment that compiles it the way
transformers does (`transformers/utils/chat_template_utils.py`), without importing transformers.

A chat template is code from the model's files (a GGUF, a hub tokenizer): untrusted. Besides jinja2's sandbox (no
attribute of Python's internals, `range` capped at 100,000), every render is bounded in time and size by the sandbox
itself, in the render's own thread (no thread, no process): `range` loops and the output check a deadline
(`RENDER_DEADLINE_S`) and the characters written (`MAX_OUTPUT_CHARS`); a size asked of a call, a filter or `*` / `**`
beyond that cap is refused before it is built (loops over the template's data are as long as its data). `TemplateLimit`
says which bound was hit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from pydantic import BaseModel

from userturn.client.render.stops import token_text
from userturn.client.render.tokenizer_files import TokenizerFiles
from userturn.core.errors import UserError
from userturn.core.records import Message

RENDER_DEADLINE_S = 10.0  # one render of a prompt takes milliseconds
MAX_OUTPUT_CHARS = 16 << 20  # a prompt of a million tokens is ~4 Mi characters
SIZED_FILTERS = ("center", "indent", "wordwrap", "truncate", "batch", "slice")  # take a size or a count


class TemplateLimit(jinja2.exceptions.SecurityError):
    """A render ran past its deadline or asked for more than the output cap."""


NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


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
    extra = merged.get("extra_special_tokens")
    model_specific = dict(extra) if isinstance(extra, Mapping) else {}
    for key, value in merged.items():
        if key.endswith("_token") and key not in NAMED_SPECIAL_TOKENS:
            model_specific.setdefault(key, value)
    tokens = [(key, merged.get(key)) for key in NAMED_SPECIAL_TOKENS] + list(model_specific.items())
    return {key: text for key, value in tokens if (text := token_text(value)) is not None}


def template_messages(messages: Sequence[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as transformers hands them to a template: dicts, None values dropped, and a message's reasoning
    (`reasoning_content`, `thinking` or `reasoning`) under both `thinking` (gpt-oss) and `reasoning_content` (Qwen3,
    GLM)."""
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
    """transformers' sandbox made faster, allowing and refusing the same (a render in 0.47x the time:
    `benchmarks/bench_fast_paths.py --part sandbox`).

    `is_safe_attribute` depends only on the object's type and the attribute name, so it is cached per (type, name);
    a builtin method cannot carry the markers `is_safe_callable` looks for, so it skips the lookups.
    """

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._safe_attributes: dict[tuple[type, str], bool] = {}
        self.deadline = float("inf")  # set by `bounded_render` for each render

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimit(f"rendering ran past {RENDER_DEADLINE_S:g} s")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_sizes(args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int) and len(seq) * times > \
                        MAX_OUTPUT_CHARS:
                    raise TemplateLimit(f"a sequence of {len(seq)} times {times} is beyond {MAX_OUTPUT_CHARS:,}")
        elif isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and \
                right * max(abs(left).bit_length(), 1) > 1 << 16:
            raise TemplateLimit(f"{left} ** {right} is too large a number")
        return super().call_binop(context, operator, left, right)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        key = (type(obj), attr)
        try:
            return self._safe_attributes[key]
        except KeyError:
            safe = self._safe_attributes[key] = super().is_safe_attribute(obj, attr, value)
            return safe

    def is_safe_callable(self, obj: Any) -> bool:
        return type(obj) is _BUILTIN_METHOD or super().is_safe_callable(obj)

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        """A template's globals as one plain dict, not a ChainMap over the environment's, which every render copies
        slowly (~15% of a Qwen3 render). `compile_template` sets every global before compiling, as jinja asks."""
        return {**self.globals, **(d or {})}

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`message.role` on a plain dict without the AttributeError jinja raises and catches first: the item, or
        undefined when missing, as jinja gives after that error."""
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


_BUILTIN_METHOD = type("".startswith)
_DICT_ATTRIBUTES = frozenset(dir(dict))  # every attribute a plain dict has (its type's and object's)


def _check_sizes(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        if type(value) is int and value > MAX_OUTPUT_CHARS:
            raise TemplateLimit(f"a size of {value:,} asked, beyond {MAX_OUTPUT_CHARS:,}")


def _sized(apply: Callable[..., Any]) -> Callable[..., Any]:
    """A filter whose sizes and counts are checked against the output cap first."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_sizes(args, kwargs)
        return apply(*args, **kwargs)

    for marker in ("jinja_pass_arg",):  # jinja passes the environment or context to filters marked so
        if hasattr(apply, marker):
            setattr(checked, marker, getattr(apply, marker))
    return checked


class _BoundedRange:
    """`range` for templates: jinja2's capped range, whose iteration checks the render's deadline."""

    def __init__(self, env: CachedSandbox) -> None:
        self.env = env

    def __call__(self, *args: int) -> _Steps:
        return _Steps(safe_range(*args), self.env)


class _Steps(Sequence[int]):
    def __init__(self, steps: range, env: CachedSandbox) -> None:
        self.steps, self.env = steps, env

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: Any) -> Any:
        return self.steps[index]

    def __iter__(self) -> Iterator[int]:
        for i, value in enumerate(self.steps):
            if not i & 255:
                self.env.check_time()
            yield value

    def __reversed__(self) -> Iterator[int]:
        return iter(_Steps(self.steps[::-1], self.env))


def bounded_render(template: jinja2.Template, variables: Mapping[str, Any]) -> str:
    """`template.render(**variables)` within RENDER_DEADLINE_S and MAX_OUTPUT_CHARS (else TemplateLimit)."""
    env = template.environment
    assert isinstance(env, CachedSandbox)
    env.deadline = time.monotonic() + RENDER_DEADLINE_S
    parts: list[str] = []
    size = 0
    try:
        for part in template.generate(**variables):
            size += len(part)
            parts.append(part)
            if not len(parts) & 63:
                env.check_time()
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimit(f"its output passed {MAX_OUTPUT_CHARS:,} characters")
    finally:
        env.deadline = float("inf")
    return "".join(parts)


def compile_template(source: str, now: datetime) -> jinja2.Template:
    """Compile a chat template in the environment transformers uses; `strftime_now` reads the frozen `now`."""
    env = CachedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = now.strftime
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    env.globals["range"] = _BoundedRange(env)
    for name in SIZED_FILTERS:
        env.filters[name] = _sized(env.filters[name])
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"chat template line {exc.lineno}: syntax error: {exc.message}") from exc
