"""Chat mode: elicit the next user turn from a chat-only endpoint by replaying the conversation with roles
swapped, so the model's own reply is the next user message. Bump `CHAT_MODE_PROMPT_VERSION` when the text changes.
"""

from __future__ import annotations

from userturn.core.records import Message, sha256_text

CHAT_MODE_PROMPT_VERSION = "v1"
CHAT_MODE_PROMPT = (
    "You are playing the human user in a conversation with an AI assistant. In the messages below, your "
    "earlier messages are the user's turns and the other side's messages are the assistant's replies. "
    "Write the user's next message in the conversation, exactly as the user would send it. Output only that "
    "message: no preamble, no quotation marks, no explanation, no role label."
)
CHAT_MODE_PROMPT_SHA256 = sha256_text(CHAT_MODE_PROMPT)
ASSISTANT_SETUP_HEADER = "For context, the assistant was given these instructions:"
NO_REPLY = "(The assistant has not replied.)"
FLIP = {"user": "assistant", "assistant": "user", "tool": "user"}


def role_flip_messages(messages: list[Message]) -> list[Message]:
    """[system instruction] + the conversation with user/assistant swapped, ending on a 'user' message.

    System/developer messages are quoted in the instruction; tool results become 'user' messages; a conversation
    ending with the user (the `remove` perturbation) gets the assistant's `NO_REPLY`.
    """
    setup = [m.content for m in messages if m.role in ("system", "developer") and m.content.strip()]
    instruction = CHAT_MODE_PROMPT
    if setup:
        instruction += "\n\n" + ASSISTANT_SETUP_HEADER + "\n" + "\n\n".join(setup)
    flipped = [Message(role="system", content=instruction)]
    for message in messages:
        if message.role in FLIP:
            flipped.append(Message(role=FLIP[message.role], content=message.content))
    if flipped[-1].role != "user":
        flipped.append(Message(role="user", content=NO_REPLY))
    return flipped
