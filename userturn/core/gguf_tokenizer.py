"""A GGUF model's tokenizer as an ordinary tokenizer directory, so the renderer needs no other flag.

`gguf_tokenizer_dir(path)` has transformers convert the file's metadata (vocabulary, special tokens, chat template)
once and saves it in `cache_root()/gguf-tokenizers`, keyed by the file's path, size and mtime. Needs the `gguf` and
`transformers` packages (`pip install 'userturn[cpu]'`).
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from userturn.core.errors import UserError
from userturn.core.files import cache_root, publish_folder
from userturn.core.packaged import resolve

MARKER = "userturn_gguf_source.txt"


def gguf_file(name: str) -> Path:
    """The GGUF file a name points at (a path or a `pkg:` name); a UserError if it is not there."""
    path = Path(resolve(name)).expanduser()
    if not path.is_file():
        raise UserError(f"GGUF file not found: {name}")
    return path.resolve()


def gguf_tokenizer_dir(name: str) -> Path:
    """A tokenizer directory converted from the GGUF file `name` (cached; converted on first use)."""
    path = gguf_file(name)
    stat = path.stat()
    digest = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache_root() / "gguf-tokenizers" / f"{path.stem}-{digest}"
    if (target / MARKER).is_file():
        return target
    for module in ("gguf", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{name}: reading a GGUF tokenizer needs the {module!r} package: "
                            "pip install 'userturn[cpu]'")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:  # an unreadable or unsupported file: one line naming it
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{name}: cannot read the tokenizer from the GGUF metadata: {reason}") from None
    publish_folder(target, lambda staging: tokenizer.save_pretrained(str(staging)), MARKER, f"{path}\n")
    return target
