"""The sampler is stated, not inherited: every user-turn request sends the engine's neutral sampling values unless
the user sets them, and the configuration line records what was sent, the engine, what its server applies to the
rest (`server_sampler_defaults`) and whether it honoured the seed; each engine's field names are read as its own
code writes them; stop strings fit the engine's limit."""

from __future__ import annotations

import json

import httpx
import pytest
from mock_http import MockServer
from test_pipeline import ChatMLRenderer, completion
from test_pipeline_config import math_items, probe, settings

from userturn.client.http.replies import matched_stop, reasoning_text
from userturn.client.http.server_facts import engine_notices, reported_sampler
from userturn.client.probe.pipeline import ProbeRun
from userturn.client.render.stops import fit_stops
from userturn.core.engine_traits import EXTERNAL, EngineTraits
from userturn.core.errors import UserError
from userturn.core.jsonl import read_records
from userturn.core.records import Message
from userturn.report.summary import summarise_file
from userturn.report.table import batch_line, seed_line

# Engines as their own code describes them (the values `userturn.serve.engines` fills in).
VLLM = EngineTraits(engine="vllm", seed_honoured=True, server_sampler_defaults={},
                    neutral_sampler={"top_p": 1.0, "top_k": -1, "min_p": 0.0}, max_stop_strings=4,
                    honours_stop_token_ids=True, stop_reason_field="stop_reason", reasoning_field="reasoning")
SGLANG = EngineTraits(engine="sglang", seed_honoured=False, server_sampler_defaults={},
                      neutral_sampler={"top_p": 1.0, "top_k": -1, "min_p": 0.0}, max_stop_strings=None,
                      honours_stop_token_ids=True, stop_reason_field="matched_stop",
                      reasoning_field="reasoning_content", weights_route="/model_info")
LLAMACPP = EngineTraits(engine="llamacpp", seed_honoured=True, server_sampler_defaults={"top_k": 40},
                        neutral_sampler={"top_p": 1.0, "top_k": 0, "min_p": 0.0}, max_stop_strings=None,
                        honours_stop_token_ids=False, stop_reason_field="stopping_word", reasoning_field=None,
                        sampler_route="/props")
QA = [Message(role="user", content="Q"), Message(role="assistant", content="A")]


def body_and_config(s) -> tuple[dict, dict]:
    run = ProbeRun([], s, endpoints=[], renderer=ChatMLRenderer(), out_path="unused.jsonl", progress=False)
    return run.requests.payload_base(QA)[0], run.requests.configs["none"]


# ----- the sampler sent and recorded ------------------------------------------------------------------------------
@pytest.mark.parametrize(("traits", "options", "sent"), [
    (EXTERNAL, {}, {"top_p": 1.0}),  # an external endpoint may refuse top_k/min_p: only top_p is stated
    (EXTERNAL, {"top_k": 20}, {"top_p": 1.0, "top_k": 20}),  # what the user sets is sent wherever it goes
    (VLLM, {}, {"top_p": 1.0, "top_k": -1, "min_p": 0.0}),
    (VLLM, {"top_p": 0.9, "min_p": 0.05}, {"top_p": 0.9, "top_k": -1, "min_p": 0.05}),
    (LLAMACPP, {}, {"top_p": 1.0, "top_k": 0, "min_p": 0.0}),  # llama-server: top_k 0 is no limit
])
def test_the_request_states_the_sampler_and_the_configuration_records_it(traits, options, sent):
    body, config = body_and_config(settings(engine_traits=traits, **options))
    assert {k: body.get(k) for k in ("top_p", "top_k", "min_p") if k in body} == sent
    assert {k: config[k] for k in ("top_p", "top_k", "min_p") if k in config} == sent
    assert (config["engine"], config["seed_honoured"], config["server_sampler_defaults"]) == (
        traits.engine, traits.seed_honoured, traits.server_sampler_defaults)


