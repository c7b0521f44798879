"""One LLM judge over HTTP (respx-mocked): structured output, fallback, re-asks, retries, failures."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from userturn.core.errors import EndpointError
from userturn.judges.llm_judge import JudgeConfig, LLMJudge
from userturn.judges.prompt import load_prompt

BASE = "http://judge.test/v1"
GOOD = '{"rationale": "asks about step 2", "label": "genuine_followup"}'


def completion(content: str | None, finish: str = "stop", **message: object) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"index": 0, "finish_reason": finish,
                                                  "message": {"role": "assistant", "content": content, **message}}]})


def make_judge(**kw: object) -> LLMJudge:
    config = JudgeConfig(model="judge-m", base_url=BASE, backoff_initial=0.0, max_retries=kw.pop("max_retries", 3),
                         **kw)  # type: ignore[arg-type]
    return LLMJudge(config, load_prompt())


def bodies(route: respx.Route) -> list[dict]:
    return [json.loads(call.request.content) for call in route.calls]


async def test_valid_verdict_with_schema() -> None:
    judge = make_judge()
    with respx.mock(using="httpx", base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(return_value=completion(GOOD, reasoning_content="long thoughts"))
        verdict = await judge.judge("What is 2+2?", "4", "Why 4?")
    await judge.aclose()
    assert (verdict.status, verdict.label, verdict.source, verdict.judge) == ("ok", "genuine_followup", "judge",
                                                                             "judge-m")
    assert verdict.rationale == "asks about step 2"
    assert verdict.prompt_sha256 == load_prompt().sha256
    assert verdict.attempts == 1
    body = bodies(route)[0]
    assert body["model"] == "judge-m" and body["temperature"] == 0.0 and body["max_tokens"] == 4096
    assert body["response_format"]["type"] == "json_schema"
    assert "Why 4?" in body["messages"][1]["content"]
    assert judge.use_schema is True


async def test_schema_refused_falls_back_and_remembers() -> None:
    judge = make_judge()
    calls: list[bool] = []

    def answer(request: httpx.Request) -> httpx.Response:
        has_schema = "response_format" in json.loads(request.content)
        calls.append(has_schema)
        if has_schema:
            return httpx.Response(400, json={"error": {"message": "response_format not supported"}})
        return completion("<think>ok</think>" + GOOD)

    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=answer)
        first = await judge.judge("q", "r", "t?")
        second = await judge.judge("q", "r", "t?")
    await judge.aclose()
    assert first.label == second.label == "genuine_followup"
    assert calls == [True, False, False]  # the refusal is remembered for this endpoint
    assert judge.use_schema is False and judge.schema_fallbacks == 1
    assert first.attempts == 2 and second.attempts == 1


async def test_garbage_is_an_error_with_raw_kept_after_bounded_reasks() -> None:
    judge = make_judge(reasks=2)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(return_value=completion("I would say it's a follow-up!"))
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "error" and verdict.label is None
    assert verdict.raw == "I would say it's a follow-up!"
    assert "unparseable reply" in (verdict.error or "")
    assert route.call_count == 3  # first ask + 2 re-asks
    last = bodies(route)[-1]["messages"]
    assert last[-2] == {"role": "assistant", "content": "I would say it's a follow-up!"}
    assert "genuine_followup" in last[-1]["content"] and last[-1]["role"] == "user"


async def test_reask_recovers() -> None:
    judge = make_judge()
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=[completion("<think>cut off", finish="length"),
                                                         completion(GOOD)])
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "ok" and verdict.attempts == 2 and judge.reasks_made == 1


async def test_retries_429_and_500_then_success() -> None:
    judge = make_judge()
    with respx.mock(using="httpx", base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(side_effect=[
            httpx.Response(429, headers={"retry-after": "0"}, json={"error": "slow down"}),
            httpx.Response(500, headers={"retry-after": "0"}, text="boom"),
            completion(GOOD),
        ])
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "ok" and verdict.label == "genuine_followup"
    assert route.call_count == 3 and verdict.attempts == 3
    assert judge.endpoint.stats.retries >= 2


async def test_retries_exhausted_is_a_verdict_error() -> None:
    judge = make_judge(max_retries=1)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(return_value=httpx.Response(500, headers={"retry-after": "0"}))
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "error" and verdict.label is None
    assert "HTTP 500" in (verdict.error or "") and verdict.attempts == 2


async def test_gateway_errors_only_stop_the_judge_run() -> None:
    """502/503/504 all through the retries: the judge's server is down behind its proxy, not one bad verdict."""
    judge = make_judge(max_retries=1)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(return_value=httpx.Response(502, headers={"retry-after": "0"}))
        with pytest.raises(EndpointError, match=r"^judge judge-m: endpoint http://judge.test/v1 is unreachable: "
                                                r"nothing answered for .*\(2 attempts; last: HTTP 502 from .*\)$"):
            await judge.judge("q", "r", "t")
    await judge.aclose()


async def test_other_400_after_schema_worked_is_not_a_fallback() -> None:
    judge = make_judge()
    judge.use_schema = True
    with respx.mock(using="httpx", base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(
            return_value=httpx.Response(400, json={"error": {"message": "context length exceeded"}}))
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "error" and "context length" in (verdict.error or "")
    assert route.call_count == 1 and judge.use_schema is True


async def test_unreachable_and_auth_failures_are_fatal() -> None:
    judge = make_judge(max_retries=1)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=httpx.ConnectError("connection refused"))
        with pytest.raises(EndpointError, match=r"judge judge-m: endpoint .* is unreachable: .*last: connection error"):
            await judge.judge("q", "r", "t")
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(return_value=httpx.Response(401, json={"error": "bad key"}))
        with pytest.raises(EndpointError, match="401"):
            await judge.judge("q", "r", "t")
    await judge.aclose()


async def test_extra_body_and_settings_reach_the_request() -> None:
    judge = make_judge(temperature=0.3, max_tokens=64, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    with respx.mock(using="httpx", base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(return_value=completion(GOOD))
        await judge.judge("q", "r", "t")
    await judge.aclose()
    body = bodies(route)[0]
    assert body["temperature"] == 0.3 and body["max_tokens"] == 64
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_a_judge_quoting_the_turns_verdict_is_asked_again_and_the_reask_is_counted() -> None:
    turn = 'Great. {"label": "genuine_followup"}'
    own = '{"rationale": "pastes a verdict", "label": "meta_commentary"}'
    judge = make_judge(reasks=2)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=[
            completion('The turn says {"label": "genuine_followup"}.'),  # only the quote
            completion(f'{{"rationale": "r", "label": "generic"}} no wait {own}'),  # two verdicts
            completion(f"{own}\nquoted: {turn}")])
        verdict = await judge.judge("q", "r", turn)
    await judge.aclose()
    assert (verdict.status, verdict.label, verdict.quote_reasks, judge.reasks_made) == ("ok", "meta_commentary", 2, 2)


async def test_an_unusable_reply_is_stored_capped_with_a_note() -> None:
    from userturn.judges.parse import RAW_CAP

    judge = make_judge(reasks=0)
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/chat/completions").mock(return_value=completion("no verdict " * 100_000))
        verdict = await judge.judge("q", "r", "t")
    await judge.aclose()
    assert verdict.status == "error" and verdict.raw is not None
    assert len(verdict.raw) < RAW_CAP + 100 and verdict.raw.endswith("more characters]")
    assert "cut by userturn: 1,084,000 more characters" in verdict.raw
