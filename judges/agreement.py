"""Combining several judges: majority label, Cohen's kappa (two raters, Cohen 1960), Fleiss' kappa (several,
Fleiss 1971); written out to keep the core install free of scipy/sklearn."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations

from pydantic import BaseModel


def majority_label(votes: Sequence[str]) -> str | None:
    """Most frequent label; a tie goes to the tied label voted first (the earliest judge in panel order)."""
    if not votes:
        return None
    counts = Counter(votes)
    top = max(counts.values())
    return next(v for v in votes if counts[v] == top)


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items (ValueError when their lengths differ); None when undefined
    (chance agreement is 1)."""
    return _weighted_cohen(Counter(zip(a, b, strict=True)))


def fleiss_kappa(items: Sequence[Sequence[str]]) -> float | None:
    """Fleiss' kappa from per-item label lists (each item rated by the same number of raters, at least two)."""
    if items and (len(items[0]) < 2 or any(len(row) != len(items[0]) for row in items)):
        raise ValueError("Fleiss' kappa needs the same number (>= 2) of ratings for every item")
    return _weighted_fleiss(Counter(tuple(row) for row in items))


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


Pattern = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]  # (LLM judges asked, sorted (judge, ok label))


def _weighted_cohen(pairs: Counter) -> float | None:
    n = sum(pairs.values())
    if n == 0:
        return None
    observed = sum(w for (x, y), w in pairs.items() if x == y) / n
    ca: Counter = Counter()
    cb: Counter = Counter()
    for (x, y), w in pairs.items():
        ca[x] += w
        cb[y] += w
    expected = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def _weighted_fleiss(rows: Counter) -> float | None:
    """Fleiss' kappa from {tuple of the raters' labels: number of items with exactly those labels}."""
    n_items = sum(rows.values())
    if n_items == 0:
        return None
    raters = len(next(iter(rows)))
    p_bar = sum(w * (sum(c * c for c in Counter(row).values()) - raters) / (raters * (raters - 1))
                for row, w in rows.items()) / n_items
    totals: Counter = Counter()
    for row, w in rows.items():
        for label in row:
            totals[label] += w
    p_e = sum((t / (n_items * raters)) ** 2 for t in totals.values())
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def _agreement(per_record: Counter, names: list[str]) -> PanelAgreement:
    labelled = [(dict(labels), w) for labels, w in per_record.items()]
    pairs = []
    for x, y in combinations(names, 2):
        both: Counter = Counter()
        for lab, w in labelled:
            if x in lab and y in lab:
                both[(lab[x], lab[y])] += w
        total = sum(both.values())
        pairs.append(PairAgreement(
            judges=(x, y), items=total,
            percent_agreement=sum(w for (p, q), w in both.items() if p == q) / total if total else None,
            cohen_kappa=_weighted_cohen(both)))
    complete: Counter = Counter()
    for lab, w in labelled:
        if all(n in lab for n in names):
            complete[tuple(lab[n] for n in names)] += w
    total = sum(complete.values())
    agree = sum(w for row, w in complete.items() if len(set(row)) == 1) / total if total else None
    if len(names) == 2:
        kappa, kind = pairs[0].cohen_kappa, "cohen"
    else:
        kappa, kind = _weighted_fleiss(complete), "fleiss"
    return PanelAgreement(judges=names, items=total, percent_agreement=agree, kappa=kappa, kappa_kind=kind,
                          pairs=pairs)


def agreements_from_patterns(patterns: Mapping[Pattern, int]) -> list[PanelAgreement]:
    """Agreement of each panel found (a set of >= 2 LLM judges asked about the same records), from counts of
    `Pattern`s: Cohen's kappa for two judges, Fleiss' kappa for more, over the records every judge of the
    panel labelled (whichever panel asked them)."""
    per_record: Counter = Counter()
    for (_, labels), count in patterns.items():
        per_record[labels] += count
    panels = {names for names, _ in patterns}
    return [_agreement(per_record, list(names)) for names in sorted(panels) if len(names) >= 2]
