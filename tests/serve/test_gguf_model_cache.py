"""The GGUF model converted once and cached on disk: hit on a second start, keyed by the file's bytes, atomic."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from gguf_fixture import write_tiny_gguf

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from userturn.serve.gguf_model_cache import MARKER, cache_key, convert_gguf, converted_model_dir


@pytest.fixture
def tiny_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path / "cache"))
    return write_tiny_gguf(tmp_path / "tiny.gguf", weights=True)


def test_second_start_hits_and_loads_the_same_weights(tiny_gguf: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    calls: list[Path] = []

    def counting(path: Path, dtype: Any, out: Path) -> None:
        calls.append(out)
        convert_gguf(path, dtype, out)

    first, hit = converted_model_dir(tiny_gguf, torch.float32, "torch.float32", convert=counting)
    assert not hit and len(calls) == 1
    assert first.parent == tmp_path / "cache" / "gguf-models" and (first / MARKER).is_file()
    again, hit = converted_model_dir(tiny_gguf, torch.float32, "torch.float32", convert=counting)
    assert (again, hit, len(calls)) == (first, True, 1), "the second start converts nothing"
    direct = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    cached = AutoModelForCausalLM.from_pretrained(str(first))
    ids = torch.tensor([[5, 6, 7, 33, 34]])
    with torch.inference_mode():
        assert torch.equal(direct(ids).logits, cached(ids).logits)
    assert [p.name for p in first.parent.iterdir()] == [first.name], "no staging folder left behind"


def test_key_follows_the_bytes_and_the_dtype(tiny_gguf: Path, tmp_path: Path) -> None:
    key = cache_key(tiny_gguf, "torch.float32")
    assert cache_key(tiny_gguf, "torch.bfloat16") != key
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    assert cache_key(copy, "torch.float32") == key, "the same bytes elsewhere share the conversion"
    copy.write_bytes(tiny_gguf.read_bytes() + b"\0")
    assert cache_key(copy, "torch.float32") != key


def test_two_engines_starting_at_once_share_one_folder(tiny_gguf: Path) -> None:
    import torch

    both_converting = threading.Barrier(2)
    one_load = threading.Lock()  # engines are processes; transformers patches torch process-wide while it loads
    results: list[tuple[Path, bool]] = []

    def slow(path: Path, dtype: Any, out: Path) -> None:
        with one_load:
            convert_gguf(path, dtype, out)
        both_converting.wait(timeout=30)  # neither has renamed yet: both really convert

    threads = [threading.Thread(target=lambda: results.append(
        converted_model_dir(tiny_gguf, torch.float32, "torch.float32", convert=slow))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 2 and results[0][0] == results[1][0]
    folder = results[0][0]
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "the loser's copy is removed"
    assert (folder / MARKER).is_file() and (folder / "model.safetensors").is_file()


def test_a_failed_conversion_leaves_nothing(tiny_gguf: Path, tmp_path: Path) -> None:
    import torch

    def broken(path: Path, dtype: Any, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        converted_model_dir(tiny_gguf, torch.float32, "torch.float32", convert=broken)
    assert list((tmp_path / "cache" / "gguf-models").iterdir()) == []


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_cached_model_has_the_logits_of_the_gguf_file(arch: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3 included: its `embed_scale` (a buffer no checkpoint stores) is built, not left on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    from userturn.serve.gguf_model_cache import cached_model

    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(tmp_path / f"{arch}.gguf", weights=True, arch=arch)
    model, folder, hit = cached_model(gguf, torch.float32, "torch.float32")
    direct = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf.name, dtype=torch.float32).eval()
    assert not hit and type(model) is type(direct) and (folder / MARKER).is_file()
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    ids = torch.tensor([[5, 6, 7, 33, 34, 7, 6, 5]])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, direct(ids).logits)
    assert model.generation_config.eos_token_id == direct.generation_config.eos_token_id
    assert cached_model(gguf, torch.float32, "torch.float32")[1:] == (folder, True)


def test_a_cache_that_does_not_load_is_never_left_behind(tiny_gguf: Path, tmp_path: Path) -> None:
    import torch

    from userturn.serve.gguf_model_cache import cached_model

    folder, _ = converted_model_dir(tiny_gguf, torch.float32, "torch.float32")
    (folder / "model.safetensors").write_bytes(b"damaged")  # a cached folder that fails: converted once more
    model, again, hit = cached_model(tiny_gguf, torch.float32, "torch.float32")
    assert (again, hit) == (folder, False) and model is not None

    def no_weights(path: Path, dtype: Any, out: Path) -> None:  # a conversion whose folder cannot load
        convert_gguf(path, dtype, out)
        (out / "model.safetensors").unlink()

    fresh = tiny_gguf.with_name("other.gguf")
    fresh.write_bytes(tiny_gguf.read_bytes() + b"\0" * 32)  # other bytes: another cache folder
    with pytest.raises(OSError):
        cached_model(fresh, torch.float32, "torch.float32", convert=no_weights)
    assert sorted(p.name for p in (tmp_path / "cache" / "gguf-models").iterdir()) == [folder.name]


def test_the_hash_is_remembered_until_the_file_changes(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from userturn.serve import gguf_model_cache

    hashed: list[Path] = []
    real = gguf_model_cache.file_sha256

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(gguf_model_cache, "file_sha256", counting)
    key = cache_key(tiny_gguf, "torch.float32")
    assert cache_key(tiny_gguf, "torch.float32") == key and len(hashed) == 1, "a second start hashes nothing"
    data = tiny_gguf.read_bytes()
    tiny_gguf.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, new bytes
    assert cache_key(tiny_gguf, "torch.float32") != key and len(hashed) == 2


@pytest.mark.slow
def test_the_embedded_engine_serves_a_gemma3_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine process starts on a Gemma 3 GGUF (it exited 4 when `embed_scale` stayed on the meta device) and
    answers a completion; its converted folder is in the cache for the next start."""
    import httpx

    from userturn.serve.launcher import launch
    from userturn.serve.manifest import parse_manifest

    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(tmp_path / "gemma.gguf", weights=True, arch="gemma3")
    manifest = parse_manifest({"engine": "transformers", "model": str(gguf), "served_model_name": "gemma",
                               "startup_timeout": 300, "extra_args": ["--threads", "1"]})
    with launch(manifest, log_dir=tmp_path / "logs", status=None) as server, \
            httpx.Client(base_url=server.base_urls[0], timeout=60, trust_env=False) as client:
        reply = client.post("/completions", json={"model": "gemma", "prompt": "hello", "max_tokens": 4,
                                                  "temperature": 0})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4
    assert [p.name[:6] for p in (tmp_path / "cache" / "gguf-models").iterdir()] == ["gemma-"]
