"""The judge panel: rule pre-labels, majority over several judges, resume/force semantics, CLI flags."""

from __future__ import annotations

import argparse
import asyncio
import json
import re

import httpx
import pytest
import respx

from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.core.errors import UserError
from userturn.core.records import JudgeVerdict, Message, ProbeRecord
from userturn.judges import panel as judge_panel
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, JudgingFacts, PanelConfig, panel_id
from userturn.judges.prompt import load_prompt

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
    sha = load_prompt().sha256
    done = JudgeVerdict(judge="judge-a", status="ok", label="generic", prompt_sha256=sha)
    failed = JudgeVerdict(judge="judge-b", status="error", error="boom", prompt_sha256=sha)
    other = JudgeVerdict(judge="old-judge", status="ok", label="empty", prompt_sha256=sha)
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

        # A verdict given under another prompt is not this panel's: judge-a is asked again.
        stale = make_record(judges=[done.model_copy(update={"prompt_sha256": "0" * 64})])
        fresh = make_panel(URL_A)
        out = await fresh.judge(stale)
        assert route_a.call_count == 2 and out.label == "genuine_followup" and out.judge_panel == fresh.id
        await fresh.aclose()


async def test_generation_errors_pass_through() -> None:
    panel = make_panel(URL_A)
    record = make_record(None, status="error")
    out = await panel.judge(record)
    await panel.aclose()
    assert out is record and out.label is None and out.judge_status is None and panel.is_done(out)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_judge_arguments(parser)
    return parser.parse_args(list(argv))


def panel_from_args(args: argparse.Namespace) -> JudgePanel | None:
    config = panel_config(args)
    return None if config is None else judge_panel.make_panel(config)


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
])
def test_panel_from_args_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        panel_from_args(parse(*argv))


@pytest.mark.parametrize(("argv", "message"), [
    (["--judge-max-tokens", "5"], "argument --judge-max-tokens: must be at least 16 .*got 5"),
    (["--judge-max-tokens", "0"], "argument --judge-max-tokens: must be at least 16"),
    (["--judge-max-tokens", "many"], "argument --judge-max-tokens: expected an integer, got 'many'"),
    (["--judge-max-retries", "-1"], "argument --judge-max-retries: must be 0 or more, got -1"),
    (["--judge-reasks", "-2"], "argument --judge-reasks: must be 0 or more"),
    (["--judge-concurrency", "0"], "argument --judge-concurrency: must be at least 1"),
    (["--judge-temperature", "-0.5"], "argument --judge-temperature: must be 0 or more"),
    (["--judge-temperature", "nan"], "argument --judge-temperature: must be a finite number"),
    (["--judge-timeout", "0"], "argument --judge-timeout: must be positive"),
    (["--judge-extra-body", "{nope"], "argument --judge-extra-body: not valid JSON"),
    (["--judge-extra-body", "[1]"], "argument --judge-extra-body: must be a JSON object, got list"),
])
def test_judge_flags_are_checked_not_clamped(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) \
        -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--judge-model", "a", "--judge-base-url", URL_A, *argv)
    assert exc.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_judge_flags_are_honoured() -> None:
    panel = panel_from_args(parse("--judge-model", "a", "--judge-base-url", URL_A, "--judge-max-tokens", "16",
                                  "--judge-max-retries", "0", "--judge-reasks", "0", "--judge-temperature", "0.3"))
    assert panel is not None
    [j] = panel.config.judges
    assert (j.max_tokens, j.max_retries, j.reasks, j.temperature) == (16, 0, 0, 0.3)


def facts(label: str | None = "generic", source: str | None = "judge", panel: str | None = None,
          verdicts: tuple = (), status: str = "ok") -> JudgingFacts:
    return JudgingFacts(status, label, source, panel, verdicts)


def test_panel_identity_is_its_judges_in_order_and_its_prompt() -> None:
    sha = load_prompt().sha256
    ab, ba = make_panel(URL_A, URL_B), make_panel(URL_B, URL_A)
    v1 = JudgePanel(PanelConfig(judges=ab.config.judges, prompt_path="judge_v1"))
    assert len({ab.id, ba.id, v1.id, make_panel(URL_A).id}) == 4
    assert ab.id == make_panel(URL_A, URL_B, judge_all=True).id == panel_id(["judge-a", "judge-b"], sha)
    a = make_panel(URL_A)
    ok_a = (("judge-a", "judge", "ok", sha),)
    assert a.assess(facts(panel=a.id, verdicts=ok_a)) == "done"
    assert a.assess(facts(panel=ab.id, verdicts=ok_a)) == "foreign"  # labelled by a's verdict and b's vote
    assert a.assess(facts(panel=None, verdicts=ok_a)) == "done"  # written before panel ids: same judge and prompt
    assert a.assess(facts(panel=None, verdicts=(("judge-a", "judge", "ok", "0" * 64),))) == "foreign"
    assert a.assess(facts(panel=None, verdicts=(("judge-z", "judge", "ok", sha),))) == "foreign"
    assert a.assess(facts(label=None, source=None, panel=ab.id)) == "todo"  # no label: nothing to mix
    assert a.assess(facts(label="empty", source="rule", panel=ab.id)) == "done"  # rules are no panel's
    assert make_panel(URL_A, judge_all=True).assess(facts(label="empty", source="rule")) == "todo"
    # A rule hit the judges labelled under --judge-all goes back to the rule without it (and stays with it).
    judged_rule_hit = facts(panel=a.id, verdicts=(("rule:empty", "rule", "ok", None), *ok_a))
    assert a.assess(judged_rule_hit) == "todo"
    assert make_panel(URL_A, judge_all=True).assess(judged_rule_hit) == "done"
    assert a.assess(facts(label=None, source=None, status="error")) == "no_generation"
    assert make_panel(URL_A, rejudge=True).assess(facts(panel=ab.id, verdicts=ok_a)) == "todo"
    for panel in (ab, ba, v1, a):
        asyncio.run(panel.aclose())
