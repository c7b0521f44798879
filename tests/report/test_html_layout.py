"""The HTML report's layout on a paper-sized grid (12 models x 4 temperatures x 3 perturbations = 144 rows): the
figures first, then the compact model x temperature table, then the full table; every table in its own horizontal
scroll box, so the page itself never scrolls sideways. Checked on the document structure (no browser)."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import ClassVar

import pytest
from report_grid import PAPER_MODELS, TEMPERATURES, grid_records

from userturn.core.records import ProbeRecord, record_key
from userturn.report.filters import RowFilter, select_groups
from userturn.report.html import examples_of, render_html
from userturn.report.plots import render_figures
from userturn.report.rate_grid import NO_JUDGED_RATE, rate_grid
from userturn.report.summary import summarise


class Outline(HTMLParser):
    """The page as events: section ids (h2) and figures in document order, and per table its class, the classes of
    its enclosing elements and its body rows."""

    VOID: ClassVar[set[str]] = {"meta", "br", "img", "input", "hr", "link", "path", "use", "rect", "line",
                                "circle", "polyline"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.order: list[str] = []
        self.tables: list[dict] = []
        self.open_tables: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "h2":
            self.order.append(f"h2:{a.get('id')}")
        elif tag == "figure":
            self.order.append(f"figure:{a.get('id')}")
        elif tag == "table":
            table = {"class": a.get("class") or "", "parents": [c for _, c in self.stack], "rows": 0, "header": []}
            self.tables.append(table)
            self.open_tables.append(table)
            self.order.append(f"table:{table['class']}")
        elif tag == "tr" and self.open_tables:
            self.open_tables[-1]["rows"] += 1
        if tag not in self.VOID and not tag.startswith("svg:"):
            self.stack.append((tag, a.get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.open_tables:
            self.open_tables.pop()
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def outline(page: str) -> Outline:
    parsed = Outline()
    parsed.feed(page)
    return parsed


@pytest.fixture(scope="module")
def grid() -> list[ProbeRecord]:
    return grid_records()


def test_a_144_row_grid_starts_with_its_figures_then_the_compact_table_then_every_row(grid: list[ProbeRecord]):
    groups = select_groups(summarise(grid), RowFilter())
    assert len(groups) == 144
    figures = render_figures(groups, formats=("svg",))
    page = outline(render_html(groups, [], examples_of(grid), len(grid), figures, "grid.jsonl"))
    sections = [e for e in page.order if e.startswith("h2:")]
    assert sections[:3] == ["h2:figures", "h2:rates", "h2:rows"]
    assert sections[-2:] == ["h2:records", "h2:provenance"]
    first_table = next(i for i, e in enumerate(page.order) if e.startswith("table:"))
    drawn = [i for i, e in enumerate(page.order) if e.startswith("figure:")]
    assert len(drawn) == 4 and drawn[-1] < first_table  # no table row above any figure
    rates, rows = page.tables[0], page.tables[1]
    assert rates["class"] == "rates" and rows["class"] == "rows"
    assert rates["rows"] == 1 + len(PAPER_MODELS)  # a header and one line per model
    assert rows["rows"] == 1 + 144
    # every table scrolls sideways in its own box; the full table also vertically, under a sticky header
    assert all(any("scroll" in c.split() for c in t["parents"]) for t in page.tables), [t["class"] for t in
                                                                                       page.tables]
    assert "tall" in rows["parents"][-1].split()


def test_the_compact_table_is_the_unperturbed_rate_with_its_interval_per_model_and_temperature(grid):
    groups = select_groups(summarise(grid), RowFilter())
    table = rate_grid(groups)
    assert table.labels == ["0", "0.6", "1", "1.2"] and len(table.temperatures) == len(TEMPERATURES)
    assert [line.model for line in table.lines] == [m for m in dict.fromkeys(g.model for g in groups)]
    assert not (table.datasets or table.variants or table.perturbations)  # nothing to tell lines apart but the model
    row = next(g for g in groups if g.model == PAPER_MODELS[3] and g.perturbation == "none" and g.temperature == 1.0)
    cell = table.lines[[line.model for line in table.lines].index(PAPER_MODELS[3])].cells[2]
    assert cell.text == f"{100 * row.followup_rate:.1f}% ({100 * row.ci_low:.1f}–{100 * row.ci_high:.1f})"
    assert cell.title == f"{row.followups} of {row.n} labelled turns from 10 items"


def test_the_compact_table_groups_lines_by_dataset_and_names_what_sets_them_apart():
    records = grid_records(models=PAPER_MODELS[:2], datasets=("mt-bench", "gsm8k"), temperatures=(0.0, 1.0),
                           perturbations=("wrong_answer",), items=3, samples=1)
    table = rate_grid(select_groups(summarise(records), RowFilter()))
    assert [(line.dataset, line.model) for line in table.lines] == [
        ("gsm8k", PAPER_MODELS[0]), ("gsm8k", PAPER_MODELS[1]), ("mt-bench", PAPER_MODELS[0]),
        ("mt-bench", PAPER_MODELS[1])]
    assert table.datasets and table.perturbations  # no unperturbed row: the perturbed ones, named as such
    page = render_html(summarise(records), [], examples_of(records), len(records), None, "r.jsonl")
    assert "<th>perturbation</th>" in page.split('id="rates"', 1)[1].split('id="rows"', 1)[0]
    assert page.count('<tr class="first">') == 1  # a rule between the datasets


def test_a_rules_only_file_has_no_compact_rate_table_and_says_why():
    rules = [ProbeRecord(key=record_key("m", "d", str(i), "none", 0.0, 0), model="m", dataset="d", item_id=str(i),
                         temperature=0.0, sample=0, seed=0, status="ok", user_turn="x", label="restates_query",
                         label_source="rule", judge_status="ok",
                         judges=[{"judge": "rules", "source": "rule", "status": "ok", "label": "restates_query"}])
             for i in range(3)]
    groups = summarise(rules)
    assert rate_grid(groups).why_empty == NO_JUDGED_RATE
    page = render_html(groups, [], examples_of(rules), len(rules), None, "r.jsonl")
    assert f"No follow-up rate to show: {NO_JUDGED_RATE}." in page and 'class="rates"' not in page
