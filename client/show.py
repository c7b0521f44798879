"""Generated user turns as a table, each beside the human's real next turn where the dataset has one (MT-Bench).

`userturn show RESULTS.jsonl` prints them; `userturn run` prints the first few under its report.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from userturn.client.export import human_turn

from userturn.records import ProbeRecord

CLIP = 160


def clip(text: str | None, limit: int = CLIP) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_user_query(record: ProbeRecord) -> str:
    return next((m.content for m in reversed(record.messages) if m.role == "user"), "")


def turns_table(records: Iterable[ProbeRecord], *, limit: int | None = None, title: str = "generated user turns",
                width: int = CLIP) -> Table:
    """One row per ok record (in file order): item, T, perturbation, query, generated turn, human turn, label."""
    rows = [r for r in records if r.status == "ok"]
    shown = rows[:limit] if limit is not None else rows
    with_human = any(human_turn(r) for r in shown)
    more = f" (first {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
    table = Table(title=title + more, title_justify="left", header_style="bold", show_lines=True)
    for name in ("item", "T", "perturb", "user query", "generated user turn", *(("human next turn",) if with_human
                                                                               else ()), "label"):
        table.add_column(name, overflow="fold")
    for r in shown:
        human = (clip(human_turn(r), width),) if with_human else ()
        label = f"{r.label} ({r.label_source})" if r.label else ("judge failed" if r.judge_status == "error"
                                                                 else "unjudged")
        table.add_row(r.item_id, f"{r.temperature:g}", r.perturbation, clip(last_user_query(r), width // 2),
                      clip(r.user_turn, width), *human, label)
    return table
