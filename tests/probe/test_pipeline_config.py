"""What a record's numbers describe: accuracy of the probed (perturbed) turn, perturbations keyed by item identity,
one configuration per result (fingerprint + resume refusal), assistant turns reused only from the same model."""

from __future__ import annotations

import hashlib
import json
import re

import httpx
import pytest
from mock_http import MockServer
from results_lines import record_lines
from test_pipeline import ChatMLRenderer, completion, endpoint

from userturn.client.data.dataset import DatasetItem
from userturn.client.probe.perturb import GENERIC_RESPONSE, perturb
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.client.probe.scoring import score
from userturn.core.fingerprint import ConfigMismatch
from userturn.core.jsonl import read_records

ALL = ["none", "wrong_answer", "truncate", "swap", "remove", "generic"]
# (id, reference, dataset assistant turn). With seed 0 the swap ring (client.probe.perturb.PartnerRing) is
# q2 -> q1 -> q0 -> q2.
MATH = [
    ("q0", "7", "Tom had 3 apples and bought 4 more, so he has 7 now. The answer is 7."),
    ("q1", "12", "Each box holds 6, and two boxes hold 12 eggs in all, that is every egg. The answer is 12."),
    ("q2", "7", "3 plus 4 is 7. The answer is 7."),
]


def math_items(rows=MATH) -> list[DatasetItem]:
    return [DatasetItem.model_validate({"id": i, "answer": ref, "messages": [
        {"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": text}]})
        for i, ref, text in rows]


def many_items(n: int = 8) -> list[DatasetItem]:
    return math_items([(f"q{i}", str(i + 10), f"We add {i} and 10, which gives {i + 10} in the end. #### {i + 10}")
                       for i in range(n)])


def settings(**kw) -> ProbeSettings:
    base = dict(model="m", dataset="gsm8k", temperatures=[0.0], samples=1, concurrency=2)
    base.update(kw)
    return ProbeSettings(**base)


async def probe(server: MockServer, out, s: ProbeSettings, its, **kw):
    ep = endpoint(server)
    try:
        run = ProbeRun(its, s, endpoints=[ep], renderer=kw.pop("renderer", ChatMLRenderer()), out_path=str(out),
                       progress=False, perturb=perturb, scorer=score, **kw)
        return await run.run()
    finally:
        await ep.aclose()


async def mocked(out, s, its, **kw):
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await probe(mock, out, s, its, **kw)
    return summary, route.call_count


# --------------------------------------------------------------------------------------------------------------
# 1. Accuracy of the turn that was probed


async def test_accuracy_is_scored_on_the_perturbed_turn(tmp_path):
    await mocked(tmp_path / "o.jsonl", settings(perturbations=ALL), math_items())
    records = read_records(tmp_path / "o.jsonl")[0]

    def got(item, perturbation):
        r = records[f"m|gsm8k|{item}|raw|{perturbation}|t=0.0|s=0"]
        return r.correct, r.task_scores

    expected = {  # worked out by hand from MATH (exact match of the final number against the reference)
        "none": (True, True, True),
        "wrong_answer": (False, False, False),  # the final number moved by 1..9
        "truncate": (False, True, False),  # "... bought 4" | "... hold 12 eggs" | "3 plus 4 is" (mid-sentence)
        "swap": (True, False, False),  # q0 gets q2's "7" (ref 7) | q1 gets q0's "7" (ref 12) | q2 gets q1's "12"
        "generic": (False, False, False),  # no number at all
    }
    for perturbation, row in expected.items():
        for item, correct in zip(("q0", "q1", "q2"), row, strict=True):
            assert got(item, perturbation) == (correct, {"exact_match": float(correct)}), (item, perturbation)
    for item in ("q0", "q1", "q2"):  # no assistant turn: no accuracy
        assert got(item, "remove") == (None, None)
        assert records[f"m|gsm8k|{item}|raw|remove|t=0.0|s=0"].messages[-1].role == "user"
    swapped = records["m|gsm8k|q0|raw|swap|t=0.0|s=0"]
    assert swapped.messages[-1].content == MATH[2][2] and swapped.meta["swap_partner"] == "q2"
    assert records["m|gsm8k|q0|raw|generic|t=0.0|s=0"].messages[-1].content == GENERIC_RESPONSE


