"""The probe pipeline through the production aiohttp backend (tests/support/mock_http.py: httpx-style handlers on a
loopback socket): records, seeds, resume, errors, judging hooks."""

from __future__ import annotations

import json

import httpx
import pytest
from chatml_renderer import Renderer
from mock_http import MockServer
from results_lines import config_lines, record_lines

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.probe.perturb import perturb
from userturn.client.probe.pipeline import ProbeRun
from userturn.client.probe.settings import ProbeSettings, clean_user_turn
from userturn.core.errors import EndpointError, UserError
from userturn.core.jsonl import read_records
from userturn.core.records import Message, ProbeRecord
from userturn.core.resume_index import scan_results
from userturn.core.text import strip_reasoning
from userturn.judges.panel import JudgeCounters


class ChatMLRenderer(Renderer):
    """The support renderer with a stop token id and word counts (the real one is
    client.render.templates.PromptRenderer)."""

    def __init__(self) -> None:
        super().__init__()
        self.stop_token_ids = [7]

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None:
        return len(text.split())


def items(n: int = 3, with_assistant: bool = True) -> list[DatasetItem]:
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"What is {i}+{i}?"}]
        if with_assistant:
            msgs.append({"role": "assistant", "content": f"It is {2 * i}."})
        out.append(DatasetItem.model_validate({"id": f"q{i}", "messages": msgs, "answer": str(2 * i)}))
    return out


def endpoint(server: MockServer, **kw) -> Endpoint:
    cfg = dict(base_url=server.base_url, max_retries=2, backoff_initial=0.0, backoff_max=0.0, request_timeout=5)
    cfg.update(kw)
    return Endpoint(EndpointConfig(**cfg))


