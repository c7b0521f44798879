"""The exact prompt behind a record, rebuilt from the results file alone and checked against its `prompt_sha256`.

Raw mode: the record's `messages` rendered by the renderer its configuration line keeps (`records.RendererInfo`),
or by a tokenizer given explicitly (files from before configuration lines need one). Chat mode: the role-flipped
messages (`chat_mode.role_flip_messages`). The rebuilt prompt is the one sent only when the sha256s match.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from userturn.client.render.chat_mode import role_flip_messages
from userturn.client.render.templates import PromptRenderer
from userturn.client.short_keys import keyed_lines
from userturn.core.errors import UserError, damaged_line, first_error
from userturn.core.records import ConfigLine, ProbeRecord, sha256_text
from userturn.core.results_files import as_paths


@dataclass(frozen=True)
class ReplayedPrompt:
    """A record's prompt as sent: `text` is the `prompt` string (raw) or the `messages` JSON array (chat)."""

    mode: Literal["raw", "chat"]
    text: str
    sha256: str
    recorded_sha256: str | None
    messages: list[dict[str, Any]] | None = None  # chat mode: the array sent

    @property
    def verified(self) -> bool:
        return self.recorded_sha256 is not None and self.sha256 == self.recorded_sha256


class Replayer:
    """Rebuilds the prompts of many records: with the renderer each record's configuration line (`configs`, by
    fingerprint) describes, or with one tokenizer given explicitly (a renderer per (engine, template variables),
    loaded once). Without either, chat-mode prompts only (raw mode raises UserError saying what to pass)."""

    def __init__(self, tokenizer: str | None, chat_template: str | None = None, renderer: str | None = None,
                 now: datetime | None = None, *, configs: Mapping[str, ConfigLine] | None = None) -> None:
        self.tokenizer, self.chat_template, self.renderer = tokenizer, chat_template, renderer
        self.now = now  # the clock of templates that print the date (`strftime_now`, gpt-oss): the probe's day
        self._configs = configs or {}
        self._loaded: dict[bytes, PromptRenderer] = {}
        self._recorded: dict[str, PromptRenderer] = {}

    def config_of(self, record: ProbeRecord) -> ConfigLine | None:
        return self._configs.get(record.config_fingerprint or "")

    def renderer_for(self, record: ProbeRecord) -> PromptRenderer | None:
        if record.mode == "chat":
            return None
        config = self.config_of(record)
        if self.tokenizer is None:
            if config is None or config.renderer is None:
                return None
            if config.fingerprint not in self._recorded:
                self._recorded[config.fingerprint] = PromptRenderer.from_info(config.renderer)
            return self._recorded[config.fingerprint]
        settings = config.config if config else {}
        choice = self.renderer
        if choice is None or choice == "auto":  # the engine the probe recorded (none in chat mode or old files)
            choice = {"harmony": "harmony", "jinja": "chat_template"}.get(settings.get("template_engine") or "", "auto")
        kwargs = dict(settings.get("template_kwargs") or {})  # incl. enable_thinking
        cache_key = orjson.dumps([choice, kwargs], option=orjson.OPT_SORT_KEYS)
        if cache_key not in self._loaded:
            harmony = {"auto": None, "chat_template": False, "harmony": True}[choice]
            self._loaded[cache_key] = PromptRenderer.load(self.tokenizer, chat_template=self.chat_template,
                                                          template_kwargs=kwargs or None, harmony=harmony,
                                                          now=self.now)
        return self._loaded[cache_key]

    def prompt(self, record: ProbeRecord) -> ReplayedPrompt:
        """The prompt `record` was generated from. Raw mode needs the renderer the probe used (its template sha256
        must equal the record's, else UserError naming both); chat mode needs none."""
        if record.mode == "chat":
            dumped = [m.model_dump(exclude_none=True) for m in role_flip_messages(record.messages)]
            text = orjson.dumps(dumped).decode()
            return ReplayedPrompt("chat", text, sha256_text(text), record.prompt_sha256, messages=dumped)
        renderer = self.renderer_for(record)
        if renderer is None:
            raise UserError(f"record {record.key!r} is a raw-mode record and its file does not say how its prompt "
                            "was rendered (a file from before configuration lines); pass --tokenizer (and "
                            "--chat-template) as given to the probe, or --manifest")
        if record.template_sha256 and renderer.template_sha256 != record.template_sha256:
            raise UserError(f"template of {renderer.name} (sha256 {renderer.template_sha256[:12]}) is not the one "
                            f"the record was rendered with (sha256 {record.template_sha256[:12]}): pass the "
                            "--tokenizer, --chat-template and --renderer the probe used")
        text = renderer.user_turn_prompt(record.messages)
        return ReplayedPrompt("raw", text, sha256_text(text), record.prompt_sha256)


def find_record(paths: str | Path | Sequence[str | Path], key: str) -> ProbeRecord:
    """The last record with `key` in results files read line by line (only the keys are held, for suggestions).
    UserError for an unknown key (with the closest keys) or a key recorded with two configurations."""
    files = as_paths(paths)
    found: tuple[Path, int, bytes] | None = None
    fingerprints: set[object] = set()
    keys: set[str] = set()
    for path, number, raw, obj in keyed_lines(files):
        value = obj.get("key")
        if value == key:
            found = (path, number, raw)
            fingerprints.add(obj.get("config_fingerprint"))
        elif isinstance(value, str):
            keys.add(value)
    where = " ".join(map(str, files))
    if len(fingerprints) > 1:
        shown = ", ".join(sorted(str(f) for f in fingerprints))
        raise UserError(f"{where}: key {key!r} is recorded with {len(fingerprints)} configurations ({shown}); "
                        "read each configuration's files apart")
    if found is None:
        close = difflib.get_close_matches(key, list(keys), n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else f" ({len(keys)} keys in the file{'s' * (len(files) > 1)})"
        raise UserError(f"{where}: no record with key {key!r}{hint}")
    path, number, raw = found
    try:
        return ProbeRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise damaged_line(path, number, first_error(exc, "record")) from None
