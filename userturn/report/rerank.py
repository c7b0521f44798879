"""Does the follow-up rate a response elicits rank responses the way task correctness does?

The records of one query (`meta.query_id`, else the item id) with different assistant turns (`meta.assistant_sample`,
else the text) are candidate responses, each with its genuine follow-up rate and its correctness. Per (model,
dataset, mode, perturbation, temperature): `auroc` P(rate of a correct response > an incorrect one's), ties 1/2;
`within_auroc` the same over pairs of one query; `top1` the chance that a query's highest-rate response (ties split)
is correct, next to `top1_random`, a uniformly random pick's (both over queries with both kinds).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from userturn.core.records import GroupKey, ProbeRecord, group_key, sha256_text
from userturn.core.taxonomy import is_followup

if TYPE_CHECKING:
    from rich.table import Table



@dataclass
class Response:
    """One candidate response to a query, with what its probes found."""

    response_id: str
    correct: bool
    labeled: int = 0
    genuine: int = 0

    @property
    def rate(self) -> float:
        return self.genuine / self.labeled if self.labeled else 0.0


@dataclass
class RerankRow:
    model: str
    dataset: str
    mode: str
    perturbation: str
    temperature: float
    queries: int
    responses: int
    correct_responses: int
    mixed_queries: int
    auroc: float | None
    within_auroc: float | None
    top1: float | None
    top1_random: float | None


def response_id(record: ProbeRecord) -> str:
    meta = record.meta or {}
    if meta.get("assistant_sample") is not None:
        return str(meta["assistant_sample"])
    assistant = next((m.content for m in reversed(record.messages) if m.role == "assistant"), "")
    return "text:" + sha256_text(str(meta.get("assistant_turn", assistant)))[:12]


def _wins(positives: list[float], negatives: list[float]) -> float:
    """(positive, negative) pairs where the positive is higher, ties counting 1/2."""
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in positives for n in negatives)


def auroc(positives: list[float], negatives: list[float]) -> float | None:
    """Mann-Whitney AUROC (ties count 1/2); None without both classes."""
    if not positives or not negatives:
        return None
    return _wins(positives, negatives) / (len(positives) * len(negatives))


def collect(records: Iterable[ProbeRecord]) -> dict[GroupKey, dict[str, dict[str, Response]]]:
    """{GroupKey (model, dataset, mode, perturbation, temperature): {query_id: {response_id: Response}}}."""
    out: dict[GroupKey, dict[str, dict[str, Response]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if r.status != "ok" or r.label is None or r.correct is None:
            continue
        query = str((r.meta or {}).get("query_id", r.item_id))
        group = out[group_key(r)][query]
        rid = response_id(r)
        response = group.setdefault(rid, Response(rid, r.correct))
        response.labeled += 1
        response.genuine += is_followup(r.label)
    return out


def rerank(records: Iterable[ProbeRecord]) -> list[RerankRow]:
    rows = []
    for key, queries in sorted(collect(records).items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        pos: list[float] = []
        neg: list[float] = []
        within_wins = within_pairs = 0.0
        top1 = top1_random = 0.0
        mixed = 0
        responses = [resp for q in queries.values() for resp in q.values()]
        for query in queries.values():
            good = [r.rate for r in query.values() if r.correct]
            bad = [r.rate for r in query.values() if not r.correct]
            pos += good
            neg += bad
            if good and bad:
                mixed += 1
                within_pairs += len(good) * len(bad)
                within_wins += _wins(good, bad)
                best = max(r.rate for r in query.values())
                tied = [r for r in query.values() if r.rate == best]
                top1 += sum(r.correct for r in tied) / len(tied)
                top1_random += len(good) / len(query)
        model, dataset, mode, perturbation, temperature = key
        rows.append(RerankRow(
            model=model, dataset=dataset, mode=mode, perturbation=perturbation, temperature=temperature,
            queries=len(queries), responses=len(responses), correct_responses=sum(r.correct for r in responses),
            mixed_queries=mixed, auroc=auroc(pos, neg),
            within_auroc=within_wins / within_pairs if within_pairs else None,
            top1=top1 / mixed if mixed else None, top1_random=top1_random / mixed if mixed else None,
        ))
    return rows


def as_dicts(rows: list[RerankRow]) -> list[dict]:
    return [asdict(row) for row in rows]


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def rerank_table(rows: list[RerankRow], title: str) -> Table:
    """The rerank rows as a table that fits 100 columns: names wrap, numbers stay whole."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("model / dataset", overflow="fold", min_width=12)
    table.add_column("perturb", overflow="fold", max_width=12)
    for column in ("T", "queries\n(mixed)", "responses\n(correct)", "AUROC", "within", "top-1\n(random)"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(f"{r.model}\n[dim]{r.dataset} ({r.mode})[/]", r.perturbation, f"{r.temperature:g}",
                      f"{r.queries} ({r.mixed_queries})", f"{r.responses} ({r.correct_responses})", _fmt(r.auroc),
                      _fmt(r.within_auroc), f"{_fmt(r.top1)} ({_fmt(r.top1_random)})", end_section=True)
    return table
