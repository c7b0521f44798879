"""The versioned judge prompt: a markdown file in judges/prompts/, hashed into every verdict."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2
from userturn.client.errors import UserError
from userturn.client.records import sha256_text

DEFAULT_PROMPT = "judge_v1.md"
_SECTION = re.compile(r"^# (system|user)[ \t]*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


@dataclass(frozen=True)
class JudgePrompt:
    """A parsed prompt file: system text, user template, version name and sha256 of the file's text."""

    name: str
    system: str
    user_template: str
    sha256: str

    def messages(self, query: str, response: str, user_turn: str) -> list[dict[str, str]]:
        """Chat messages for one judgement."""
        user = _ENV.from_string(self.user_template).render(
            query=query.strip() or "(empty)",
            response=response.strip() or "(no assistant response)",
            user_turn=user_turn,
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def parse_prompt(text: str, name: str) -> JudgePrompt:
    """Split a prompt file into its `# system` and `# user` sections."""
    body = _COMMENT.sub("", text)
    parts = _SECTION.split(body)
    # parts: [preamble, "system", text, "user", text]
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    if set(sections) != {"system", "user"} or len(parts) != 5:
        raise UserError(f"judge prompt {name}: needs exactly one '# system' and one '# user' section")
    system, user = sections["system"].strip(), sections["user"].strip()
    for field in ("query", "response", "user_turn"):
        if "{{ " + field + " }}" not in user:
            raise UserError(f"judge prompt {name}: the '# user' section lacks {{{{ {field} }}}}")
    return JudgePrompt(name=name, system=system, user_template=user, sha256=sha256_text(text))


def load_prompt(path: str | Path | None = None) -> JudgePrompt:
    """Load a prompt file (default: the packaged judges/prompts/judge_v1.md)."""
    if path is None:
        text = resources.files("userturn.judges").joinpath("prompts", DEFAULT_PROMPT).read_text(encoding="utf-8")
        return parse_prompt(text, DEFAULT_PROMPT)
    path = Path(path)
    if not path.is_file():
        raise UserError(f"judge prompt not found: {path}")
    return parse_prompt(path.read_text(encoding="utf-8"), path.name)