def test_a_neutral_field_that_is_no_option_is_sent_unless_extra_body_sets_it():
    traits = VLLM.model_copy(update={"neutral_sampler": {"top_p": 1.0, "repetition_penalty": 1.0}})
    body, config = body_and_config(settings(engine_traits=traits))
    assert (body["repetition_penalty"], config["repetition_penalty"]) == (1.0, 1.0)
    body, config = body_and_config(settings(engine_traits=traits, extra_body={"repetition_penalty": 1.1}))
    assert body["repetition_penalty"] == 1.1 and "repetition_penalty" not in config
    assert config["extra_body"] == {"repetition_penalty": 1.1}  # recorded where it was set


@pytest.mark.parametrize("change", [
    {"top_k": 20},
    {"engine_traits": VLLM.model_copy(update={"server_sampler_defaults": {"top_k": 40}})},
    {"engine_traits": VLLM.model_copy(update={"seed_honoured": False})},
    {"engine_traits": VLLM.model_copy(update={"neutral_sampler": {"top_p": 1.0}})},
])
def test_another_sampler_is_another_configuration(change):
    """Records made with another sampler, server default or seed handling are never pooled (or resumed) together."""
    base = ProbeRun([], settings(engine_traits=VLLM), endpoints=[], renderer=ChatMLRenderer(), out_path="x.jsonl",
                    progress=False)
    other = ProbeRun([], settings(**{"engine_traits": VLLM, **change}), endpoints=[], renderer=ChatMLRenderer(),
                     out_path="x.jsonl", progress=False)
    assert base.requests.fingerprints["none"] != other.requests.fingerprints["none"]


async def test_a_run_states_its_sampler_on_the_wire_and_in_its_configuration_line(tmp_path):
    out = tmp_path / "o.jsonl"
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        await probe(mock, out, settings(engine_traits=VLLM, top_k=5, temperatures=[1.0]), math_items())
    sent = [json.loads(call.request.content) for call in route.calls]
    assert len(sent) == 3 and all((b["top_p"], b["top_k"], b["min_p"], b["temperature"]) == (1.0, 5, 0.0, 1.0)
                                  for b in sent)
    report = read_records(out)[1]
    (config,) = [c.config for c in report.configs.values()]
    assert (config["top_p"], config["top_k"], config["min_p"], config["engine"]) == (1.0, 5, 0.0, "vllm")


# ----- the seed -------------------------------------------------------------------------------------------------
async def test_records_and_the_report_say_when_the_seed_was_not_honoured(tmp_path):
    out = tmp_path / "o.jsonl"
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        await probe(mock, out, settings(engine_traits=SGLANG, temperatures=[0.0, 1.0]), math_items())
    report = summarise_file(out)
    assert {g.config["seed_honoured"] for g in report.groups} == {False}
    assert seed_line(report.groups) == ("seed: ignored by the engine (sglang) for 1 sampled rows: a rerun need not "
                                        "repeat their records (seed_honoured in the configuration)")


async def test_an_external_endpoints_seed_is_said_to_be_unknown_and_an_honoured_one_says_nothing(tmp_path):
    for traits, name in ((EXTERNAL, "ext"), (VLLM, "vllm")):
        with MockServer() as mock:
            mock.post("/completions").mock(side_effect=completion)
            await probe(mock, tmp_path / f"{name}.jsonl", settings(engine_traits=traits, temperatures=[1.0]),
                        math_items())
    external = summarise_file(tmp_path / "ext.jsonl").groups
    assert seed_line(external) == ("seed: not known to be honoured (external endpoint) for 1 sampled rows: a rerun "
                                   "need not repeat their records (seed_honoured in the configuration)")
    assert seed_line(summarise_file(tmp_path / "vllm.jsonl").groups) is None