async def test_model_written_turn_is_scored_after_perturbation(tmp_path):
    def chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "So the answer is 7."}}]})

    its = [DatasetItem.model_validate({"id": "q0", "answer": "7", "messages": [{"role": "user", "content": "3+4?"}]})]
    with MockServer() as mock:
        mock.post("/chat/completions").mock(side_effect=chat)
        mock.post("/completions").mock(side_effect=completion)
        await probe(mock, tmp_path / "o.jsonl", settings(perturbations=["none", "wrong_answer", "remove"],
                                                   assistant_from="model"), its)
    records = read_records(tmp_path / "o.jsonl")[0]
    assert records["m|gsm8k|q0|raw|none|t=0.0|s=0"].correct is True
    assert records["m|gsm8k|q0|raw|wrong_answer|t=0.0|s=0"].correct is False
    assert records["m|gsm8k|q0|raw|remove|t=0.0|s=0"].correct is None


# --------------------------------------------------------------------------------------------------------------
# 2. Perturbations keyed by item identity


async def test_perturbed_messages_do_not_depend_on_position_limit_or_shuffle(tmp_path):
    pool = many_items(8)
    await mocked(tmp_path / "all.jsonl", settings(perturbations=ALL), pool)
    # what --shuffle-seed + --limit 2 would select: other positions, fewer items; the swap pool is the dataset
    await mocked(tmp_path / "two.jsonl", settings(perturbations=ALL), [pool[6], pool[1]], partner_pool=pool)

    def lines(name):
        return {row["key"]: json.dumps(row["messages"]) for row in record_lines(tmp_path / name)}

    full, part = lines("all.jsonl"), lines("two.jsonl")
    assert len(part) == 12
    for key, messages in part.items():
        assert full[key] == messages, key
    assert part["m|gsm8k|q6|raw|wrong_answer|t=0.0|s=0"] != full["m|gsm8k|q6|raw|none|t=0.0|s=0"]


async def test_swap_partner_outside_the_run_is_answered_by_the_model_and_reused(tmp_path):
    calls = []

    def chat(request: httpx.Request) -> httpx.Response:
        question = json.loads(request.content)["messages"][-1]["content"]
        calls.append(question)
        return httpx.Response(200, json={"choices": [{"message": {"content": f"My answer to {question}"}}]})

    pool = [DatasetItem.model_validate({"id": f"q{i}", "messages": [{"role": "user", "content": f"Question {i}?"}]})
            for i in range(3)]
    out = tmp_path / "o.jsonl"
    for samples in (1, 2):
        with MockServer() as mock:
            mock.post("/chat/completions").mock(side_effect=chat)
            mock.post("/completions").mock(side_effect=completion)
            await probe(mock, out, settings(perturbations=["swap"], assistant_from="model", samples=samples), [pool[0]],
                        partner_pool=pool)
    # ring q2 -> q1 -> q0 -> q2: q0's partner is q2, answered once (first run) and reused from the swap record
    assert calls == ["Question 0?", "Question 2?"]
    records = read_records(out)[0]
    assert {r.messages[-1].content for r in records.values()} == {"My answer to Question 2?"}
    assert {r.meta["swap_partner"] for r in records.values()} == {"q2"} and len(records) == 2


# --------------------------------------------------------------------------------------------------------------
# 3. One configuration per result


