"""Datasets by name (`gsm8k`, `ifeval`, `mt-bench`, `healthbench`, `coval`) or a local JSONL path.

`load_dataset_spec("gsm8k:test", limit=100, shuffle_seed=0)` -> ("gsm8k", [DatasetItem, ...]).
Hub access goes through `client.data.loaders.hub.fetch_rows` only.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.lazy_dataset import JsonlItems, load_jsonl_lazy
from userturn.client.data.loaders import coval, gsm8k, healthbench, hub, ifeval, mt_bench
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, PackagedSource, RowError, RowMapper
from userturn.core.errors import UserError

BUILTINS: dict[str, BuiltinDataset] = {
    d.name: d for d in (gsm8k.DATASET, ifeval.DATASET, mt_bench.DATASET, healthbench.DATASET, coval.DATASET)
}


def parse_spec(spec: str) -> tuple[BuiltinDataset | None, str | None]:
    """(built-in dataset, split) for `NAME[:split]`; (None, None) for something that is not a built-in name."""
    name, _, split = spec.partition(":")
    dataset = BUILTINS.get(name.strip().lower())
    if dataset is None:
        return None, None
    return dataset, (split.strip() or None)


def _looks_like_path(spec: str) -> bool:
    path = Path(spec)
    return path.suffix in (".jsonl", ".json") or path.exists() or "/" in spec or "\\" in spec


def _rows(dataset: BuiltinDataset, source: HubSource | PackagedSource,
          split_name: str) -> tuple[Iterable[dict[str, Any]], str, RowMapper]:
    """(rows, where they come from, mapping): the hub split, else its packaged copy (said in one line)."""
    if isinstance(source, PackagedSource):
        return source.rows(), source.where, source.map_row or dataset.map_row
    try:
        return (hub.fetch_rows(source.repo, source.config, source.split, data_files=source.data_files), source.repo,
                dataset.map_row)
    except UserError as exc:
        packaged = dataset.offline.get(split_name)
        if packaged is None:
            raise
        try:
            rows = packaged.rows()
        except UserError as missing:
            raise UserError(f"{exc}; the packaged copy failed too: {missing}") from None
        print(f"userturn: {dataset.display_name(split_name)}: hub copy unavailable ({str(exc)[:200]}); using the "
              f"packaged copy from {packaged.where}", file=sys.stderr, flush=True)
        return rows, packaged.where, packaged.map_row or dataset.map_row


def load_builtin(dataset: BuiltinDataset, split: str | None) -> list[DatasetItem]:
    """Every item of one split (rows the mapping skips are left out). A malformed row is a UserError."""
    split_name = split or dataset.default_split
    rows, where, map_row = _rows(dataset, dataset.source(split), split_name)
    items: list[DatasetItem] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        try:
            item = map_row(row, index, split_name)
        except RowError as exc:
            raise UserError(f"{dataset.name} ({where}) row {index}: {exc}") from None
        if item is None:
            continue
        item.located(f"{dataset.name} ({where}) row {index}")
        if item.id in seen:
            raise UserError(f"{dataset.name} ({where}) row {index}: duplicate id {item.id!r} "
                            f"(first at row {seen[item.id]})")
        seen[item.id] = index
        items.append(item)
    if not items:
        raise UserError(f"{dataset.display_name(split)}: no items")
    return items


def select(items: Sequence[DatasetItem], *, limit: int | None, shuffle_seed: int | None) -> Sequence[DatasetItem]:
    """Deterministic shuffle (when a seed is given), then the first `limit` items."""
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (got {limit})")
    if isinstance(items, JsonlItems):  # a file kept on disk: shuffle and cut its index, parse nothing
        items = items.shuffled(shuffle_seed) if shuffle_seed is not None else items
    elif shuffle_seed is not None:
        items = list(items)
        random.Random(shuffle_seed).shuffle(items)
    return items[:limit] if limit is not None else items


def load_dataset_spec(spec: str, *, limit: int | None,
                      shuffle_seed: int | None) -> tuple[str, Sequence[DatasetItem]]:
    """A built-in `NAME[:split]` or a local JSONL path -> (display name, items)."""
    dataset, split = parse_spec(spec)
    if dataset is not None:
        return dataset.display_name(split), select(load_builtin(dataset, split), limit=limit,
                                                   shuffle_seed=shuffle_seed)
    if _looks_like_path(spec):
        path = Path(spec)
        items = load_jsonl_lazy(path, limit=limit if shuffle_seed is None else None)
        return path.stem, select(items, limit=limit, shuffle_seed=shuffle_seed)
    raise UserError(f"unknown dataset {spec!r}: not a file, and not a built-in ({', '.join(BUILTINS)})")

def load_items(spec: str, *, limit: int | None, shuffle_seed: int | None, whole: bool = False,
               ) -> tuple[str, Sequence[DatasetItem], Sequence[DatasetItem] | None]:
    """A local JSONL file or a built-in dataset name -> (dataset name, items, every item when `whole`: `swap`
    takes its partners from them, so --limit and --shuffle-seed never change them)."""
    if not whole:
        return (*load_dataset_spec(spec, limit=limit, shuffle_seed=shuffle_seed), None)
    name, every = load_dataset_spec(spec, limit=None, shuffle_seed=None)
    return name, select(every, limit=limit, shuffle_seed=shuffle_seed), every


__all__ = ["BUILTINS", "load_builtin", "load_dataset_spec", "load_items", "parse_spec", "select"]