async def test_the_report_says_which_rows_a_batching_engine_made_and_counts_them(tmp_path):
    """Two rows (T=0 and T=1) from a llama-server with several slots, one from one run alone: 2 of 3 rows."""
    varying = LLAMACPP.model_copy(update={"batch_invariant": False})
    alone = LLAMACPP.model_copy(update={"batch_invariant": True})
    out = tmp_path / "o.jsonl"
    for traits, temperatures, dataset in ((varying, [0.0, 1.0], "a"), (alone, [1.0], "b")):
        with MockServer() as mock:
            mock.post("/completions").mock(side_effect=completion)
            await probe(mock, out, settings(engine_traits=traits, temperatures=temperatures, dataset=dataset),
                        math_items())
    groups = summarise_file(out).groups
    assert sorted(str(g.config["batch_invariant"]) for g in groups) == ["False", "False", "True"]
    assert batch_line(groups) == (
        "batch: 2 of 3 rows were generated by an engine (llamacpp) that computes a request together with others "
        "(several slots, or a reused prompt cache): a rerun need not repeat their records, greedy ones included "
        "(batch_invariant in the configuration)")
    assert batch_line([g for g in groups if g.config["batch_invariant"]]) is None


def test_the_run_says_once_what_cannot_be_known_about_its_endpoint():
    (note,) = engine_notices(EXTERNAL, ["http://h/v1"])
    assert "http://h/v1 is an external endpoint" in note and "top_p=1" in note and "\n" not in note
    (warning,) = engine_notices(SGLANG, ["http://g/v1"])
    assert "does not honour a request's seed" in warning
    assert engine_notices(VLLM, ["http://v/v1"]) == []


# ----- engine field names ---------------------------------------------------------------------------------------
def test_the_matched_stop_and_the_reasoning_are_read_from_the_engines_own_fields():
    vllm_choice = {"text": "x", "finish_reason": "stop", "stop_reason": 151645}
    sglang_choice = {"text": "x", "finish_reason": "stop", "matched_stop": "<|im_end|>"}
    assert matched_stop(vllm_choice, VLLM) == 151645 and matched_stop(sglang_choice, SGLANG) == "<|im_end|>"
    assert matched_stop(sglang_choice, VLLM) is None  # an engine is read by its own name only
    assert matched_stop(vllm_choice, EXTERNAL) == 151645  # an unknown engine: whichever known field is there
    assert reasoning_text({"content": "A", "reasoning": "hmm"}, VLLM) == "hmm"
    assert reasoning_text({"content": "A", "reasoning_content": "hmm"}, SGLANG) == "hmm"
    assert reasoning_text({"content": "A", "reasoning": "hmm"}, SGLANG) is None
    assert reasoning_text({"content": "A", "reasoning": "hmm"}, EXTERNAL) == "hmm"


async def test_vllm_records_carry_the_stop_that_matched(tmp_path):
    def vllm_completion(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"index": 0, "text": "Why?", "finish_reason": "stop",
                                                      "stop_reason": "<|im_end|>"}]})

    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=vllm_completion)
        await probe(mock, tmp_path / "o.jsonl", settings(engine_traits=VLLM), math_items())
    assert {r.matched_stop for r in read_records(tmp_path / "o.jsonl")[0].values()} == {"<|im_end|>"}