async def test_records_carry_their_configuration_and_its_fingerprint(tmp_path):
    await mocked(tmp_path / "o.jsonl", settings(perturbations=["none", "generic"], max_tokens=64, top_p=0.9, seed=3,
                                                send_stop_token_ids=True, template_kwargs={"enable_thinking": False},
                                                concurrency=3), math_items())
    found, report = read_records(tmp_path / "o.jsonl")
    records = list(found.values())
    none = next(r for r in records if r.perturbation == "none")
    none_config = report.configs[none.config_fingerprint].config  # the file's configuration line
    assert none_config == {
        "model": "m", "dataset": "gsm8k", "mode": "raw", "perturbation": "none", "assistant_source": "dataset",
        "assistant_model": None, "assistant_temperature": None, "assistant_max_tokens": None,
        "template_engine": "jinja", "template_sha256": "t" * 64, "template_kwargs": {"enable_thinking": False},
        "chat_prompt_sha256": None, "max_tokens": 64, "stop": ["<|im_end|>"], "stop_token_ids": [7], "top_p": 0.9,
        "extra_body": {}, "engine": "external", "seed_honoured": None, "server_sampler_defaults": None, "seed": 3,
    }
    canonical = json.dumps(none_config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert none.config_fingerprint == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert {r.config_fingerprint for r in records if r.perturbation == "none"} == {none.config_fingerprint}
    generic = next(r for r in records if r.perturbation == "generic")
    assert report.configs[generic.config_fingerprint].config == {**none_config, "perturbation": "generic"}
    run = report.configs[none.config_fingerprint].run
    assert run is not None and run.userturn_version and run.host and run.started.endswith("+00:00")


@pytest.mark.parametrize(("change", "message"), [
    ({"max_tokens": 64}, "holds records made with max_tokens=256, this run has max_tokens=64; use another --out"),
    ({"seed": 1}, "holds records made with seed=0, this run has seed=1"),
    ({"top_p": 0.5}, "holds records made with top_p=1.0, this run has top_p=0.5"),
    ({"min_p": 0.1}, "holds records made with min_p=null, this run has min_p=0.1"),
    ({"template_kwargs": {"reasoning_effort": "high"}}, 'template_kwargs={}, this run has template_kwargs='
                                                        '{"reasoning_effort":"high"}'),
    ({"extra_stop": ["###"]}, 'stop=["<|im_end|>"], this run has stop=["<|im_end|>","###"]'),
])
async def test_resume_with_other_settings_is_refused_and_the_file_untouched(tmp_path, change, message):
    out = tmp_path / "o.jsonl"
    await mocked(out, settings(perturbations=["none", "swap"]), math_items())
    with out.open("ab") as fh:
        fh.write(b'{"key": "torn')  # a torn tail: a refused run must not even cut it
    before = out.read_bytes()
    with pytest.raises(ConfigMismatch) as caught:
        await mocked(out, settings(perturbations=["swap"], **change), math_items())
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{out} holds records made with ") and "\n" not in str(caught.value)
    assert caught.value.exit_code == 2 and out.read_bytes() == before


async def test_template_identity_is_part_of_the_configuration(tmp_path):
    out = tmp_path / "o.jsonl"
    await mocked(out, settings(), math_items())
    other = ChatMLRenderer()
    other.template_sha256 = "a" * 64
    with pytest.raises(ConfigMismatch, match=r"template_sha256=tttttttttttt, this run has template_sha256=aaaaaaaa"):
        await mocked(out, settings(), math_items(), renderer=other)


async def test_resume_with_the_same_configuration_is_free_to_change_what_does_not_shape_outputs(tmp_path):
    out = tmp_path / "o.jsonl"
    await mocked(out, settings(perturbations=["none"]), math_items())
    # more samples and temperatures, another concurrency, fewer items, a new perturbation, another model: all fine
    summary, calls = await mocked(out, settings(perturbations=["none", "generic"], concurrency=1, samples=2,
                                                temperatures=[0.0, 1.0]), math_items()[:2])
    assert summary.skipped == 2 and calls == 14
    summary, calls = await mocked(out, settings(model="other", max_tokens=8), math_items())
    assert summary.skipped == 0 and calls == 3
    records = read_records(out)[0].values()
    assert len({(r.model, r.perturbation, r.config_fingerprint) for r in records}) == 3  # one config per row
    assert None not in {r.config_fingerprint for r in records}


async def test_records_without_a_fingerprint_are_refused_only_where_keys_overlap(tmp_path):
    out = tmp_path / "o.jsonl"
    await mocked(out, settings(), math_items())
    old = record_lines(out)
    for row in old:  # as written by an older userturn
        del row["config_fingerprint"]
    out.write_text("".join(json.dumps(row) + "\n" for row in old))
    before = out.read_bytes()
    with pytest.raises(ConfigMismatch, match=r"records without a configuration fingerprint .* e\.g\. m\|gsm8k\|q0"):
        await mocked(out, settings(), math_items())
    assert out.read_bytes() == before
    summary, calls = await mocked(out, settings(temperatures=[1.0]), math_items())  # no shared key: resumes
    assert summary.ok == 3 and calls == 3


# --------------------------------------------------------------------------------------------------------------
# 4. An assistant turn written by one model is never reused for another


async def test_assistant_turns_are_reused_only_from_the_same_model(tmp_path):
    def chat(request: httpx.Request) -> httpx.Response:
        model = json.loads(request.content)["model"]
        return httpx.Response(200, json={"choices": [{"message": {"content": f"{model} says 7."}}]})

    its = [DatasetItem.model_validate({"id": "q0", "answer": "7", "messages": [{"role": "user", "content": "3+4?"}]})]
    out = tmp_path / "o.jsonl"
    for model in ("a", "b"):
        with MockServer() as mock:
            mock.post("/chat/completions").mock(side_effect=chat)
            mock.post("/completions").mock(side_effect=completion)
            await probe(mock, out, settings(model=model, assistant_from="model"), its)
    records = read_records(out)[0]
    assert records["a|gsm8k|q0|raw|none|t=0.0|s=0"].messages[-1].content == "a says 7."
    assert records["b|gsm8k|q0|raw|none|t=0.0|s=0"].messages[-1].content == "b says 7."


@pytest.mark.parametrize(("extra_body", "plan", "needle"), [
    ({"temperature": 0.3}, {"temperatures": [0.0, 1.0]}, "extra_body sets temperature=0.3, which every request would "
                                                          "send instead of the planned temperature (0, 1)"),
    ({"seed": 11}, {"temperatures": [1.0], "samples": 4}, "all 4 samples of an item would share it"),
    ({"temperature": 1.0}, {"temperatures": [1.0], "assistant_from": "model"},
     "planned temperatures of user and assistant turns (1, 0)"),
    ({"max_tokens": 5}, {}, "extra_body sets max_tokens, which the probe sets (and records) from its own settings"),
])
async def test_extra_body_that_would_make_a_record_lie_is_refused(tmp_path, extra_body, plan, needle):
    from userturn.core.errors import UserError

    with pytest.raises(UserError, match=re.escape(needle)):
        await mocked(tmp_path / "o.jsonl", settings(extra_body=extra_body, **plan), math_items())
    assert not (tmp_path / "o.jsonl").exists()
    # the same fields are fine where they say what the records say
    summary, _ = await mocked(tmp_path / "o.jsonl", settings(extra_body={"temperature": 1.0, "seed": 11},
                                                             temperatures=[1.0]), math_items())
    assert summary.ok == 3


async def test_an_empty_model_answer_is_an_error_not_a_wrong_answer(tmp_path):
    def chat(request: httpx.Request) -> httpx.Response:
        question = json.loads(request.content)["messages"][-1]["content"]
        if question == "3+4?":  # reasoning used up the tokens: nothing left to probe or score
            return httpx.Response(200, json={"choices": [{"message": {"content": "<think>let me see"},
                                                          "finish_reason": "length"}]})
        return httpx.Response(200, json={"choices": [{"message": {"content": "It is 9."}, "finish_reason": "stop"}]})

    its = [DatasetItem.model_validate({"id": i, "answer": a, "messages": [{"role": "user", "content": q}]})
           for i, a, q in (("q0", "7", "3+4?"), ("q1", "9", "4+5?"))]
    with MockServer() as mock:
        mock.post("/chat/completions").mock(side_effect=chat)
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await probe(mock, tmp_path / "o.jsonl", settings(assistant_from="model"), its)
    assert summary.errors == 1 and summary.ok == 1 and route.call_count == 1
    records = read_records(tmp_path / "o.jsonl")[0]
    failed = records["m|gsm8k|q0|raw|none|t=0.0|s=0"]
    assert failed.status == "error" and failed.correct is None
    assert failed.error == "assistant turn failed: empty answer (finish_reason length; raise --assistant-max-tokens)"
    good = records["m|gsm8k|q1|raw|none|t=0.0|s=0"]
    assert good.correct is True and good.meta["assistant_finish_reason"] == "stop"


async def test_error_records_of_another_configuration_do_not_block_a_rerun(tmp_path):
    out = tmp_path / "o.jsonl"
    with MockServer() as mock:
        mock.post("/completions").mock(return_value=httpx.Response(400, json={"error": "prompt too long"}))
        first = await probe(mock, out, settings(max_tokens=4096), math_items())
    assert first.errors == 3
    summary, calls = await mocked(out, settings(max_tokens=64), math_items())  # nothing was produced: go on
    assert summary.ok == 3 and calls == 3
    found, report = read_records(out)
    assert {report.configs[r.config_fingerprint].config["max_tokens"] for r in found.values()} == {64}


async def test_records_whose_configuration_line_is_missing_are_compared_only_by_fingerprint(tmp_path):
    out = tmp_path / "o.jsonl"
    await mocked(out, settings(max_tokens=8), math_items()[:2])
    lines = out.read_text().splitlines()
    out.write_text("".join(line + "\n" for line in lines if '"type":"config"' not in line))  # lines cut out by hand
    summary, calls = await mocked(out, settings(max_tokens=8), math_items())  # the same fingerprint: resumes
    assert summary.skipped == 2 and calls == 1
    assert out.read_text().count('"type":"config"') == 1  # the resumed run described its configuration again
    lines = out.read_text().splitlines()
    out.write_text("".join(line + "\n" for line in lines if '"type":"config"' not in line))
    before = out.read_bytes()
    with pytest.raises(ConfigMismatch, match=r"holds records of configuration [0-9a-f]{16} but no configuration line"):
        await mocked(out, settings(max_tokens=9), math_items())
    assert out.read_bytes() == before