def completion(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    text = f"Why is it {body['prompt'].count('im_start')}? seed={body['seed']}<|im_end|>"
    return httpx.Response(200, json={
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "matched_stop": "<|im_end|>"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


async def run(server: MockServer, tmp_path, settings: ProbeSettings, its=None, **kw):
    ep = endpoint(server)
    try:
        probe = ProbeRun(its or items(), settings, endpoints=[ep], renderer=ChatMLRenderer(),
                         out_path=str(tmp_path / "out.jsonl"), progress=False, **kw)
        summary = await probe.run()
    finally:
        await ep.aclose()
    return summary


def settings(**kw) -> ProbeSettings:
    base = dict(model="m", dataset="d", temperatures=[0.0, 1.0], samples=2, concurrency=4)
    base.update(kw)
    return ProbeSettings(**base)


async def test_one_record_per_sample_with_distinct_seeds(tmp_path):
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings())
    assert route.call_count == 12 and summary.ok == 12 and summary.errors == 0
    records, report = read_records(tmp_path / "out.jsonl")
    assert len(records) == 12 and report.lines == 12
    rec = records["m|d|q1|raw|none|t=1.0|s=1"]
    assert rec.status == "ok" and rec.finish_reason == "stop" and rec.matched_stop == "<|im_end|>"
    assert rec.user_turn == f"Why is it 3? seed={rec.seed}"  # trailing stop echoed by the server is removed
    assert rec.usage.total_tokens == 15 and rec.attempts == 1 and rec.template_sha256 == "t" * 64
    assert rec.messages[-1].content == "It is 2." and rec.reference_answer == "2"
    seeds = {(r.item_id, r.temperature, r.sample): r.seed for r in records.values()}
    assert len(set(seeds.values())) == 12
    sent = [json.loads(c.request.content) for c in route.calls]
    assert all(p["prompt"].endswith("<|im_start|>user\n") and p["stop"] == ["<|im_end|>"] for p in sent)
    assert all("stop_token_ids" not in p for p in sent)


@pytest.mark.parametrize(("extra_body", "plan"), [
    ({"chat_template_kwargs": {"enable_thinking": False}}, {}),
    ({"temperature": 0.3, "seed": 11}, {"temperatures": [0.3], "samples": 1}),
])
async def test_request_bodies_carry_sample_fields_top_p_and_extra_body(tmp_path, extra_body, plan):
    """Bodies are serialised once per item and completed per sample; --extra-body keys still win."""
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        await run(mock, tmp_path, settings(top_p=0.9, extra_body=extra_body, **plan))
    records = read_records(tmp_path / "out.jsonl")[0]
    sent = [json.loads(c.request.content) for c in route.calls]
    n = 12 if not plan else 3
    assert len(sent) == n and all(p["top_p"] == 0.9 and p["max_tokens"] == 256 for p in sent)
    assert all(p[k] == v for p in sent for k, v in extra_body.items())
    if "seed" not in extra_body:
        assert sorted(p["seed"] for p in sent) == sorted(r.seed for r in records.values())
        assert sorted(p["temperature"] for p in sent) == [0.0] * 6 + [1.0] * 6
    else:  # the records say what was sent
        assert {r.seed for r in records.values()} == {11} and {r.temperature for r in records.values()} == {0.3}


async def test_rerun_resumes_without_requests_and_retries_errors(tmp_path):
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if json.loads(request.content)["prompt"].count("What is 2+2") and calls["n"] < 100:
            return httpx.Response(400, json={"error": {"message": "prompt too long"}})
        return completion(request)

    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=flaky)
        first = await run(mock, tmp_path, settings())
    assert first.ok == 8 and first.errors == 4
    records, _ = read_records(tmp_path / "out.jsonl")
    bad = records["m|d|q2|raw|none|t=0.0|s=0"]
    assert bad.status == "error" and "HTTP 400" in bad.error and "prompt too long" in bad.error
    assert bad.user_turn is None and bad.attempts == 1

    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        second = await run(mock, tmp_path, settings())
    assert route.call_count == 4 and second.skipped == 8 and second.ok == 4
    records, _ = read_records(tmp_path / "out.jsonl")
    assert all(r.status == "ok" for r in records.values()) and len(records) == 12
    lines = record_lines(tmp_path / "out.jsonl")
    ok_keys = [x["key"] for x in lines if x["status"] == "ok"]
    assert len(ok_keys) == len(set(ok_keys)) == 12  # never a duplicate ok key
    configs = config_lines(tmp_path / "out.jsonl")  # one per run that wrote records, before its first record
    assert len(configs) == 2 and {c["fingerprint"] for c in configs} == {x["config_fingerprint"] for x in lines}
    assert all("config" not in x for x in lines)

    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        third = await run(mock, tmp_path, settings())
    assert route.call_count == 0 and third.skipped == 12


async def test_a_resume_reads_only_the_unfinished_items_of_a_dataset_on_disk(tmp_path, monkeypatch):
    from userturn.client.data.lazy_dataset import JsonlItems, load_jsonl_lazy

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(i.model_dump(exclude_none=True)) + "\n" for i in items(5)))
    plan = settings(perturbations=["none", "generic"])

    def same(name, messages, seed, pool, **_):
        return messages
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        await run(mock, tmp_path, plan, its=load_jsonl_lazy(data)[:3], perturb=same)
    lines = (tmp_path / "out.jsonl").read_text().splitlines()  # q0-q2 done; drop one sample of q1 / generic
    (tmp_path / "out.jsonl").write_text("".join(x + "\n" for x in lines if '"m|d|q1|raw|generic|t=1.0|s=0"' not in x))
    read: list[int] = []
    original = JsonlItems._parse
    def counted(self, index, raw):
        read.append(index)
        return original(self, index, raw)
    monkeypatch.setattr(JsonlItems, "_parse", counted)
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, plan, its=load_jsonl_lazy(data), perturb=same)
    assert read == [1, 3, 4]  # q0 and q2 are finished: never parsed
    assert route.call_count == 1 + 2 * 8 and summary.ok == 17 and summary.skipped == 23 and summary.total == 40
    records, _ = read_records(tmp_path / "out.jsonl")
    assert len(records) == 40 and all(r.status == "ok" for r in records.values())


async def test_retries_exhausted_make_error_records_not_empty_turns(tmp_path):
    with MockServer() as mock:
        mock.post("/completions").mock(return_value=httpx.Response(500, text="overloaded"))
        summary = await run(mock, tmp_path, settings(temperatures=[0.0], samples=1))
    assert summary.errors == 3
    for rec in read_records(tmp_path / "out.jsonl")[0].values():
        assert rec.status == "error" and rec.user_turn is None and rec.attempts == 3
        assert "HTTP 500" in rec.error and "gave up after 3 attempts" in rec.error