@pytest.mark.parametrize(("traits", "field"), [(VLLM, "reasoning"), (SGLANG, "reasoning_content")])
async def test_a_model_written_assistant_turn_keeps_its_reasoning_on_either_engine(tmp_path, traits, field):
    def chat(request: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": "The answer is 7.", field: "3 plus 4"}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        answers = mock.post("/chat/completions").mock(side_effect=chat)
        await probe(mock, tmp_path / "o.jsonl", settings(engine_traits=traits, assistant_from="model"),
                    math_items())
    records = list(read_records(tmp_path / "o.jsonl")[0].values())
    assert len(records) == 3 and all(r.messages[-1].model_extra == {"reasoning_content": "3 plus 4"} for r in records)
    sent = json.loads(answers.calls[0].request.content)  # the assistant turn is sampled neutrally too
    assert (sent["top_p"], sent["top_k"], sent["min_p"]) == (1.0, -1, 0.0)


# ----- the stop-string limit ------------------------------------------------------------------------------------
GLM_STOPS = ["<|user|>", "<|assistant|>", "<|observation|>", "<|system|>", "<|endoftext|>"]
GLM_IDS = {"<|endoftext|>": 151329, "<|user|>": 151336, "<|assistant|>": 151337, "<|observation|>": 151338,
           "<|system|>": 151335}


def test_stops_within_the_limit_are_sent_as_they_are():
    assert fit_stops(GLM_STOPS, [1], GLM_IDS, None, send_ids=True, ids_carry=False, engine="sglang") == (GLM_STOPS,
                                                                                                          [1])
    assert fit_stops(GLM_STOPS[:4], [1], GLM_IDS, 4, send_ids=False, ids_carry=True, engine="vllm") == (
        GLM_STOPS[:4], [])


def test_stops_over_the_limit_leave_single_tokens_to_their_ids():
    """Worked by hand: 6 strings, limit 4, `###` has no id so it stays; of the five tokens the first three fit, and
    the ids of `<|system|>` and `<|endoftext|>` join the ids sent."""
    stops = ["<|user|>", "###", *GLM_STOPS[1:]]
    sent, ids = fit_stops(stops, [151336], GLM_IDS, 4, send_ids=True, ids_carry=True, engine="vllm")
    assert sent == ["<|user|>", "###", "<|assistant|>", "<|observation|>"]
    assert ids == [151336, 151335, 151329]
    assert fit_stops(stops, [151336], GLM_IDS, 4, send_ids=False, ids_carry=True, engine="vllm")[1] == [151335, 151329]


@pytest.mark.parametrize(("ids", "carry", "needle"), [
    (GLM_IDS, False, "5 stop strings (<|user|>, <|assistant|>, <|observation|>, <|system|>, <|endoftext|>), but "
                     "llamacpp accepts at most 4 per request and does not honour stop_token_ids"),
    ({}, True, "5 of them are not single tokens"),
])
def test_stops_the_ids_cannot_carry_are_refused_in_one_line(ids, carry, needle):
    with pytest.raises(UserError) as caught:
        fit_stops(GLM_STOPS, [], ids, 4, send_ids=True, ids_carry=carry, engine="llamacpp")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


class GlmRenderer(ChatMLRenderer):
    def __init__(self) -> None:
        super().__init__()
        self.stop = list(GLM_STOPS)
        self.stop_token_ids = [GLM_IDS[s] for s in GLM_STOPS]
        self.token_ids = dict(GLM_IDS)


async def test_glm_on_vllm_sends_four_strings_and_the_fifth_as_its_id(tmp_path):
    out = tmp_path / "o.jsonl"
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        await probe(mock, out, settings(engine_traits=VLLM), math_items(), renderer=GlmRenderer())
    body = json.loads(route.calls[0].request.content)
    assert body["stop"] == GLM_STOPS[:4] and body["stop_token_ids"] == [GLM_IDS["<|endoftext|>"]]
    (config,) = [c.config for c in read_records(out)[1].configs.values()]
    assert (config["stop"], config["stop_token_ids"]) == (GLM_STOPS[:4], [GLM_IDS["<|endoftext|>"]])


def test_too_many_stops_for_an_endpoint_that_ignores_ids_are_refused_before_any_request(tmp_path):
    with pytest.raises(UserError, match=r"external accepts at most 4 per request .*pass --send-stop-token-ids"):
        ProbeRun(math_items(), settings(), endpoints=[], renderer=GlmRenderer(), out_path=str(tmp_path / "o.jsonl"),
                 progress=False)
    assert not (tmp_path / "o.jsonl").exists()
    # an external endpoint the user says honours stop_token_ids (--send-stop-token-ids) gets the ids instead
    run = ProbeRun([], settings(send_stop_token_ids=True), endpoints=[], renderer=GlmRenderer(), out_path="x.jsonl",
                   progress=False)
    assert run.requests.payload_base(QA)[0]["stop"] == GLM_STOPS[:4]


# ----- what a self-describing server reports --------------------------------------------------------------------
def test_llama_server_props_give_its_sampling_defaults():
    newer = {"default_generation_settings": {"n_ctx": 4096, "params": {
        "top_k": 40, "top_p": 0.95, "min_p": 0.05, "temperature": 0.8, "n_predict": -1, "seed": 4294967295,
        "ignore_eos": False}}}
    older = {"default_generation_settings": {"top_k": 40, "top_p": 0.95, "min_p": 0.05, "n_ctx": 4096}}
    assert reported_sampler(newer) == {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    assert reported_sampler(older) == {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    assert reported_sampler({"model_path": "x"}) is None and reported_sampler(None) is None


def _server(routes: dict[str, dict]):
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path in routes:
            return httpx.Response(200, json=routes[request.url.path])
        return httpx.Response(404, json={"error": "no route"})
    return handle


async def test_a_session_records_what_llama_server_reports_and_reads_sglangs_weights(caplog):
    from userturn.core.options import ProbeOptions
    from userturn.orchestrate.run_builder import ProbeTarget, TargetSession

    props = {"default_generation_settings": {"params": {"top_k": 40, "top_p": 0.95, "min_p": 0.05}},
             "model_path": "/m/smollm2.gguf"}
    models = {"data": [{"id": "m", "root": "m"}]}
    with MockServer(_server({"/v1/models": models, "/props": props})) as server:
        target = ProbeTarget(base_urls=[server.base_url], model="m", tokenizer="x/smollm2", engine_traits=LLAMACPP)
        async with TargetSession(target, ProbeOptions()) as session:
            await session.check()
            s = session.settings(dataset="d", mode="raw", perturbations=["none"], assistant_from="dataset")
    assert s.engine_traits.server_sampler_defaults == {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    # SGLang's /v1/models says the served name; /model_info says the weights
    for model_path, tokenizer, warned in (("/w/Qwen3-8B", "Qwen/Qwen3-8B", False),  # the name differs: no alarm
                                          ("/w/Qwen3-8B", "Qwen/Qwen3-0.6B", True)):  # the name agrees: caught
        caplog.clear()
        served = {"data": [{"id": "qwen3-0.6b", "root": "qwen3-0.6b"}]}
        with MockServer(_server({"/v1/models": served, "/model_info": {"model_path": model_path}})) as server:
            target = ProbeTarget(base_urls=[server.base_url], model="qwen3-0.6b", tokenizer=tokenizer,
                                 engine_traits=SGLANG)
            async with TargetSession(target, ProbeOptions()) as session:
                await session.check()
        warnings = [r.getMessage() for r in caplog.records if "loaded" in r.getMessage()]
        assert bool(warnings) == warned, warnings
        assert not warned or f"from {model_path}, but prompts are rendered with the tokenizer {tokenizer}" in \
            warnings[0]


async def test_the_external_note_is_said_by_the_first_run_of_a_session_only(tmp_path, capsys):
    from userturn.core.options import ProbeOptions
    from userturn.orchestrate.run_builder import ProbeTarget, TargetSession

    with MockServer(_server({"/v1/models": {"data": [{"id": "m"}]}})) as server:
        server.post("/completions").mock(side_effect=completion)
        target = ProbeTarget(base_urls=[server.base_url], model="m")
        async with TargetSession(target, ProbeOptions(temperatures=[0.0])) as session:
            session._renderer = ChatMLRenderer()
            await session.check()
            for name in ("a", "b"):
                run = session.probe_run(math_items(), dataset=name, mode="raw", perturbations=["none"],
                                        assistant_from="dataset", out_path=str(tmp_path / f"{name}.jsonl"),
                                        progress=False)
                await run.run()
    err = capsys.readouterr().err
    assert err.count("is an external endpoint") == 1, err


def test_a_neutral_value_is_one_that_leaves_sampling_as_it_is():
    """What lets a resumed grid know, without launching the engine, that an unset sampler option was sent neutral."""
    from userturn.core.options import is_neutral

    assert [is_neutral("top_p", v) for v in (1, 1.0, 0.95)] == [True, True, False]
    assert [is_neutral("top_k", v) for v in (-1, 0, 40)] == [True, True, False]
    assert [is_neutral("min_p", v) for v in (0, 0.0, 0.05, None)] == [True, True, False, False]
    assert not is_neutral("top_p", True) and not is_neutral("typical_p", 1.0)
