"""userturn client: render prompts ending at an open user header, fan out raw completions, stream JSONL."""

