"""The files a chat template comes from: `tokenizer_config.json` and friends, read from a local folder, a GGUF
file's converted tokenizer, or the hub (small files only), into one `TokenizerFiles`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from userturn.core.errors import UserError
from userturn.core.packaged import is_gguf

TOKENIZER_FILES = (
    "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
    "special_tokens_map.json", "generation_config.json", "tokenizer.json",
)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
CACHE_SIZE = 4096


@dataclass
class TokenizerFiles:
    """The small files of a tokenizer that rendering needs (never weights)."""

    source: str
    config: dict[str, Any]
    chat_template_file: str | None = None  # chat_template.jinja (wins over tokenizer_config, as in transformers)
    chat_template_json: dict[str, Any] | None = None
    special_tokens_map: dict[str, Any] | None = None
    generation_config: dict[str, Any] | None = None
    tokenizer_json_path: Path | None = None
    tokenizer_json: dict[str, Any] | None = field(default=None, repr=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from exc
    return _read_json_cached(path.resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=16)
def _read_json_cached(path: Path, size: int, mtime_ns: int) -> dict[str, Any]:
    """Parsed JSON, kept per (file, size, mtime): tokenizer.json is ~10 MB and takes ~0.4 s to parse."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _files_from_paths(source: str, paths: Mapping[str, Path | None]) -> TokenizerFiles:
    config_path = paths.get("tokenizer_config.json")
    if config_path is None:
        raise UserError(f"{source}: no tokenizer_config.json (not a tokenizer directory)")
    tok_json = paths.get("tokenizer.json")
    template_path = paths.get("chat_template.jinja")
    return TokenizerFiles(
        source=source,
        config=_read_json(config_path),
        chat_template_file=template_path.read_text(encoding="utf-8") if template_path else None,
        chat_template_json=_read_json(p) if (p := paths.get("chat_template.json")) else None,
        special_tokens_map=_read_json(p) if (p := paths.get("special_tokens_map.json")) else None,
        generation_config=_read_json(p) if (p := paths.get("generation_config.json")) else None,
        tokenizer_json_path=tok_json,
        tokenizer_json=_read_tokenizer_json_head(tok_json) if tok_json else None,
    )


_MODEL_KEY = b'\n  "model": '  # tokenizers writes the (large) vocabulary last, at this indentation


def _read_tokenizer_json_head(path: Path) -> dict[str, Any]:
    """tokenizer.json without its `model` (the ~10 MB vocabulary): added tokens and post-processor are all we need.
    A file laid out differently is parsed whole."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4 << 20)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from exc
    cut = head.find(_MODEL_KEY)
    if cut > 0:
        prefix = head[:cut].rstrip()
        if prefix.endswith(b","):
            try:
                data = orjson.loads(prefix[:-1] + b"}")
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and "added_tokens" in data:
                return data
    return _read_json(path)


def _local_files(folder: Path) -> TokenizerFiles:
    if not folder.is_dir():
        raise UserError(f"tokenizer path {folder} is not a directory")
    paths = {name: folder / name for name in TOKENIZER_FILES if (folder / name).is_file()}
    return _files_from_paths(str(folder), paths)


HUB_PROBE_TIMEOUT = 3.0  # seconds the one reachability request of a hub tokenizer may take


def hub_unreachable(repo_id: str) -> str | None:
    """Why the hub cannot be reached, from one HEAD request without retries (`hf_hub_download` retries a refused
    connection for ~24 s), or None when it answers (even with an error: the download reports that) or when
    HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    if constants.HF_HUB_OFFLINE:
        return None
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "tokenizer_config.json"), timeout=HUB_PROBE_TIMEOUT,
                             retry_on_errors=False)
    except HfHubHTTPError:
        return None
    except Exception as exc:  # the hub client's transport errors (refused, DNS, timeout) share no base here
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    return None


def _hub_files(repo_id: str) -> TokenizerFiles:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    unreachable = hub_unreachable(repo_id)  # offline: the local cache only, no retries
    paths: dict[str, Path | None] = {}
    for name in TOKENIZER_FILES:
        try:
            paths[name] = Path(hf_hub_download(repo_id, name, local_files_only=unreachable is not None))
        except (EntryNotFoundError, LocalEntryNotFoundError) as exc:
            if name == "tokenizer_config.json":
                if unreachable is not None:
                    raise UserError(
                        f"hub id {repo_id}: the hub at {constants.ENDPOINT} is unreachable ({unreachable}) and the "
                        "tokenizer is not in the local cache; pass a local tokenizer directory or GGUF file, or "
                        "fetch it once online (HF_HUB_OFFLINE=1 then reads the cache without trying the hub)"
                    ) from None
                if isinstance(exc, LocalEntryNotFoundError):
                    raise UserError(
                        f"hub id {repo_id}: cannot download tokenizer_config.json (hub unreachable or HF_HUB_OFFLINE=1,"
                        " and not in the local cache); pass a local tokenizer directory instead") from exc
                raise UserError(f"hub id {repo_id}: no tokenizer_config.json in the repository") from exc
            paths[name] = None
        except GatedRepoError as exc:
            raise UserError(f"hub id {repo_id}: gated repository; accept its terms and set HF_TOKEN") from exc
        except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
            raise UserError(f"hub id {repo_id}: repository or revision not found on the hub") from exc
        except (HfHubHTTPError, OSError) as exc:
            raise UserError(f"hub id {repo_id}: cannot download {name}: {str(exc).splitlines()[0]}") from exc
    return _files_from_paths(repo_id, paths)


def read_tokenizer_files(name_or_path: str) -> TokenizerFiles:
    """Tokenizer files from a local directory, a GGUF file's metadata, or the HF hub (small files) for a repo id."""
    if is_gguf(name_or_path):  # a .gguf path or pkg:PACKAGE/file.gguf: tokenizer and template from its metadata
        from userturn.core.gguf_tokenizer import gguf_tokenizer_dir

        files = _local_files(gguf_tokenizer_dir(name_or_path))
        files.source = name_or_path
        return files
    path = Path(name_or_path).expanduser()
    if path.exists():
        return _local_files(path)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path
    if looks_like_path or not _REPO_ID.match(name_or_path):
        raise UserError(f"tokenizer directory not found: {name_or_path}")
    return _hub_files(name_or_path)
