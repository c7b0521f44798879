"""userturn/core/options.py: one options model. Every layer is an `Options`, `merge` lets the later layer's set
options win, `resolve` fills the defaults, and a sampling option declared once (with its flag) is settable from every
source, sent in every request body and recorded in the configuration, without being declared anywhere else."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from chatml_renderer import Renderer as ChatMLRenderer
from pydantic import ValidationError

from userturn.cli import build_parser
from userturn.cli.probe import flag_layer
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.client.probe.settings import OWN_FIELDS
from userturn.core import defaults, options
from userturn.core.fingerprint import GenerationContext, fingerprint, generation_config
from userturn.core.options import Options, ProbeOptions, Role, merged, resolve, sent_names
from userturn.core.records import Message
from userturn.orchestrate.experiment import Experiment, ModelEntry
from userturn.orchestrate.posttrain import POSTTRAIN_LAYER, PostTrainExperiment
from userturn.orchestrate.run_builder import ProbeTarget, TargetSession
from userturn.serve.manifest import ProbeDefaults

PROBE = ["probe", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", "d", "--out", "o"]
# Every schema a setting can be written in: each takes the options by extending `Options`, never by redeclaring one.
SCHEMAS = (ModelEntry, Experiment, ProbeDefaults, PostTrainExperiment, ProbeSettings)


def test_merge_lets_the_later_layer_win_and_merges_template_variables_key_by_key() -> None:
    low = Options(max_tokens=30, top_p=0.7, chat_template_kwargs={"a": 1, "b": 1}, tokenizer="tok")
    high = Options(max_tokens=10, chat_template_kwargs={"a": 2})
    both = low.merge(high)
    assert (both.max_tokens, both.top_p, both.tokenizer) == (10, 0.7, "tok")
    assert both.chat_template_kwargs == {"a": 2, "b": 1}
    assert low.merge(Options()) == low.layer() and Options().merge(high) == high.layer()
    assert merged([low, high]) == both


def test_resolve_takes_the_first_layer_that_sets_an_option_then_the_defaults() -> None:
    resolved = resolve([Options(samples=3), Options(samples=2, top_p=0.5)])
    assert (resolved.samples, resolved.top_p, resolved.max_tokens) == (3, 0.5, defaults.MAX_TOKENS)
    plain = resolve([])
    assert plain == ProbeOptions()
    assert (plain.temperatures, plain.samples, plain.seed, plain.concurrency, plain.request_timeout) == \
        (list(defaults.TEMPERATURES), defaults.SAMPLES, defaults.SEED, defaults.CONCURRENCY, defaults.REQUEST_TIMEOUT_S)
    assert (plain.assistant_temperature, plain.assistant_max_tokens, plain.max_retries) == \
        (defaults.ASSISTANT_TEMPERATURE, defaults.ASSISTANT_MAX_TOKENS, defaults.MAX_RETRIES)
    assert plain.top_p is None and plain.rpm is None  # no default: not sent, no limit


def test_options_are_checked_where_they_enter() -> None:
    with pytest.raises(ValidationError, match="top_p"):
        Options(top_p=1.5)
    with pytest.raises(ValidationError, match="temperatures"):
        Options(temperatures=[])
    with pytest.raises(ValidationError, match="max_tokem"):
        Options(max_tokem=3)  # type: ignore[call-arg]


def test_every_option_declares_one_role() -> None:
    assert set(options.roles()) == set(Options.model_fields)
    assert all(isinstance(role, Role) for role in options.roles().values())
    assert {"max_tokens", "top_p"} <= set(sent_names())


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda c: c.__name__)
def test_each_schema_takes_the_options_from_the_model_without_redeclaring_them(schema: type) -> None:
    assert issubclass(schema, Options)
    own = set(vars(schema).get("__annotations__", {}))
    assert own.isdisjoint(Options.model_fields), sorted(own & set(Options.model_fields))


def test_probe_options_declare_only_defaults() -> None:
    """The resolved model repeats an option only to give it its default (a non-None value)."""
    for name in vars(ProbeOptions)["__annotations__"]:
        assert name in Options.model_fields
        assert ProbeOptions.model_fields[name].get_default(call_default_factory=True) is not None, name


def flag_value(parser: argparse.ArgumentParser, name: str) -> tuple[list[str], Any]:
    """The flag whose dest is option `name` with a value it accepts: (argv tail, the value it parses to)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["probe"]
    action = next(a for a in sub._actions if a.dest == name)
    for text in ("0.5", "7"):
        try:
            value = action.type(text) if action.type else text  # type: ignore[operator]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return [action.option_strings[0], text], value
    raise AssertionError(f"no test value for {action.option_strings[0]}")


