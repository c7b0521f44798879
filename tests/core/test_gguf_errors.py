"""A GGUF that cannot be read is refused in one line in userturn's words (not the library's), and a missing package
that reading one needs, torch included, is named with the install that brings it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from userturn.core import gguf_tokenizer
from userturn.core.errors import UserError
from userturn.core.gguf_tokenizer import gguf_file, gguf_tokenizer_dir

HEADER_V3 = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)


@pytest.mark.parametrize(("data", "why"), [
    (b"\x89PNG\r\n\x1a\n" + bytes(40), r"not a GGUF file \(it starts with b'\\x89PNG', a GGUF file with b'GGUF'\)"),
    (b"GGUF\x03\x00", r"the GGUF file is cut short \(6 bytes, less than its 24-byte header\)"),
    (b"GGUF" + (2021161080).to_bytes(4, "little") + bytes(16),
     r"GGUF version 2021161080 is not one the gguf library reads \(2, 3\): the file is damaged"),
])
def test_an_unreadable_gguf_is_refused_in_one_line(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    with pytest.raises(UserError, match=rf"^{path}: {why}") as caught:
        gguf_file(str(path))
    assert "\n" not in str(caught.value)
    (tmp_path / "ok.gguf").write_bytes(HEADER_V3)  # a header the library reads passes
    assert gguf_file(str(tmp_path / "ok.gguf")) == (tmp_path / "ok.gguf").resolve()


def test_a_missing_torch_is_named_with_the_install(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(HEADER_V3)
    monkeypatch.setattr(gguf_tokenizer, "cache_root", lambda: tmp_path / "cache")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(UserError, match=rf"^{path}: reading a GGUF tokenizer needs the 'torch' package, not "
                                        r"installed: pip install 'userturn\[cpu\]'$"):
        gguf_tokenizer_dir(str(path))
