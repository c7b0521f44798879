"""The one place userturn touches the Hugging Face hub (tests replace `fetch_rows`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from userturn.core.errors import UserError


@contextlib.contextmanager
def _quiet_hub_logs() -> Iterator[None]:
    """The hub client logs each failed HTTP try as a warning; the one-line error below says it instead."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def fetch_rows(repo: str, config: str | None, split: str, *, data_files: str | None = None) -> Iterable[dict[str, Any]]:
    """Rows of one hub dataset split, via `datasets.load_dataset` (cached); any failure is one UserError line."""
    try:
        import datasets
    except ImportError:
        raise UserError("built-in datasets need the `datasets` package: pip install 'userturn[datasets]'") from None
    where = f"{repo}" + (f" ({config})" if config else "") + f" split {split!r}"
    try:
        with _quiet_hub_logs():
            ds = datasets.load_dataset(repo, config, split=split, data_files=data_files)
    except Exception as exc:  # the library raises many unrelated types; all are fatal
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"could not load {where} from the Hugging Face hub: {reason}") from None
    return (dict(row) for row in ds)
