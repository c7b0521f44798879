"""One judge model behind one OpenAI-compatible endpoint: structured output, fallback, bounded re-asks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, Field

from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.core import defaults
from userturn.core.errors import EndpointError, RequestFailed
from userturn.core.records import JudgeVerdict
from userturn.core.taxonomy import LABELS
from userturn.judges.parse import RAW_CAP, ParseError, capped, message_text, parse_verdict, response_schema
from userturn.judges.prompt import JudgePrompt

SCHEMA_REFUSED_STATUS = frozenset({400, 422, 501})
REASK = ("Your reply could not be used ({error}). Reply with exactly one JSON object of the form "
         '{{"rationale": "<one short sentence>", "label": "<label>"}} where label is one of: {labels}.')


class JudgeConfig(BaseModel):
    """One judge: which model, where, and how to ask it."""

    model: str
    base_url: str
    api_key_env: str = defaults.API_KEY_ENV
    api_key_file: str | None = Field(default=None, description="file holding the key (wins over api_key_env)")
    temperature: float = Field(default=defaults.JUDGE_TEMPERATURE, ge=0)
    max_tokens: int = Field(default=defaults.JUDGE_MAX_TOKENS, ge=defaults.MIN_JUDGE_MAX_TOKENS,
                            description="room for reasoning judges")
    request_timeout: float = Field(default=defaults.REQUEST_TIMEOUT_S, gt=0)
    max_retries: int = Field(default=defaults.MAX_RETRIES, ge=0, description="HTTP retries (429/5xx/timeouts)")
    reasks: int = Field(default=defaults.JUDGE_REASKS, ge=0, description="re-asks after an unparseable reply")
    concurrency: int = Field(default=defaults.JUDGE_CONCURRENCY, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    backoff_initial: float = Field(default=defaults.BACKOFF_INITIAL_S, ge=0)


class LLMJudge:
    """Labels user turns with one model. `use_schema` is learned per endpoint: None until the first answer."""

    def __init__(self, config: JudgeConfig, prompt: JudgePrompt) -> None:
        self.config = config
        self.prompt = prompt
        shared = config.model_dump(include=set(EndpointConfig.model_fields))  # base_url, key, timeouts, retries ...
        self.endpoint = Endpoint(EndpointConfig(**shared))
        self.use_schema: bool | None = None
        self.schema_fallbacks = 0
        self.reasks_made = 0
        self._semaphore = asyncio.Semaphore(config.concurrency)

    @property
    def name(self) -> str:
        return self.config.model

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    async def check(self) -> None:
        """Preflight: the endpoint answers (EndpointError with one line if not) and lists the judge model (UserError
        if it lists others; see client.http.endpoint.Endpoint.check)."""
        await self.endpoint.check(self.config.model)

    def _payload(self, messages: list[dict[str, str]], schema: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            **self.config.extra_body,
        }
        if schema:
            payload["response_format"] = response_schema()
        return payload

    async def _post(self, messages: list[dict[str, str]]) -> tuple[dict[str, Any], int]:
        """POST chat/completions with structured output when the endpoint takes it; fall back once on refusal."""
        attempts = 0
        if self.use_schema is not False:
            try:
                result = await self.endpoint.post_json("chat/completions", self._payload(messages, schema=True))
                self.use_schema = True
                return result.data, result.attempts
            except RequestFailed as exc:
                if exc.status not in SCHEMA_REFUSED_STATUS or self.use_schema:
                    raise
                attempts = exc.attempts
        result = await self.endpoint.post_json("chat/completions", self._payload(messages, schema=False))
        if self.use_schema is None:
            self.use_schema = False  # the schema-less request went through: remember for this endpoint
            self.schema_fallbacks += 1
        return result.data, result.attempts + attempts

    async def judge(self, query: str, response: str, user_turn: str) -> JudgeVerdict:
        """One verdict; HTTP failures and unparseable replies give status "error" (raw kept), never a label.
        Raises EndpointError when the endpoint is unusable (401/403/404, or unreachable after retries)."""
        messages = self.prompt.messages(query, response, user_turn)
        attempts, raw, error, quoted = 0, None, "no reply", 0
        start = time.monotonic()
        async with self._semaphore:
            for turn in range(self.config.reasks + 1):
                try:
                    data, made = await self._post(messages)
                except RequestFailed as exc:
                    attempts += exc.attempts
                    if exc.endpoint_down:  # down, hung, still loading or throttled (client.http.health)
                        raise EndpointError(f"judge {self.name}: {exc.endpoint_down}") from None
                    error = f"request failed: {exc.reason}"
                    break
                attempts += made
                content, finish = message_text(data)
                try:
                    output = parse_verdict(content, user_turn)
                except ParseError as exc:
                    raw = capped(content if content is not None else str(data), RAW_CAP)
                    error = f"unparseable reply: {exc}" + (" (finish_reason length)" if finish == "length" else "")
                    if turn < self.config.reasks:
                        self.reasks_made += 1
                        quoted += exc.quoted
                        messages = [*messages, {"role": "assistant", "content": capped(content or "", RAW_CAP)},
                                    {"role": "user", "content": REASK.format(
                                        error=exc, labels=", ".join(LABELS))}]
                    continue
                return JudgeVerdict(judge=self.name, source="judge", status="ok", label=output.label,
                                    rationale=output.rationale, prompt_sha256=self.prompt.sha256,
                                    attempts=attempts, quote_reasks=quoted,
                                    latency_s=round(time.monotonic() - start, 4))
        return JudgeVerdict(judge=self.name, source="judge", status="error", raw=raw, error=error,
                            prompt_sha256=self.prompt.sha256, attempts=attempts, quote_reasks=quoted,
                            latency_s=round(time.monotonic() - start, 4))

