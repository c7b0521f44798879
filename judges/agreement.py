"""Combining several judges: majority label, Cohen's kappa (two raters), Fleiss' kappa (several).

The formulas are a few lines each (Cohen 1960; Fleiss 1971), written out here to keep the core install free of
scipy/statsmodels/sklearn. Tests check them against textbook examples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import combinations

from pydantic import BaseModel
from userturn.client.records import ProbeRecord


def majority_label(votes: Sequence[str]) -> str | None:
    """Most frequent label; a tie goes to the tied label voted first (the earliest judge in panel order)."""
    if not votes:
        return None
    counts = Counter(votes)
    top = max(counts.values())
    return next(v for v in votes if counts[v] == top)


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items; None when undefined (chance agreement is 1)."""
    if len(a) != len(b):
        raise ValueError("both raters must label the same items")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def fleiss_kappa_counts(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items x categories table of rater counts (same number of raters per item)."""
    if not table:
        return None
    raters = sum(table[0])
    if raters < 2 or any(sum(row) != raters for row in table):
        raise ValueError("Fleiss' kappa needs the same number (>= 2) of ratings for every item")
    n_items = len(table)
    p_item = [(sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in table]
    p_bar = sum(p_item) / n_items
    totals = [sum(col) for col in zip(*table, strict=True)]
    p_cat = [t / (n_items * raters) for t in totals]
    p_e = sum(p * p for p in p_cat)
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def fleiss_kappa(items: Sequence[Sequence[str]]) -> float | None:
    """Fleiss' kappa from per-item label lists (each item rated by the same number of raters)."""
    categories = sorted({label for row in items for label in row})
    return fleiss_kappa_counts([[Counter(row)[c] for c in categories] for row in items])


class PairAgreement(BaseModel):
    judges: tuple[str, str]
    items: int
    percent_agreement: float | None
    cohen_kappa: float | None


class PanelAgreement(BaseModel):
    """Agreement among the judges found in a set of records (items where all of them gave an ok label)."""

    judges: list[str]
    items: int
    percent_agreement: float | None
    kappa: float | None
    kappa_kind: str
    pairs: list[PairAgreement]


def judge_labels(record: ProbeRecord) -> dict[str, str]:
    """{judge name: label} of the record's ok LLM-judge verdicts (rules excluded)."""
    return {v.judge: v.label for v in record.judges if v.source == "judge" and v.status == "ok" and v.label}


def _agreement(per_record: list[dict[str, str]], names: list[str]) -> PanelAgreement:
    pairs = []
    for x, y in combinations(names, 2):
        both = [(lab[x], lab[y]) for lab in per_record if x in lab and y in lab]
        pairs.append(PairAgreement(judges=(x, y), items=len(both),
                                   percent_agreement=sum(p == q for p, q in both) / len(both) if both else None,
                                   cohen_kappa=cohen_kappa([p for p, _ in both], [q for _, q in both])))
    complete = [[lab[n] for n in names] for lab in per_record if all(n in lab for n in names)]
    agree = sum(len(set(row)) == 1 for row in complete) / len(complete) if complete else None
    if len(names) == 2:
        kappa, kind = pairs[0].cohen_kappa, "cohen"
    else:
        kappa, kind = (fleiss_kappa(complete) if complete else None), "fleiss"
    return PanelAgreement(judges=names, items=len(complete), percent_agreement=agree, kappa=kappa,
                          kappa_kind=kind, pairs=pairs)


def panel_agreements(records: Iterable[ProbeRecord]) -> list[PanelAgreement]:
    """Agreement of each panel found in the records (a set of >= 2 LLM judges that rated the same records):
    Cohen's kappa for two judges, Fleiss' kappa for more, over the records every judge of the panel labelled."""
    records = list(records)
    per_record = [judge_labels(r) for r in records]
    panels = {tuple(sorted({v.judge for v in r.judges if v.source == "judge"})) for r in records}
    return [_agreement(per_record, list(names)) for names in sorted(panels) if len(names) >= 2]
