"""`run --dry-run`: one prompt per model, rendered exactly as the run would send it (raw mode), so a missing or
broken chat template is found before any server starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from userturn.core.errors import UserError

if TYPE_CHECKING:
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.render.templates import PromptRenderer

PLACEHOLDER_ANSWER = "(the probed model's own answer goes here)"
SHOWN_CHARS = 600  # the end of the prompt (where the open user header is) is what a reader checks


def render_preview(renderer: PromptRenderer, items: Sequence[DatasetItem],
                   assistant_from: Literal["dataset", "model"]) -> str:
    """The raw prompt of the first item, ending at the open user header (a model-written answer is a placeholder);
    UserError when the template cannot render it, renders no user header to end at, or renders an empty prompt."""
    if not items:
        raise UserError("the dataset has no items to render")
    messages = [{"role": m.role, "content": m.content} for m in items[0].messages]
    if assistant_from == "model":
        while messages and messages[-1]["role"] == "assistant":  # the model answers the last user turn itself
            messages.pop()
        messages.append({"role": "assistant", "content": PLACEHOLDER_ANSWER})
    prompt = renderer.user_turn_prompt(messages)
    if not prompt.strip():
        raise UserError(f"the chat template rendered an empty prompt for item {items[0].id!r}")
    return prompt


def shown(prompt: str) -> str:
    """The prompt's last SHOWN_CHARS characters, with how many came before."""
    if len(prompt) <= SHOWN_CHARS:
        return prompt
    return f"[{len(prompt) - SHOWN_CHARS} characters before]\n{prompt[-SHOWN_CHARS:]}"
