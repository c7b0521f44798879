"""The plan of a run: every planned key, the plan's own checks, resuming against a results file, the items still
to probe, and the partner of each item (for a perturbation that needs one)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.item_source import ItemSource, item_source
from userturn.client.probe.perturb import PartnerRing, needs_partner
from userturn.client.probe.progress import RunCounters
from userturn.client.probe.settings import ProbeSettings
from userturn.core.errors import UserError
from userturn.core.fingerprint import ConfigMismatch, check_unfingerprinted
from userturn.core.fingerprint import check_resume as check_config
from userturn.core.records import check_key_format, condition_suffix, key_prefix, key_prefixes, record_key
from userturn.core.resume_index import ResumeIndex

Plans = list[tuple[str, list[str], list[int]]]  # [(perturbation, its keys, positions of the keys not yet ok)]


class Plan:
    """What the run will do, and what of it is already done. `configs`/`fingerprints`: the configuration of each
    planned perturbation (`RequestBuilder.configs`); `partner_pool`: every item of the dataset (before --limit and
    shuffling), where partners come from, default `items`; `resume_hint`: the advice ending the message that refuses
    a mismatched results file."""

    def __init__(self, items: Iterable[DatasetItem], settings: ProbeSettings, *, out_path: str,
                 configs: Mapping[str, dict[str, Any]], fingerprints: Mapping[str, str],
                 partner_pool: Iterable[DatasetItem] | None = None, resume_hint: str = "use another --out") -> None:
        self.items: ItemSource = item_source(items)  # may stay on disk (JsonlItems)
        self.settings = settings
        self.out_path = out_path
        self.configs = configs
        self.fingerprints = fingerprints
        self.resume_hint = resume_hint
        self._pool: dict[str, DatasetItem] = {}
        self._ring: PartnerRing | None = None
        if needs_partner(settings.perturbations):  # only a partner-needing perturbation needs every item
            self._pool = {item.id: item for item in (partner_pool if partner_pool is not None else self.items)}
            for item in self.items:
                self._pool.setdefault(item.id, item)
            self._ring = PartnerRing(settings.seed, self._pool)

    @property
    def size(self) -> int:
        """How many samples are planned."""
        s = self.settings
        return len(self.items.ids) * len(s.perturbations) * len(s.temperatures) * s.samples

    # ----- planning -------------------------------------------------------------------------------------------
    def iter_keys(self) -> Iterator[str]:
        """Every planned sample's key, in run order (a generator: a run may plan millions)."""
        s = self.settings
        suffixes = [condition_suffix(t, k) for t in s.temperatures for k in range(s.samples)]
        for item_id in self.items.ids:
            for p in s.perturbations:
                prefix = key_prefix(s.model, s.dataset, item_id, p, s.mode)
                yield from (prefix + suffix for suffix in suffixes)

    def check(self) -> None:
        """No sample planned twice: the keys of one item are distinct, and so are the item ids."""
        s = self.settings
        ids = self.items.ids
        if not ids:
            return
        one = [record_key(s.model, s.dataset, ids[0], p, t, k, s.mode)
               for p in s.perturbations for t in s.temperatures for k in range(s.samples)]
        if len(set(one)) != len(one):
            raise UserError("the same sample is planned twice: repeated --temperature or --perturb values")
        if len(set(ids)) != len(ids):
            raise UserError("the same sample is planned twice: two items share an id")

    def check_resume(self, existing: ResumeIndex) -> None:
        """Refuse (ConfigMismatch, exit 2) when `existing` ok records of this model, dataset, mode and a planned
        perturbation were made with other settings, or lack a fingerprint and share a key with this run; also
        refuse a file whose keys are in the pre-schema-2 format (they could not be matched)."""
        if existing.old_schema is not None:
            check_key_format(existing.old_schema[0], self.out_path, existing.old_schema[1])
        missing = sorted(set(existing.missing_configs()) - set(self.fingerprints.values()))
        if missing:
            raise ConfigMismatch(f"{self.out_path} holds records of configuration {missing[0]} but no configuration "
                                 f"line for it, so its settings cannot be compared with this run's; "
                                 f"{self.resume_hint}")
        configs = existing.ok_configs
        for config in self.configs.values():
            check_config(configs, config, path=self.out_path, hint=self.resume_hint)
        if existing.unfingerprinted_keys:
            check_unfingerprinted(sorted(existing.unfingerprinted_keys), set(self.iter_keys()), path=self.out_path,
                                  hint=self.resume_hint)

    def unfinished(self, done: ResumeIndex, conditions: list[tuple[float, int]], counters: RunCounters
                   ) -> Iterator[tuple[DatasetItem, Plans]]:
        """(item, [(perturbation, its keys, positions of the keys not yet ok)]) in run order, less the items whose
        every key is already ok (counted as skipped in `counters`, never read: a dataset kept on disk parses only
        what is left)."""
        s = self.settings
        suffixes = [condition_suffix(t, k) for t, k in conditions]
        planned = len(s.perturbations) * len(suffixes)

        prefixes = [(p, key_prefixes(s.model, s.dataset, p, s.mode)) for p in s.perturbations]

        def unfinished() -> Iterator[tuple[int, Plans]]:
            for index, item_id in enumerate(self.items.ids):
                plans = []
                for perturbation, prefix in prefixes:
                    start = prefix(item_id)
                    keys = [start + suffix for suffix in suffixes]
                    plans.append((perturbation, keys, done.pending(keys)))
                if any(pending for _, _, pending in plans):
                    yield index, plans
                else:
                    counters.skipped += planned
                    counters.total -= planned

        return self.items.read_tagged(unfinished())

    def partners(self) -> dict[str, str]:
        """{item id: its partner's id} for the run's items that have one; empty when no perturbation needs one."""
        if self._ring is None:
            return {}
        return {item.id: p for item in self.items if (p := self._partner(item)) is not None}

    def pool_item(self, item_id: str) -> DatasetItem:
        """The item `item_id` of the partner pool (a partner may lie outside the run's items)."""
        return self._pool[item_id]

    def _partner(self, item: DatasetItem) -> str | None:
        """The item whose assistant turn a partner-needing perturbation puts in: the first after this one on the
        `SwapRing` of another query, of the same `meta.category` and, for dataset turns, with another assistant turn;
        None when none qualifies or no such perturbation is planned."""
        if self._ring is None:
            return None
        query = (item.meta or {}).get("query_id", item.id)
        category = (item.meta or {}).get("category")
        own = item.messages[-1].content if item.ends_with_assistant else None
        for other_id in self._ring.after(item.id):
            other = self._pool[other_id]
            if (other.meta or {}).get("query_id", other.id) == query or (
                    category is not None and (other.meta or {}).get("category") != category):
                continue
            if self.settings.assistant_from == "model":
                return other_id
            if other.ends_with_assistant and other.messages[-1].content != own:
                return other_id
        return None