async def test_off_schema_completion_values_are_validated_not_fatal(tmp_path):
    """Values the fast ok-line path does not take go through ProbeRecord: coerced where the schema allows,
    an error record naming the field where it does not; the run goes on either way."""

    def odd(request: httpx.Request) -> httpx.Response:
        item = json.loads(request.content)["prompt"].count("What is 1")
        choice = {"index": 0, "text": "Really?", "finish_reason": 5 if item else "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": "10", "total_tokens": 12}})

    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=odd)
        summary = await run(mock, tmp_path, settings(temperatures=[0.0], samples=1))
    assert summary.ok == 2 and summary.errors == 1
    records = read_records(tmp_path / "out.jsonl")[0]
    bad = records["m|d|q1|raw|none|t=0.0|s=0"]
    assert bad.status == "error" and bad.user_turn is None and "finish_reason" in bad.error
    good = records["m|d|q0|raw|none|t=0.0|s=0"]
    assert good.usage.prompt_tokens == 10 and good.user_turn == "Really?"


async def test_fatal_401_stops_the_run_and_keeps_written_records(tmp_path):
    seen = {"n": 0}

    def auth_expires(request: httpx.Request) -> httpx.Response:
        seen["n"] += 1
        return completion(request) if seen["n"] <= 2 else httpx.Response(401, json={"error": "bad key"})

    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=auth_expires)
        with pytest.raises(EndpointError, match="HTTP 401"):
            await run(mock, tmp_path, settings(concurrency=1))
    records, report = read_records(tmp_path / "out.jsonl")
    assert len(records) == 2 and all(r.status == "ok" for r in records.values()) and not report.torn_tail


async def test_assistant_turn_from_model_is_generated_once_and_reused(tmp_path):
    def chat(request: httpx.Request) -> httpx.Response:
        msgs = json.loads(request.content)["messages"]
        return httpx.Response(200, json={"choices": [{"message": {
            "content": f"<think>hmm</think>The answer is {msgs[-1]['content'][8]}."}, "finish_reason": "stop"}]})

    def scorer(dataset, item, response):
        return response.endswith(f"{item.answer}."), {"exact": 1.0}

    with MockServer() as mock:
        chat_route = mock.post("/chat/completions").mock(side_effect=chat)
        mock.post("/completions").mock(side_effect=completion)
        await run(mock, tmp_path, settings(assistant_from="model"), its=items(with_assistant=False), scorer=scorer)
    assert chat_route.call_count == 3
    records, _ = read_records(tmp_path / "out.jsonl")
    rec = records["m|d|q1|raw|none|t=0.0|s=0"]
    assert rec.assistant_source == "model" and rec.messages[-1].content == "The answer is 1."
    assert rec.messages[-1].model_extra.get("reasoning_content") == "hmm"
    assert rec.meta["assistant_turn"] == "The answer is 1."
    assert records["m|d|q0|raw|none|t=0.0|s=0"].correct is True and rec.correct is False

    # Resume with more samples: the assistant turns are reused from the records, not regenerated.
    with MockServer() as mock:
        chat_route = mock.post("/chat/completions").mock(side_effect=chat)
        mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(assistant_from="model", samples=3),
                            its=items(with_assistant=False), scorer=scorer)
    assert chat_route.call_count == 0 and summary.ok == 6


async def test_dataset_without_assistant_turn_gives_clear_errors(tmp_path):
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(samples=1, temperatures=[0.0]), its=items(with_assistant=False))
    assert route.call_count == 0 and summary.errors == 3
    rec = next(iter(read_records(tmp_path / "out.jsonl")[0].values()))
    assert "--assistant-from model" in rec.error


class CountingJudge:
    """A judge hook that labels every other record and counts what it did, as a judge panel does (the run reports
    the hook's counts)."""

    def __init__(self):
        self.n = 0
        self.counters = JudgeCounters()

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        self.n += 1
        label = "genuine_followup" if self.n % 2 else None
        if label:
            self.counters.judged += 1
        else:
            self.counters.judge_failures += 1
        return record.model_copy(update={"label": label, "label_source": "judge",
                                         "judge_status": "ok" if label else "error"})

    def pending_judgements(self, path, keys):
        return None


