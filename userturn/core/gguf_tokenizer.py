"""A GGUF model's tokenizer as an ordinary tokenizer directory, so the renderer needs no other flag.

`gguf_tokenizer_dir(path)` has transformers convert the file's metadata (vocabulary, special tokens, chat template)
once, gives a byte-level BPE vocabulary the pre-tokenizer its `tokenizer.ggml.pre` names as llama.cpp applies it
(`core.gguf_pretokenizers`: transformers keeps only some), and saves it in `cache_root()/gguf-tokenizers`, keyed by
the file's path, size and mtime, `CONVERSION` and the libraries' versions. Needs the `gguf` and `transformers`
packages (`pip install 'userturn[cpu]'`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from userturn.core.errors import UserError
from userturn.core.files import cache_root, publish_folder
from userturn.core.gguf_pretokenizers import apply_pre_tokenizer, pre_tokenizer_for
from userturn.core.packaged import resolve
from userturn.core.version import library_versions

MARKER = "userturn_gguf_source.txt"
CONVERSION = "llama.cpp-pre-tokenizer-1"  # part of the cache key: change it whenever the conversion changes
LIBRARIES = ("transformers", "tokenizers", "gguf")


def gguf_file(name: str) -> Path:
    """The GGUF file a name points at (a path or a `pkg:` name); a UserError if it is not there."""
    path = Path(resolve(name)).expanduser()
    if not path.is_file():
        raise UserError(f"GGUF file not found: {name}")
    return path.resolve()


def cache_key(path: Path) -> str:
    """What a converted folder depends on: the file (path, size, mtime), `CONVERSION` and the libraries' versions."""
    stat = path.stat()
    text = f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0{CONVERSION}\0{library_versions(LIBRARIES)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def gguf_metadata(path: Path, *keys: str) -> dict[str, Any]:
    """The scalar or string metadata `keys` of a GGUF file (absent keys left out)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    return {key: fields[key].contents() for key in keys if key in fields}


def gguf_tokenizer_dir(name: str) -> Path:
    """A tokenizer directory converted from the GGUF file `name` (cached; converted on first use): its word
    splitting is llama.cpp's for the file's `tokenizer.ggml.pre`, an unknown value a UserError naming it."""
    path = gguf_file(name)
    target = cache_root() / "gguf-tokenizers" / f"{path.stem}-{cache_key(path)}"
    if (target / MARKER).is_file():
        return target
    for module in ("gguf", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{name}: reading a GGUF tokenizer needs the {module!r} package: "
                            "pip install 'userturn[cpu]'")
    from transformers import AutoTokenizer

    try:
        meta = gguf_metadata(path, "tokenizer.ggml.model", "tokenizer.ggml.pre")
        pre = None
        if meta.get("tokenizer.ggml.model") == "gpt2":  # byte-level BPE: the only kind llama.cpp pre-tokenizes
            pre = pre_tokenizer_for(meta.get("tokenizer.ggml.pre"), name)  # an unknown name: before converting
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except UserError:
        raise
    except Exception as exc:  # an unreadable or unsupported file: one line naming it
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{name}: cannot read the tokenizer from the GGUF metadata: {reason}") from None
    if pre is not None:
        apply_pre_tokenizer(tokenizer.backend_tokenizer, pre)
    publish_folder(target, lambda staging: tokenizer.save_pretrained(str(staging)), MARKER, f"{path}\n")
    return target
