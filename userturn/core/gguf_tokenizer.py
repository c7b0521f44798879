"""A GGUF model's tokenizer as an ordinary tokenizer directory, so the renderer needs no other flag.

`gguf_tokenizer_dir(path)` has transformers convert the file's metadata (vocabulary, special tokens, chat template)
once, gives a byte-level BPE vocabulary the pre-tokenizer its `tokenizer.ggml.pre` names as llama.cpp applies it
(`core.gguf_pretokenizers`: transformers keeps only some), and saves it in `cache_root()/gguf-tokenizers`, keyed by
the file's path, size and mtime, `CONVERSION` and the libraries' versions. Needs the `gguf` and `transformers`
packages, and torch, which transformers loads GGUF files with (`pip install 'userturn[cpu]'`). A file that is no
GGUF the library reads is refused in one line saying so in userturn's words (`gguf_file`).
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
NEEDED = ("gguf", "transformers", "torch")  # transformers reads GGUF metadata with torch
GGUF_VERSIONS = (2, 3)  # what the gguf library reads
HEADER_BYTES = 24  # magic, version, tensor count, metadata count


def gguf_file(name: str) -> Path:
    """The GGUF file a name points at (a path or a `pkg:` name); a UserError if it is not there or its header is
    not one the gguf library reads (`header_problem`)."""
    path = Path(resolve(name)).expanduser()
    if not path.is_file():
        raise UserError(f"GGUF file not found: {name}")
    problem = header_problem(path)
    if problem:
        raise UserError(f"{name}: {problem}")
    return path.resolve()


def header_problem(path: Path) -> str | None:
    """Why `path` is no GGUF file the gguf library can read, in words (cut short, not GGUF, an unknown version)."""
    with path.open("rb") as fh:
        head = fh.read(HEADER_BYTES)
    if head[:4] != b"GGUF":
        return f"not a GGUF file (it starts with {head[:4]!r}, a GGUF file with b'GGUF')"
    if len(head) < HEADER_BYTES:
        return f"the GGUF file is cut short ({len(head)} bytes, less than its {HEADER_BYTES}-byte header)"
    version = int.from_bytes(head[4:8], "little")
    if version not in GGUF_VERSIONS:
        return (f"GGUF version {version} is not one the gguf library reads "
                f"({', '.join(map(str, GGUF_VERSIONS))}): the file is damaged or from a newer llama.cpp")
    return None


def require_packages(name: str, what: str) -> None:
    """UserError naming the first of `NEEDED` that is not installed and the install that brings it."""
    for module in NEEDED:
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{name}: {what} needs the {module!r} package, not installed: pip install 'userturn[cpu]'")


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
    require_packages(name, "reading a GGUF tokenizer")
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
        raise UserError(f"{name}: cannot read the tokenizer from the GGUF metadata (the file may be damaged or cut "
                        f"short: compare its size with its source's; the library says: {reason})") from None
    if pre is not None:
        apply_pre_tokenizer(tokenizer.backend_tokenizer, pre)
    publish_folder(target, lambda staging: tokenizer.save_pretrained(str(staging)), MARKER, f"{path}\n")
    return target