async def test_inline_judge_hook_and_perturbations_in_keys(tmp_path):
    def perturb(name, messages, *, seed, pool, **_):
        if name == "generic":
            return [*messages[:-1], Message(role="assistant", content="I can't help.")]
        return messages

    judge = CountingJudge()
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(perturbations=["none", "generic"], temperatures=[0.5], samples=1,
                                               send_stop_token_ids=True), judge=judge, perturb=perturb)
    assert summary.ok == 6 and judge.n == 6 and summary.judged == 3 and summary.judge_failures == 3
    records, _ = read_records(tmp_path / "out.jsonl")
    assert records["m|d|q0|raw|generic|t=0.5|s=0"].messages[-1].content == "I can't help."
    prompts = {json.loads(c.request.content)["prompt"] for c in route.calls}
    assert len(prompts) == 6 and all(json.loads(c.request.content)["stop_token_ids"] == [7] for c in route.calls)


async def test_each_run_reports_its_own_part_of_a_shared_judge_hooks_counts(tmp_path):
    """A grid shares one judge panel between its runs: each run reports what the hook counted during that run."""
    judge = CountingJudge()
    judge.counters.judged, judge.counters.rule_labels = 5, 2  # counted by earlier runs
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(temperatures=[0.5], samples=1), judge=judge)
    assert (summary.judged, summary.judge_failures) == (2, 1) and judge.counters.judged == 7
    assert judge.counters.rule_labels == 2


async def test_chat_mode_uses_role_flip_and_chat_endpoint(tmp_path):
    def flip(messages):
        swapped = {"user": "assistant", "assistant": "user"}
        return [Message(role="system", content="Write the user's next message."),
                *(Message(role=swapped.get(m.role, m.role), content=m.content) for m in messages)]

    def chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "But why 4?"}, "finish_reason": "stop"}]})

    with MockServer() as mock:
        ep = endpoint(mock)
        route = mock.post("/chat/completions").mock(side_effect=chat)
        probe = ProbeRun(items(1), settings(mode="chat", temperatures=[1.0], samples=1), endpoints=[ep],
                         renderer=None, role_flip=flip, out_path=str(tmp_path / "o.jsonl"), progress=False)
        await probe.run()
        await ep.aclose()
    sent = json.loads(route.calls[0].request.content)
    assert sent["messages"][0]["role"] == "system" and sent["messages"][-1] == {"role": "user", "content": "It is 0."}
    rec = next(iter(read_records(tmp_path / "o.jsonl")[0].values()))
    assert rec.mode == "chat" and rec.key == "m|d|q0|chat|none|t=1.0|s=0" and rec.user_turn == "But why 4?"
    assert rec.template_sha256 is None and rec.prompt_sha256


@pytest.mark.parametrize(("content", "status", "user_turn"), [
    ([{"type": "text", "text": "But "}, {"type": "text", "text": "why 4?"}], "ok", "But why 4?"),
    (["But why ", "4?"], "ok", "But why 4?"),
    ([{"type": "image_url", "image_url": {"url": "x"}}], "ok", ""),  # no text part: an empty turn, as the API says
    ([7], "error", None),
])
async def test_chat_mode_joins_content_parts(tmp_path, content, status, user_turn):
    """A chat reply whose content is a list of parts (OpenAI's format) is recorded as their text joined."""
    def chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": content}, "finish_reason": "stop"}]})

    with MockServer() as mock:
        ep = endpoint(mock)
        mock.post("/chat/completions").mock(side_effect=chat)
        probe = ProbeRun(items(1), settings(mode="chat", temperatures=[1.0], samples=1), endpoints=[ep],
                         renderer=None, role_flip=lambda messages: messages, out_path=str(tmp_path / "o.jsonl"),
                         progress=False)
        await probe.run()
        await ep.aclose()
    rec = next(iter(read_records(tmp_path / "o.jsonl")[0].values()))
    assert (rec.status, rec.user_turn) == (status, user_turn)
    if status == "error":
        assert "malformed completion body" in rec.error


async def test_assistant_turn_from_model_joins_content_parts(tmp_path):
    def chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": [
            {"type": "text", "text": "The answer "}, {"type": "text", "text": "is 4."}]}, "finish_reason": "stop"}]})

    with MockServer() as mock:
        mock.post("/chat/completions").mock(side_effect=chat)
        mock.post("/completions").mock(side_effect=completion)
        await run(mock, tmp_path, settings(assistant_from="model"), its=items(1, with_assistant=False))
    rec = next(iter(read_records(tmp_path / "out.jsonl")[0].values()))
    assert rec.status == "ok" and rec.messages[-1].content == "The answer is 4."


