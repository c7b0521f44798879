"""The judge measured against people: gold labels (`judges/gold.py`) matched to judged records by key, per judge
panel, as a 2 x 2 table on the one question the headline rate asks (genuine follow-up or not).

One gold label per key: the majority of its labellers' answers on that question (each labeller's last answer,
`read_gold`); a tie (two labellers who disagree) leaves the key out, counted as `disputed`. A gold key counts for a
panel when the last record line of that key (per configuration, as the report counts) was labelled by that panel;
a record labelled by the rules alone counts for every panel (the rules label before any judge is asked, the same
way for every panel), as it does in the panel's rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from userturn.core.taxonomy import is_followup
from userturn.judges.agreement import cohen_kappa, fleiss_kappa
from userturn.judges.gold import GoldLine, read_gold
from userturn.report.scan import Scan, checked_lines, row_and_outcome
from userturn.report.stats import wilson_interval

YES, NO = "genuine_followup", "other"
Panel = tuple[str, ...]  # a row's `judge_panel` (judge@prompt-sha256-prefix, sorted); () for the rules alone


class Calibration(BaseModel):
    """How one judge panel's labels match the gold labels, on genuine_followup vs the rest (`--json`'s
    `calibration`)."""

    panel: list[str] = Field(description="the judge panel (as the row's judge_panel); [] for the rules alone")
    n_gold: int = Field(description="gold keys with a label from this panel")
    true_positives: int = Field(description="gold genuine, judge genuine")
    false_negatives: int = Field(description="gold genuine, judge not")
    false_positives: int = Field(description="gold not, judge genuine")
    true_negatives: int = Field(description="gold not, judge not")
    base_rate: float | None = Field(description="share of the n_gold keys that are genuine follow-ups by gold")
    sensitivity: float | None = Field(description="true_positives / gold genuine (null without a gold genuine)")
    specificity: float | None = Field(description="true_negatives / gold not genuine (null without one)")
    sensitivity_ci: list[float] | None = Field(description="Wilson 95% interval of the sensitivity")
    specificity_ci: list[float] | None = Field(description="Wilson 95% interval of the specificity")
    kappa: float | None = Field(description="Cohen's kappa of judge vs gold on genuine vs not")
    labellers: list[str] = Field(description="the people whose answers make the gold labels")
    labeller_kappa: float | None = Field(description="the labellers' own kappa on genuine vs not (Cohen's for two, "
                                                     "Fleiss' for more, over keys all of them labelled)")
    labeller_items: int = Field(description="keys all labellers labelled (labeller_kappa's items)")
    disputed: int = Field(description="gold keys left out: their labellers tied")

    @property
    def youden(self) -> float | None:
        """Se + Sp - 1 (Youden's J): 0 for a judge no better than chance."""
        if self.sensitivity is None or self.specificity is None:
            return None
        return self.sensitivity + self.specificity - 1


class GoldSet(BaseModel):
    """The gold labels of the `--gold` files, one per key, and how the labellers agree."""

    labels: dict[str, bool] = Field(description="key -> genuine follow-up by gold")
    labellers: list[str]
    labeller_kappa: float | None
    labeller_items: int
    disputed: int


def gold_set(answers: Mapping[tuple[str, str], GoldLine]) -> GoldSet:
    """One gold label per key by majority of its labellers (a tie leaves the key out), and the labellers' kappa."""
    by_key: dict[str, dict[str, str]] = defaultdict(dict)
    for (key, labeller), line in answers.items():
        by_key[key][labeller] = YES if is_followup(line.label) else NO
    labels: dict[str, bool] = {}
    disputed = 0
    for key, votes in by_key.items():
        counts = Counter(votes.values())
        if counts[YES] == counts[NO]:
            disputed += 1
        else:
            labels[key] = counts[YES] > counts[NO]
    labellers = sorted({labeller for _, labeller in answers})
    shared = [[votes[name] for name in labellers] for votes in by_key.values() if len(votes) == len(labellers)]
    kappa = None
    if len(labellers) == 2 and shared:
        kappa = cohen_kappa([row[0] for row in shared], [row[1] for row in shared])
    elif len(labellers) > 2 and shared:
        kappa = fleiss_kappa(shared)
    return GoldSet(labels=labels, labellers=labellers, labeller_kappa=kappa,
                   labeller_items=len(shared) if len(labellers) > 1 else 0, disputed=disputed)


def read_gold_set(paths: Iterable[str | Path]) -> GoldSet:
    """`gold_set` of the gold files read in order (UserError naming file:line for a bad line)."""
    return gold_set(read_gold(Path(p) for p in paths))


def judge_labels(results: Sequence[str | Path], keys: set[str]) -> tuple[dict[Panel, dict[str, bool]], set[str]]:
    """({panel: {key: judge says genuine}}, keys found in the results) over the last labelled line per key and
    configuration of the records whose key is in `keys` (one streaming pass)."""
    last: dict[tuple[str, str | None], tuple[Panel, str | None]] = {}
    found: set[str] = set()
    for _, _, d, _, _ in checked_lines(results, Scan()):
        key = d["key"]
        if key not in keys:
            continue
        found.add(key)
        row, outcome = row_and_outcome(d)
        panel = tuple(f"{judge}@{sha[:12]}" if sha else judge for judge, sha in row.panel)
        last[(key, row.fingerprint)] = (panel, outcome.label)
    labels: dict[Panel, dict[str, bool]] = defaultdict(dict)
    for (key, _), (panel, label) in last.items():
        if label is not None:
            labels[panel][key] = is_followup(label)
    rules = labels.pop((), {})
    for panel in list(labels):
        labels[panel] = {**rules, **labels[panel]}
    if rules:
        labels[()] = rules
    return dict(labels), found


def calibration(panel: Panel, judged: Mapping[str, bool], gold: GoldSet) -> Calibration:
    """The 2 x 2 table of `judged` ({key: judge says genuine}) against the gold labels, and what follows from it."""
    pairs = [(gold.labels[key], says) for key, says in judged.items() if key in gold.labels]
    tp = sum(g and j for g, j in pairs)
    fn = sum(g and not j for g, j in pairs)
    fp = sum(j and not g for g, j in pairs)
    tn = sum(not g and not j for g, j in pairs)
    n = len(pairs)

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    def interval(part: int, whole: int) -> list[float] | None:
        found = wilson_interval(part, whole)
        return list(found) if found else None

    kappa = cohen_kappa([YES if g else NO for g, _ in pairs], [YES if j else NO for _, j in pairs]) if pairs else None
    return Calibration(panel=list(panel), n_gold=n, true_positives=tp, false_negatives=fn, false_positives=fp,
                       true_negatives=tn, base_rate=share(tp + fn, n), sensitivity=share(tp, tp + fn),
                       specificity=share(tn, tn + fp), sensitivity_ci=interval(tp, tp + fn),
                       specificity_ci=interval(tn, tn + fp), kappa=kappa, labellers=gold.labellers,
                       labeller_kappa=gold.labeller_kappa, labeller_items=gold.labeller_items,
                       disputed=gold.disputed)


class Calibrations(BaseModel):
    """Every panel's calibration from the `--gold` files, and the gold keys that matched no labelled record."""

    panels: dict[Panel, Calibration]
    gold_keys: int = Field(description="keys with a gold label (ties left out)")
    labellers: list[str]
    disputed: int = Field(description="keys left out: their labellers tied")
    unmatched: int = Field(description="gold keys with no record in the results")
    unlabelled: int = Field(description="gold keys whose records carry no label (unjudged, judge or generation "
                                        "failure)")

    def of(self, panel: Sequence[str]) -> Calibration | None:
        return self.panels.get(tuple(panel))


def calibrate(results: Sequence[str | Path], gold_paths: Sequence[str | Path]) -> Calibrations:
    """Match the gold files to the results files' judged records and calibrate every panel found among them."""
    gold = read_gold_set(gold_paths)
    judged, found = judge_labels(results, set(gold.labels))
    labelled = {key for keys in judged.values() for key in keys}
    return Calibrations(panels={panel: calibration(panel, keys, gold) for panel, keys in judged.items()},
                        gold_keys=len(gold.labels), labellers=gold.labellers, disputed=gold.disputed,
                        unmatched=len(set(gold.labels) - found),
                        unlabelled=len(found - labelled))
