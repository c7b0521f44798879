"""The judge panel: rule pre-labels, majority over several judges, resume/force semantics, CLI flags."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest
import respx
from userturn.client.errors import UserError
from userturn.client.records import JudgeVerdict, Message, ProbeRecord
from userturn.judges.arguments import add_judge_arguments
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, PanelConfig, panel_from_args

URL_A, URL_B, URL_C = "http://a.test/v1", "http://b.test/v1", "http://c.test/v1"


def answer(label: str) -> httpx.Response:
    content = json.dumps({"rationale": f"it is {label}", "label": label})
    return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": content},
                                                  "finish_reason": "stop"}]})


def make_panel(*urls: str, **kw: object) -> JudgePanel:
    judges = [JudgeConfig(model=f"judge-{u[7]}", base_url=u, max_retries=0, reasks=0) for u in urls]
    return JudgePanel(PanelConfig(judges=judges, **kw))  # type: ignore[arg-type]


def make_record(turn: str | None = "Why divide by 2?", status: str = "ok", **kw: object) -> ProbeRecord:
    return ProbeRecord(key="m|d|1|raw|none|t=0|s=0", model="m", dataset="d", item_id="1", temperature=0.0, sample=0,
                       seed=0, status=status, user_turn=turn,
                       messages=[Message(role="user", content="What is 48 / 2 + 48?"),
                                 Message(role="assistant", content="48 / 2 = 24, plus 48 is 72.")], **kw)


async def test_single_judge_verdict() -> None:
    panel = make_panel(URL_A)
    with respx.mock(using="httpx") as mock:
        mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("genuine_followup"))
        out = await panel.judge(make_record())
    await panel.aclose()
    assert (out.label, out.label_source, out.judge_status) == ("genuine_followup", "judge", "ok")
    assert [v.judge for v in out.judges] == ["judge-a"]
    assert panel.counters.judged == 1 and panel.counters.labels == {"genuine_followup": 1}


async def test_rule_prelabel_skips_the_judge_unless_judge_all() -> None:
    leak = make_record("<|im_start|>assistant\n72")
    with respx.mock(using="httpx", assert_all_called=False) as mock:
        route = mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("generic"))
        panel = make_panel(URL_A)
        out = await panel.judge(leak)
        assert route.call_count == 0
        assert (out.label, out.label_source, out.judge_status) == ("assistant_continuation", "rule", "ok")
        assert [(v.judge, v.source) for v in out.judges] == [("rule:role_leak", "rule")]
        assert panel.counters.rule_labels == 1 and panel.counters.judged == 0
        assert panel.is_done(out)
        await panel.aclose()

        forced = make_panel(URL_A, judge_all=True)
        out = await forced.judge(leak)
        assert route.call_count == 1
        assert (out.label, out.label_source) == ("generic", "judge")
        assert [v.judge for v in out.judges] == ["rule:role_leak", "judge-a"]  # the rule's verdict stays visible
        await forced.aclose()


async def test_two_judges_tie_goes_to_first_listed() -> None:
    panel = make_panel(URL_A, URL_B)
    with respx.mock(using="httpx") as mock:
        mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("generic"))
        mock.post(f"{URL_B}/chat/completions").mock(return_value=answer("genuine_followup"))
        out = await panel.judge(make_record())
    await panel.aclose()
    assert (out.label, out.label_source) == ("generic", "majority")
    assert [(v.judge, v.label) for v in out.judges] == [("judge-a", "generic"), ("judge-b", "genuine_followup")]


async def test_three_judges_majority_and_partial_failure() -> None:
    panel = make_panel(URL_A, URL_B, URL_C)
    with respx.mock(using="httpx") as mock:
        mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("generic"))
        mock.post(f"{URL_B}/chat/completions").mock(return_value=answer("genuine_followup"))
        mock.post(f"{URL_C}/chat/completions").mock(return_value=answer("genuine_followup"))
        out = await panel.judge(make_record())
        assert (out.label, out.label_source) == ("genuine_followup", "majority")
        mock.post(f"{URL_B}/chat/completions").mock(return_value=httpx.Response(422, json={"error": "bad"}))
        mock.post(f"{URL_C}/chat/completions").mock(return_value=httpx.Response(200, json={"choices": []}))
        partial = await panel.judge(make_record())
    await panel.aclose()
    assert (partial.label, partial.judge_status) == ("generic", "ok")
    assert [v.status for v in partial.judges] == ["ok", "error", "error"]
    assert panel.counters.verdict_errors == 2 and panel.counters.judged == 2


async def test_all_judges_fail_gives_judge_error_not_a_label() -> None:
    panel = make_panel(URL_A)
    with respx.mock(using="httpx") as mock:
        mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("not-a-label"))
        out = await panel.judge(make_record())
    await panel.aclose()
    assert (out.label, out.label_source, out.judge_status) == (None, None, "error")
    assert out.judges[0].raw and "not-a-label" in out.judges[0].raw
    assert panel.counters.judge_failures == 1 and not panel.is_done(out)


async def test_existing_verdicts_resume_force_and_other_judges() -> None:
    done = JudgeVerdict(judge="judge-a", status="ok", label="generic")
    failed = JudgeVerdict(judge="judge-b", status="error", error="boom")
    other = JudgeVerdict(judge="old-judge", status="ok", label="empty")
    record = make_record(judges=[other, done, failed])
    with respx.mock(using="httpx", assert_all_called=False) as mock:
        route_a = mock.post(f"{URL_A}/chat/completions").mock(return_value=answer("genuine_followup"))
        route_b = mock.post(f"{URL_B}/chat/completions").mock(return_value=answer("genuine_followup"))
        panel = make_panel(URL_A, URL_B)
        out = await panel.judge(record)
        assert (route_a.call_count, route_b.call_count) == (0, 1)  # only the failed judge is asked again
        assert [(v.judge, v.label) for v in out.judges] == [("judge-a", "generic"), ("judge-b", "genuine_followup")]
        assert out.label == "generic" and panel.is_done(out)
        await panel.aclose()

        keeping = make_panel(URL_A, URL_B, keep_other_verdicts=True)
        out = await keeping.judge(record)
        assert [v.judge for v in out.judges] == ["old-judge", "judge-a", "judge-b"]
        assert out.label == "generic"  # old-judge's "empty" does not vote
        await keeping.aclose()

        forced = make_panel(URL_A, URL_B, force=True)
        out = await forced.judge(record)
        assert route_a.call_count == 1
        assert out.label == "genuine_followup"
        await forced.aclose()


async def test_generation_errors_pass_through() -> None:
    panel = make_panel(URL_A)
    record = make_record(None, status="error")
    out = await panel.judge(record)
    await panel.aclose()
    assert out is record and out.label is None and out.judge_status is None and panel.is_done(out)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_judge_arguments(parser)
    return parser.parse_args(list(argv))


def test_panel_from_args() -> None:
    assert panel_from_args(parse()) is None
    panel = panel_from_args(parse("--judge-model", "a", "--judge-model", "b", "--judge-base-url", URL_A,
                                  "--judge-api-key-env", "KEY_A", "--judge-api-key-env", "KEY_B",
                                  "--judge-extra-body", '{"top_k": 1}', "--judge-all", "--judge-concurrency", "3"))
    assert panel is not None
    assert [(j.model, j.base_url, j.api_key_env) for j in panel.config.judges] == [("a", URL_A, "KEY_A"),
                                                                                  ("b", URL_A, "KEY_B")]
    assert panel.config.judge_all and panel.config.judges[0].extra_body == {"top_k": 1}
    assert panel.config.judges[1].concurrency == 3 and panel.config.judges[0].temperature == 0.0


@pytest.mark.parametrize(("argv", "message"), [
    (["--judge-model", "a"], "--judge-base-url is required"),
    (["--judge-base-url", URL_A], "without --judge-model"),
    (["--judge-model", "a", "--judge-model", "b", "--judge-model", "c", "--judge-base-url", URL_A,
      "--judge-base-url", URL_B], "once per --judge-model"),
    (["--judge-model", "a", "--judge-model", "a", "--judge-base-url", URL_A], "given twice"),
    (["--judge-model", "a", "--judge-base-url", URL_A, "--judge-extra-body", "{nope"], "not valid JSON"),
    (["--judge-model", "a", "--judge-base-url", URL_A, "--judge-extra-body", "[1]"], "JSON object"),
    (["--judge-model", "a", "--judge-base-url", URL_A, "--judge-max-tokens", "0"], ">= 1"),
])
def test_panel_from_args_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        panel_from_args(parse(*argv))
