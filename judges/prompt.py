"""The versioned judge prompt: a markdown file in judges/prompts/ (kept byte for byte), hashed into every verdict.

A prompt *fences* its data (query, response, user turn) when every field goes through the `xml_text` filter, so
no generated text can close the tags around it: judge_v2.md and later do, judge_v1.md does not
(the default: `userturn.core.defaults.JUDGE_PROMPT`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

import jinja2

from userturn.core import defaults
from userturn.core.errors import UserError
from userturn.core.records import sha256_text

DEFAULT_PROMPT = f"{defaults.JUDGE_PROMPT}.md"
PACKAGED = re.compile(r"^judge_v\d+(?:\.md)?$")
FIELDS = ("query", "response", "user_turn")
_SECTION = re.compile(r"^# (system|user)[ \t]*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*(\|\s*xml_text\s*)?\}\}")


def xml_text(value: object) -> str:
    """Text escaped for use between tags: `&`, `<` and `>` become `&amp;`, `&lt;` and `&gt;` (quotes stay)."""
    return html.escape(str(value), quote=False)


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
_ENV.filters["xml_text"] = xml_text


@dataclass(frozen=True)
class JudgePrompt:
    """A parsed prompt file: system text, user template, version name, sha256 of the file's text, and whether
    every data field is escaped with `xml_text` (`fenced`)."""

    name: str
    system: str
    user_template: str
    sha256: str
    fenced: bool = False

    @cached_property
    def _template(self) -> jinja2.Template:
        return _ENV.from_string(self.user_template)  # compiled once per prompt, not per judgement

    def messages(self, query: str, response: str, user_turn: str) -> list[dict[str, str]]:
        """Chat messages for one judgement."""
        user = self._template.render(
            query=query.strip() or "(empty)",
            response=response.strip() or "(no assistant response)",
            user_turn=user_turn,
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def parse_prompt(text: str, name: str) -> JudgePrompt:
    """Split a prompt file into its `# system` and `# user` sections; UserError when a section or field is
    missing."""
    body = _COMMENT.sub("", text)
    parts = _SECTION.split(body)
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    if set(sections) != {"system", "user"} or len(parts) != 5:
        raise UserError(f"judge prompt {name}: needs exactly one '# system' and one '# user' section")
    system, user = sections["system"].strip(), sections["user"].strip()
    placeholders = [(m.group(1), bool(m.group(2))) for m in _PLACEHOLDER.finditer(user)]
    for field in FIELDS:
        if not any(found == field for found, _ in placeholders):
            raise UserError(f"judge prompt {name}: the '# user' section lacks {{{{ {field} }}}} "
                            f"(or {{{{ {field} | xml_text }}}})")
    fenced = all(escaped for found, escaped in placeholders if found in FIELDS)
    return JudgePrompt(name=name, system=system, user_template=user, sha256=sha256_text(text), fenced=fenced)


def packaged_names() -> list[str]:
    """The prompt files shipped in judges/prompts/, by name (`judge_v1.md`, ...)."""
    return sorted(p.name for p in resources.files("userturn.judges").joinpath("prompts").iterdir()
                  if p.name.endswith(".md"))


def packaged_prompt(name: str) -> JudgePrompt:
    """A prompt shipped in judges/prompts/ by name: `judge_v1`, `judge_v2.md`, ..."""
    filename = name if name.endswith(".md") else f"{name}.md"
    resource = resources.files("userturn.judges").joinpath("prompts", filename)
    if not resource.is_file():
        raise UserError(f"judge prompt not found: {name} (packaged prompts: {', '.join(packaged_names())})")
    return parse_prompt(resource.read_text(encoding="utf-8"), filename)


def load_prompt(path: str | Path | None = None) -> JudgePrompt:
    """Load a prompt: a file path (wins over a packaged name of the same spelling), a packaged version name
    (`judge_v1`), or by default `DEFAULT_PROMPT`."""
    if path is None:
        return packaged_prompt(DEFAULT_PROMPT)
    path = Path(path)
    if path.is_file():
        return parse_prompt(path.read_text(encoding="utf-8"), path.name)
    if PACKAGED.match(str(path)):
        return packaged_prompt(str(path))
    raise UserError(f"judge prompt not found: {path}")
