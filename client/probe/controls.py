"""Controls that need no labels and no generation (`--controls`, an experiment's `controls: true`): for every item
whose dataset carries the human's real next turn (`meta.second_turn`, as MT-Bench does), two records beside the
model's, each after the assistant turn the run probes the item with (the dataset's, or the model's answer where the
model writes it: then the answer of the first model run on the file, named in `meta.assistant_model`, since the
control records are shared by every model of a results file):

* model `human`: the item's own human next turn, after the conversation it was written for (a judge that reads
  the conversation calls nearly all of them genuine follow-ups);
* model `human-shuffled`: another item's human next turn after this conversation, the other item drawn by a
  seeded derangement of the dataset's items that carry one (Sattolo's algorithm: one random cycle, so never the
  item's own; a good judge almost never calls these genuine).

They are judged like any record and form rows of their own (their model names differ from every probed model's).
Their key is the probe's (`record_key`) with the control's model name, perturbation `none`, temperature 0 and
sample 0: one control record per item, whatever the run's temperatures and samples; a rerun keeps the ok ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.core.fingerprint import check_resume, fingerprint
from userturn.core.records import ConfigLine, Message, ProbeRecord, RunInfo, record_key
from userturn.core.resume_index import ResumeIndex

HUMAN, SHUFFLED = "human", "human-shuffled"
CONTROL_MODELS = (HUMAN, SHUFFLED)
SECOND_TURN = "second_turn"  # the meta key of the dataset's human-written next user turn
PARTNER = "control_partner"  # meta key of a shuffled control: the item whose human turn it shows
ANSWERED_BY = "assistant_model"  # meta key: the model whose answer the control's conversation ends with


def human_turn(item: DatasetItem) -> str | None:
    """The item's human next turn, when it has one."""
    turn = (item.meta or {}).get(SECOND_TURN)
    return turn if isinstance(turn, str) and turn.strip() else None


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
        """`items`: every item of the dataset where the run has them (before --limit, shuffling and sharding, so
        the pairs are the same in every slice of a run), else the run's own; the records are the run's items'."""
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
        self.without_answer = 0  # items with a human turn but no assistant turn to show it after

    def problem(self) -> str | None:
        """What kept items from getting control records, in words; None when nothing did."""
        if not self.turns:
            return f"no item of {self.dataset} carries a human next turn (meta.second_turn): no control records"
        if self.without_answer:
            return (f"{self.without_answer} items of {self.dataset} with a human next turn have no assistant turn to "
                    "show it after (their answer failed): no control records for them")
        return None

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

    def records(self, items: Iterable[DatasetItem], existing: ResumeIndex,
                conversation: Callable[[DatasetItem], tuple[list[Message], str, str | None] | None],
                ) -> Iterator[ProbeRecord]:
        """The control records not yet ok in the results file, item by item. `conversation(item)`: (the messages
        ending with the assistant turn the run probes the item with, its source, the model that wrote it or None),
        or None where the item has none (no control record for it)."""
        for item in items:
            if item.id not in self.turns:
                continue
            probed = conversation(item)
            if probed is None:
                self.without_answer += 1
                continue
            messages, source, answered_by = probed
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
                if answered_by is not None:
                    meta[ANSWERED_BY] = answered_by
                yield ProbeRecord(key=key, status="ok", config_fingerprint=self.fingerprints[model], model=model,
                                  dataset=self.dataset, item_id=item.id, mode=self.mode,
                                  perturbation="none", temperature=0.0, sample=0, seed=0,
                                  messages=list(messages), assistant_source=source,
                                  user_turn=turn,
                                  reference_answer=item.answer, meta=meta)
