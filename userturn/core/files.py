"""Reading YAML and JSONL input files with errors that name the file and line (one reader each)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from userturn.core.errors import UserError


def read_yaml_mapping(path: str | Path, kind: str = "file", what: str = "keys") -> dict[str, Any]:
    """A YAML file (a `kind`: "manifest", "experiment file") whose top level is a mapping of `what`. Every problem
    is one UserError naming the file (and the line of a syntax error): missing or unreadable, invalid YAML, or
    another top-level type."""
    import yaml  # loaded by the commands that read YAML only

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: {kind} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a mapping of {what} at the top level, got {type(data).__name__}")
    return data


def json_error(exc: orjson.JSONDecodeError) -> str:
    """The first line of a JSON decoding error (orjson's messages can span several)."""
    return str(exc).splitlines()[0]


def jsonl_objects(path: str | Path, max_line_bytes: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file; a line that is not a JSON object (or is
    longer than `max_line_bytes`) is a UserError naming `path:line`."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except FileNotFoundError:
        raise UserError(f"{p}: file not found") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read: {exc.strerror}") from None
    with fh:
        for number, raw in enumerate(fh, start=1):
            if max_line_bytes is not None and len(raw) > max_line_bytes:
                raise UserError(f"{p}:{number}: line longer than {max_line_bytes} bytes")
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise UserError(f"{p}:{number}: invalid JSON ({json_error(exc)})") from None
            if not isinstance(obj, dict):
                raise UserError(f"{p}:{number}: expected a JSON object, got {type(obj).__name__}")
            yield number, obj


def cache_root() -> Path:
    """Where userturn keeps derived files: `$USERTURN_CACHE_DIR`, else `$XDG_CACHE_HOME/userturn`, else
    `~/.cache/userturn`."""
    if root := os.environ.get("USERTURN_CACHE_DIR"):
        return Path(root).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "userturn"


def file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def publish_folder(target: Path, fill: Callable[[Path], object], marker: str, marker_text: str) -> None:
    """Make the cache folder `target`: `fill` a staging folder beside it, write `marker` last, rename it into place.
    Of two processes making the same folder at once the first rename wins and the other's copy is dropped."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        fill(staging)
        (staging / marker).write_text(marker_text, encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
