"""A tokenizer-free ChatML renderer for pipeline tests: the prompt ends at an open user header, stop `<|im_end|>`."""

from __future__ import annotations

from userturn.core.records import Message


class Renderer:
    template_sha256 = "t" * 64
    engine = "jinja"
    name = "chatml"
    info = None  # not replayable
    special_tokens = None  # none checked

    def __init__(self) -> None:
        self.stop = ["<|im_end|>"]
        self.stop_token_ids: list[int] = []
        self.token_ids: dict[str, int] = {}

    def user_turn_prompt(self, messages: list[Message], *, cache: bool = True) -> str:
        return "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages) + "<|im_start|>user\n"

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None:
        return None
