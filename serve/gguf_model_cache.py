"""A GGUF model de-quantised once (transformers takes 14-38 s per load for SmolLM2-135M), then loaded in seconds.

The checkpoint lives in `cache_root()/gguf-models/<stem>-<key>`, the key hashing the file's sha256, the dtype and
the library versions. The sha256 is remembered in `gguf-hashes/` under the file's (size, mtime, ctime, inode).
Folders are staged and renamed into place: of two engines converting at once the first rename wins. A folder that
does not load is removed (`cached_model`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from userturn.core.files import cache_root, file_sha256, publish_folder
from userturn.core.version import library_versions

MARKER = "userturn_gguf_model.txt"
LIBRARIES = ("torch", "transformers", "gguf", "safetensors")


def remembered_sha256(path: Path) -> str:
    """The file's sha256, hashed only when no record for its path matches its (size, mtime, ctime, inode)."""
    st = path.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    resolved = str(path.resolve())
    record = cache_root() / "gguf-hashes" / f"{hashlib.sha256(resolved.encode()).hexdigest()[:16]}.json"
    try:
        known = json.loads(record.read_text(encoding="utf-8"))
        if known["path"] == resolved and known["stat"] == stamp:
            return str(known["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no record, or a damaged one: hash the file
    sha = file_sha256(path)
    record.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{record.name}-", dir=record.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"path": resolved, "stat": stamp, "sha256": sha}, fh)
    os.replace(staging, record)  # atomic: a concurrent reader sees the old record or the new one
    return sha


def cache_key(path: Path, dtype: str) -> str:
    """What the converted folder depends on: the file's bytes, the dtype and the library versions."""
    text = f"{remembered_sha256(path)}\0{dtype}\0{library_versions(LIBRARIES)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def convert_gguf(path: Path, dtype: Any, out: Path) -> None:
    """De-quantise `path` with transformers and save it as an ordinary checkpoint folder."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    # `save_pretrained` refuses a model loaded from GGUF (it counts as quantised); its tensors are plain now
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))


def converted_model_dir(path: Path, dtype: Any, dtype_name: str,
                        convert: Callable[[Path, Any, Path], None] = convert_gguf) -> tuple[Path, bool]:
    """The checkpoint folder converted from the GGUF file `path`, and whether it was already cached."""
    target = cache_root() / "gguf-models" / f"{path.stem}-{cache_key(path, dtype_name)}"
    if (target / MARKER).is_file():
        return target, True
    publish_folder(target, lambda staging: convert(path, dtype, staging), MARKER,
                   f"{path}\n{dtype_name}\n{library_versions(LIBRARIES)}\n")
    return target, False


def load_converted(folder: Path, dtype: Any) -> Any:
    """The model in a folder `converted_model_dir` wrote, with `from_pretrained` (which builds every buffer the
    checkpoint does not store: rotary tables, Gemma's `embed_scale`)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).eval()


def cached_model(path: Path, dtype: Any, dtype_name: str,
                 convert: Callable[[Path, Any, Path], None] = convert_gguf) -> tuple[Any, Path, bool]:
    """(model, its converted folder, whether the folder was cached) for the GGUF file `path`. A folder that does not
    load is removed, never left to fail the next start; one from the cache is converted once more."""
    for fresh_try in (False, True):
        folder, hit = converted_model_dir(path, dtype, dtype_name, convert)
        try:
            return load_converted(folder, dtype), folder, hit
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)
            if not hit or fresh_try:
                raise
    raise AssertionError("unreachable")
