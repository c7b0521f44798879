"""Controls that need no labels and no generation (`--controls`, an experiment's `controls: true`): for every item
whose dataset carries the human's real next turn (`meta.second_turn`, as MT-Bench does) and an assistant turn, two
records beside the model's:

* model `human`: the item's own human next turn, after the conversation it was written for (a judge that reads
  the conversation calls nearly all of them genuine follow-ups);
* model `human-shuffled`: another item's human next turn after this conversation, the other item drawn by a
  seeded derangement of the items that carry one (Sattolo's algorithm: one random cycle, so never the item's own;
  a good judge almost never calls these genuine).

They are judged like any record and form rows of their own (their model names differ from every probed model's).
Their key is the probe's (`record_key`) with the control's model name, perturbation `none`, temperature 0 and
sample 0: one control record per item, whatever the run's temperatures and samples; a rerun keeps the ok ones.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.core.fingerprint import check_resume, fingerprint
from userturn.core.records import ConfigLine, ProbeRecord, RunInfo, record_key
from userturn.core.resume_index import ResumeIndex

HUMAN, SHUFFLED = "human", "human-shuffled"
CONTROL_MODELS = (HUMAN, SHUFFLED)
SECOND_TURN = "second_turn"  # the meta key of the dataset's human-written next user turn
PARTNER = "control_partner"  # meta key of a shuffled control: the item whose human turn it shows


def human_turn(item: DatasetItem) -> str | None:
    """The item's human next turn, when it has one and an assistant turn it followed."""
    turn = (item.meta or {}).get(SECOND_TURN)
    return turn if isinstance(turn, str) and turn.strip() and item.ends_with_assistant else None


def derangement(ids: list[str], seed: int) -> dict[str, str]:
    """{id: another id}: a seeded random cyclic permutation of `ids` in sorted order (Sattolo 1986), so no id maps
    to itself; empty for fewer than two ids."""
    order = sorted(ids)
    if len(order) < 2:
        return {}
    cycle = list(order)
    rng = random.Random(f"controls\x1f{seed}")
    for i in range(len(cycle) - 1, 0, -1):
        j = rng.randrange(i)  # j < i: Sattolo's variant of Fisher-Yates gives a single cycle
        cycle[i], cycle[j] = cycle[j], cycle[i]
    return {cycle[i]: cycle[(i + 1) % len(cycle)] for i in range(len(cycle))}


class Controls:
    """The control records of one run's items (`dataset`, `mode`, the run `seed`), their configurations and what a
    results file already holds of them."""

    def __init__(self, items: Iterable[DatasetItem], *, dataset: str, mode: str, seed: int) -> None:
        self.dataset, self.mode, self.seed = dataset, mode, seed
        self.turns = {item.id: turn for item in items if (turn := human_turn(item)) is not None}
        self.partners = derangement(list(self.turns), seed)
        self.configs: dict[str, dict[str, Any]] = {
            HUMAN: {"model": HUMAN, "dataset": dataset, "mode": mode, "perturbation": "none",
                    "control": "the item's own human next turn (meta.second_turn)"},
            SHUFFLED: {"model": SHUFFLED, "dataset": dataset, "mode": mode, "perturbation": "none",
                       "control": "another item's human next turn (seeded derangement)", "seed": seed},
        }
        self.fingerprints = {name: fingerprint(config) for name, config in self.configs.items()}

    def key(self, model: str, item_id: str) -> str:
        return record_key(model, self.dataset, item_id, "none", 0.0, 0, self.mode)

    def keys(self) -> list[str]:
        """Every control key of the run."""
        return [self.key(HUMAN, i) for i in self.turns] + [self.key(SHUFFLED, i) for i in self.partners]

    def config_lines(self, run: RunInfo | None) -> dict[str, ConfigLine]:
        return {self.fingerprints[name]: ConfigLine(fingerprint=self.fingerprints[name], config=config, run=run)
                for name, config in self.configs.items()}

    def check_resume(self, existing: ResumeIndex, *, path: str, hint: str) -> None:
        """Refuse a file whose control records were made with another seed (ConfigMismatch, exit 2)."""
        for config in self.configs.values():
            check_resume(existing.ok_configs, config, path=path, hint=hint)

    def records(self, items: Iterable[DatasetItem], existing: ResumeIndex) -> Iterator[ProbeRecord]:
        """The control records not yet ok in the results file, item by item (each item's conversation as the
        dataset gives it)."""
        for item in items:
            if item.id not in self.turns:
                continue
            shown: list[tuple[str, str, str | None]] = [(HUMAN, self.turns[item.id], None)]
            if item.id in self.partners:
                partner = self.partners[item.id]
                shown.append((SHUFFLED, self.turns[partner], partner))
            for model, turn, other in shown:
                key = self.key(model, item.id)
                if existing.is_ok(key):
                    continue
                meta = dict(item.meta or {})
                if other is not None:
                    meta[PARTNER] = other
                yield ProbeRecord(key=key, status="ok", config_fingerprint=self.fingerprints[model], model=model,
                                  dataset=self.dataset, item_id=item.id, mode=self.mode,
                                  perturbation="none", temperature=0.0, sample=0, seed=0,
                                  messages=list(item.messages), assistant_source="dataset", user_turn=turn,
                                  reference_answer=item.answer, meta=meta)