@pytest.mark.parametrize("name", sent_names())
def test_a_sampling_option_reaches_the_request_body_and_the_configuration_from_its_flag(name: str) -> None:
    """The three places a sampling setting lives: the options model (its `SENT` role), its flag (dest = its name)
    and the request builder (`Options.request_fields`). Every other source takes it from the model."""
    parser = build_parser()
    tail, value = flag_value(parser, name)
    layer = flag_layer(parser.parse_args([*PROBE, *tail]))
    assert getattr(layer, name) == value
    assert getattr(Experiment.model_validate({"name": "x", "models": [{"base_url": "u", "model": "m", name: value}],
                                              "datasets": ["d"]}).models[0], name) == value
    assert getattr(ProbeDefaults.model_validate({name: value}), name) == value

    session = TargetSession(ProbeTarget(base_urls=[], model="m"), resolve([layer]))
    settings = session.settings(dataset="d", mode="raw", perturbations=["none"], assistant_from="dataset")
    run = ProbeRun([], settings, endpoints=[], renderer=ChatMLRenderer(), out_path="unused.jsonl", progress=False)
    body, _, _ = run.requests.payload_base([Message(role="user", content="Q"), Message(role="assistant", content="A")])
    assert body[name] == value
    assert run.requests.configs["none"][name] == value
    assert name in OWN_FIELDS  # extra_body cannot replace it unseen


def test_an_unset_sampling_option_is_sent_at_the_engines_neutral_value_or_not_at_all() -> None:
    """An external endpoint's neutral sampler is top_p=1 alone: top_k and min_p, which it may not accept, stay out."""
    settings = ProbeSettings(model="m", dataset="d")
    run = ProbeRun([], settings, endpoints=[], renderer=ChatMLRenderer(), out_path="unused.jsonl", progress=False)
    body, _, _ = run.requests.payload_base([Message(role="user", content="Q"), Message(role="assistant", content="A")])
    assert body["top_p"] == 1.0 and "top_k" not in body and "min_p" not in body
    assert body["max_tokens"] == defaults.MAX_TOKENS


CONTEXT = GenerationContext(model="m", dataset="d", mode="raw", perturbation="none", assistant_source="dataset",
                            template_engine="jinja", template_sha256="a" * 64, template_kwargs={},
                            stop=["<|im_end|>"])


def test_fingerprints_of_existing_configurations_stay_the_same() -> None:
    """Values computed with the hand-kept `GenerationConfig` this model replaced (commit 03061b4)."""
    assert fingerprint(generation_config(CONTEXT, ProbeOptions())) == "4c84f55991a21454"
    by_model = CONTEXT.model_copy(update={"assistant_source": "model", "assistant_model": "m",
                                          "template_kwargs": {"enable_thinking": False}, "stop_token_ids": [11],
                                          "extra_body": {"repetition_penalty": 1.1}})
    assert fingerprint(generation_config(by_model, ProbeOptions(assistant_temperature=0.3, max_tokens=40, top_p=0.9,
                                                                seed=7))) == "4c4711fd8b3af5f9"


def test_a_recorded_option_added_later_enters_the_configuration_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new sampling option (played here by `tokenizer`) leaves the fingerprints of runs that do not set it alone."""
    before = generation_config(CONTEXT, ProbeOptions())
    roles = {**options.roles(), "tokenizer": Role(sent=True, recorded=True)}
    monkeypatch.setattr(options, "roles", lambda: roles)
    monkeypatch.setattr(options, "sent_names", lambda: ("max_tokens", "top_p", "tokenizer"))
    assert generation_config(CONTEXT, ProbeOptions()) == before
    chosen = ProbeOptions(tokenizer="x")
    assert generation_config(CONTEXT, chosen)["tokenizer"] == "x"
    assert chosen.request_fields() == {"max_tokens": defaults.MAX_TOKENS, "tokenizer": "x"}


def test_assistant_options_are_recorded_only_for_a_model_written_assistant_turn() -> None:
    chosen = ProbeOptions(assistant_temperature=0.4)
    assert generation_config(CONTEXT, chosen)["assistant_temperature"] is None
    by_model = CONTEXT.model_copy(update={"assistant_source": "model"})
    assert generation_config(by_model, chosen)["assistant_temperature"] == 0.4


def test_posttrain_short_turns_are_a_layer_under_the_file() -> None:
    cfg = PostTrainExperiment.model_validate({"name": "p", "base": "m.yaml", "dataset": "d", "held_out": 1,
                                              "train": {"method": "sft"}, "max_tokens": 12})
    held = cfg.probe_options()
    assert (held.max_tokens, held.samples, held.temperatures) == (12, POSTTRAIN_LAYER.samples, [1.0])
    assert cfg.temperatures_probed == [1.0]
    # under the file, above the manifest: the manifest's max_tokens does not reach a post-training probe
    assert resolve([held, Options(max_tokens=99, top_p=0.3)]).max_tokens == 12