def test_text_helpers():
    assert strip_reasoning("<think>a\nb</think>\n\nHello") == "Hello"
    assert strip_reasoning("partial</think> Hi") == "Hi"
    assert clean_user_turn("Why?<|im_end|>", ["<|im_end|>"]) == "Why?"
    assert clean_user_turn("Why?", ["<|im_end|>"]) == "Why?"


async def test_manifest_stops_are_added_to_the_template_ones(tmp_path):
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        await run(mock, tmp_path, settings(temperatures=[0.0], samples=1, send_stop_token_ids=True,
                                     extra_stop=["###", "<|im_end|>"], extra_stop_token_ids=[9]), its=items(1))
    sent = json.loads(route.calls[0].request.content)
    assert sent["stop"] == ["<|im_end|>", "###"] and sent["stop_token_ids"] == [7, 9]


class UnreachableJudge:
    counters = JudgeCounters()

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        raise EndpointError("cannot reach http://judge.test/v1")

    def pending_judgements(self, path, keys):
        return None


async def test_unreachable_judge_keeps_the_generation_and_stops(tmp_path):
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        with pytest.raises(EndpointError, match=r"judge\.test"):
            await run(mock, tmp_path, settings(temperatures=[0.0], samples=1, concurrency=1), its=items(2),
                      judge=UnreachableJudge())
    records, _ = read_records(tmp_path / "out.jsonl")
    assert len(records) == 1
    rec = next(iter(records.values()))
    assert rec.status == "ok" and rec.user_turn and rec.label is None and rec.judges == []


class FailingRenderer(ChatMLRenderer):
    """Fails on the conversation that contains `fail_on` (a template error, as the real renderer raises)."""

    def __init__(self, fail_on: str | None) -> None:
        super().__init__()
        self.fail_on = fail_on

    def user_turn_prompt(self, messages: list[Message], *, cache: bool = True) -> str:
        if self.fail_on is not None and any(self.fail_on in m.content for m in messages):
            raise UserError(f"cannot render {self.fail_on}")
        return super().user_turn_prompt(messages, cache=cache)


def mixed_items() -> list[DatasetItem]:
    """Items that give jobs, error records (no assistant turn) and no samples at all (wrong_answer without a
    number to change), interleaved."""
    out = []
    for i in range(13):
        msgs = [{"role": "user", "content": f"Question {i}?"}]
        if i % 4 != 3:
            msgs.append({"role": "assistant", "content": "No idea." if i % 5 == 2 else f"It is {i}."})
        out.append(DatasetItem.model_validate({"id": f"q{i}", "answer": "100", "messages": msgs}))  # numeric gold
    return out


@pytest.mark.parametrize("fail_on", [None, "Question 0?", "Question 6?", "Question 12?"])
def test_jobs_come_item_by_item_in_order_and_a_failing_item_stops_them_after_the_work_before(tmp_path, fail_on):
    """`_jobs` prepares items lazily, one at a time: jobs and error records in run order, the counts, and a failing
    item raises after exactly the work of the items before it."""
    probe = ProbeRun(mixed_items(), settings(perturbations=["none", "wrong_answer"]), endpoints=[],
                     renderer=FailingRenderer(fail_on), out_path=str(tmp_path / "out.jsonl"), progress=False,
                     perturb=perturb)
    made: list[object] = []
    error = None
    try:
        made.extend(probe._jobs(scan_results(tmp_path / "out.jsonl"), {}))
    except UserError as exc:
        error = str(exc)
    kinds = {type(x).__name__ for x in made}
    order = [x.key.split("|")[2] for x in made]  # type: ignore[attr-defined]
    assert order == sorted(order, key=lambda item: int(item[1:]))  # item by item, in run order
    if fail_on is None:
        # 3 items without an assistant turn: 2 x 4 error records each; 10 with one: 4 jobs each unperturbed, and 4
        # with a wrong answer where the turn has a number (not q2, q12)
        assert error is None and kinds == {"Job", "ProbeRecord"} and len(made) == 3 * 8 + 10 * 4 + 8 * 4
        c = probe.counters
        assert (c.skipped, c.total, c.not_applicable) == (0, 0, 2 * 4)  # _jobs only moves keys already ok, n/a
    else:
        assert error == f"cannot render {fail_on}"
        assert set(order) == {f"q{i}" for i in range(int(fail_on.split()[1][:-1]))}
