"""The HTML report: one self-contained file, every generated text HTML-escaped. Sections: the rows, judge agreement,
the figures (inline SVG), examples per label drawn across items, a sample of records with the exact prompt on
demand, judge failures, and provenance (versions, platform, results file, configurations, judge prompt hashes).
"""

from __future__ import annotations

import array
import base64
import contextlib
import datetime as dt
import hashlib
import importlib.metadata
import platform
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import orjson
from markupsafe import Markup

from userturn.client.render.prompt_replay import ReplayedPrompt
from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_reader import parse_record
from userturn.core.taxonomy import DESCRIPTIONS, LABELS, SHORT
from userturn.judges.agreement import PanelAgreement
from userturn.judges.prelabel import query_and_response
from userturn.report.calibration import Calibrations
from userturn.report.calibration_view import calibration_html
from userturn.report.controls import controls_lines
from userturn.report.export import human_turn
from userturn.report.rate_grid import rate_grid
from userturn.report.scan import Scan, checked_lines
from userturn.report.summary import GroupSummary, is_self_judged
from userturn.report.table import corrected_cell, fmt_ci, fmt_delta, fmt_kappa, fmt_rate, fmt_temp

SAMPLES_PER_LABEL = 5
SAMPLE_TABLE = 50
FAILURES = 20
CLIP = 600

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>userturn report: {{ source }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222;overflow-wrap:break-word}
.scroll{overflow:auto;max-width:100%;margin:1em 0} .scroll>table{margin:0} .tall{max-height:80vh}
.tall thead th{position:sticky;top:0;z-index:1} .rows td{white-space:nowrap}
.rows td:first-child{position:sticky;left:0;background:#fff} .rows th:first-child{left:0;z-index:2}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right} .self{color:#b00;font-weight:bold}
.rates td.num{white-space:nowrap} .rates tr.first td{border-top:2px solid #888}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;font-size:12px;max-width:420px}
pre.prompt{max-width:900px;background:#f8f8f8;padding:4px} img,svg{max-width:100%;height:auto}
figure{margin:1em 0;min-width:0;max-width:100%} figcaption{font-weight:bold} nav a{margin-right:.8em}
.figs{display:flex;flex-wrap:wrap;align-items:flex-start;column-gap:2.5em}
.note{color:#555;font-size:13px} .warn{background:#fff4d6;border-left:4px solid #e0a800;padding:6px 10px}
</style></head><body>
<h1>userturn report</h1>
<p class="note">{{ source }} · {{ total }} records · generated {{ generated }}{% if filters %} · rows shown:
{{ filters }}{% endif %}</p>
{% if notice %}<p class="warn">{{ notice }}</p>{% endif %}{% for line in controls %}<p class="note">{{ line }}</p>
{% endfor %}
{% if quote_reasks %}<p class="note">judge re-asks: {{ quote_reasks }} replies held only a verdict quoted from the
generated turn, or two different verdicts, and were asked again (quoted text never votes).</p>{% endif %}
<nav class="note">On this page: <a href="#figures">figures</a><a href="#rates">follow-up rate by model and
temperature</a><a href="#rows">all {{ groups|length }} rows</a>{% if calibration %}<a href="#calibration">judge
calibration</a>{% endif %}{% if agreements %}<a href="#agreement">judge
agreement</a>{% endif %}<a href="#examples">examples per label</a><a href="#records">records</a>{% if failures %}
<a href="#failures">judge failures</a>{% endif %}<a href="#provenance">provenance</a></nav>
<h2 id="figures">Figures</h2>
{% if figures %}<div class="figs">
{% for f in figures %}<figure id="fig-{{ f.name }}"><figcaption>{{ f.title }}</figcaption>
{% if f.svg %}{{ f.svg }}{% else %}<img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png }}">{% endif %}
</figure>{% endfor %}</div>{% elif no_figures %}<p class="warn">No figures: {{ no_figures }}.</p>{% endif %}
{% if skipped %}<p class="note">Not drawn, nothing to show:</p><ul class="note">{% for title, why in skipped %}
<li>{{ title }}: {{ why }}</li>{% endfor %}</ul>{% endif %}
<h2 id="rates">Follow-up rate by model and temperature</h2>
{% if grid.why_empty %}<p class="note">No follow-up rate to show: {{ grid.why_empty }}.</p>{% else %}
<p class="note">Genuine follow-up rate (item-clustered 95% CI){% if not grid.perturbations %} of the unperturbed
rows{% endif %}; accuracy = task accuracy of the probed assistant turns. Every row, perturbations included:
<a href="#rows">all rows</a>.</p>
<div class="scroll"><table class="rates"><thead><tr><th>model</th>{% if grid.datasets %}<th>dataset</th>{% endif %}
{% if grid.variants %}<th>mode · settings</th>{% endif %}{% if grid.perturbations %}<th>perturbation</th>{% endif %}
{% for t in grid.labels %}<th>T={{ t }}</th>{% endfor %}<th>accuracy</th></tr></thead>
{% for line in grid.lines %}<tr{% if not loop.first and line.dataset != loop.previtem.dataset %} class="first"
{%- endif %}><td>{{ line.model }}</td>{% if grid.datasets %}<td>{{ line.dataset }}</td>
{% endif %}{% if grid.variants %}<td>{{ line.variant }}</td>{% endif %}{% if grid.perturbations %}
<td>{{ line.perturbation }}</td>{% endif %}{% for c in line.cells %}<td class="num" title="{{ c.title }}">{{ c.text }}
</td>{% endfor %}<td class="num">{{ line.accuracy }}</td></tr>
{% endfor %}</table></div>{% endif %}
<h2 id="rows">Follow-up rate by group: all {{ groups|length }} rows</h2>
<p class="note">rate = genuine_followup / n (labelled records); items = distinct items behind n; 95% CI = Wilson
score interval at the item-clustered effective sample size (the samples of one item are not independent).
Δ vs none = this row's rate minus the none row's over the items labelled under both, in percentage points, with a
paired item-level 95% interval (Newcombe's method 10). Judge failures, generation errors and unjudged records are
outside n. Raw and chat mode, different generation configurations and different judge panels are separate rows.</p>
<div class="scroll tall">
<table class="rows"><thead><tr><th>model</th><th>dataset</th><th>mode</th><th>perturbation</th><th>temp</th>
{% if any_settings %}<th>settings</th>{% endif %}<th>n</th><th>items</th>
<th>follow-ups</th><th>rate</th><th>95% CI</th>{% if calibrated %}<th>corrected (95% CI)</th>{% endif %}
<th>Δ vs none (95% CI)</th>
<th>judge failures</th><th>generation errors</th><th>unjudged</th>
<th>accuracy</th>{% for l in labels %}<th title="{{ l }}">{{ short[l] }}</th>{% endfor %}<th>judged by</th></tr></thead>
{% for g in groups %}<tr><td>{{ g.model }}</td><td>{{ g.dataset }}</td><td>{{ g.mode }}</td>
<td>{{ g.perturbation }}</td><td class="num">{{ temp(g.temperature) }}</td>
{% if any_settings %}<td>{{ g.settings }}</td>{% endif %}<td class="num">{{ g.n }}</td>
<td class="num">{{ g.items }}</td>
<td class="num">{{ g.followups }}</td><td class="num">{{ rate(g.followup_rate) }}</td><td class="num">{{ ci(g) }}</td>
{% if calibrated %}<td class="num" title="{{ g.corrected_note or '' }}">{{ corrected(g, " ") }}</td>{% endif %}
<td class="num" title="{{ g.delta_note or '' }}">{{ delta(g) }}</td>
<td class="num">{{ g.judge_failures }}</td>
<td class="num">{{ g.generation_errors }}</td><td class="num">{{ g.unjudged }}</td>
<td class="num">{{ "—" if g.accuracy is none else rate(g.accuracy) ~ " (n=" ~ g.accuracy_n ~ ")" }}</td>
{% for l in labels %}<td class="num">{{ g.labels[l] }}</td>{% endfor %}
<td>{{ g.judges|join(", ") or ("rules" if g.rule_labels else "—") }}{% if g.self_judged %}
<span class="self" title="judged by the probed model itself">self-judged {{ g.self_judged }}/{{ g.n }}</span>
{% endif %}</td></tr>
{% endfor %}</table></div>
{% if any_self %}<p class="self">self-judged: some labels come from the same model that was probed; use an
independent judge for reported numbers.</p>{% endif %}
<div class="scroll"><table><tr><th>code</th><th>label</th><th>meaning</th></tr>
{% for l in labels %}<tr><td>{{ short[l] }}</td><td>{{ l }}</td><td>{{ descriptions[l] }}</td></tr>{% endfor %}
</table></div>
{{ calibration }}{% if agreements %}<h2 id="agreement">Judge agreement</h2>
<div class="scroll"><table><tr><th>judges</th><th>items</th><th>agreement</th><th>kappa</th></tr>
{% for agreement in agreements %}
<tr><td>{{ agreement.judges|join(", ") }}</td><td class="num">{{ agreement.items }}</td>
<td class="num">{{ rate(agreement.percent_agreement) }}</td>
<td class="num">{{ kappa(agreement.kappa) }} ({{ agreement.kappa_kind }})</td></tr>
{% if agreement.pairs|length > 1 %}{% for p in agreement.pairs %}<tr><td>{{ p.judges|join(" vs ") }}</td>
<td class="num">{{ p.items }}</td><td class="num">{{ rate(p.percent_agreement) }}</td>
<td class="num">{{ kappa(p.cohen_kappa) }} (cohen)</td></tr>{% endfor %}{% endif %}{% endfor %}</table></div>{% endif %}
<h2 id="examples">Sample generated user turns per label</h2>
<p class="note">Per label, records from distinct items (a fixed pseudo-random choice of items, the same on every
run), so one item cannot fill a label's examples.</p>
{% for label, shown in samples.items() %}<h3>{{ label }}: {{ shown.caption }}</h3>
<div class="scroll"><table><tr><th>record</th><th>query</th><th>assistant response</th><th>generated user turn</th>
{% if any_human %}<th title="the human-written next turn the dataset carries (meta.second_turn)">human next turn
</th>{% endif %}<th>label by</th><th>rationale</th></tr>
{% for s in shown.rows %}<tr><td>{{ s.key }}</td><td><pre>{{ s.query }}</pre></td><td><pre>{{ s.response }}</pre></td>
<td><pre>{{ s.turn }}</pre></td>{% if any_human %}<td><pre>{{ s.human }}</pre></td>{% endif %}
<td>{{ s.by }}{% if s.self %} <span class="self">self</span>{% endif %}</td>
<td>{{ s.rationale }}</td></tr>{% endfor %}</table></div>
{% endfor %}
<h2 id="records">Records: {{ table_caption }}</h2>
<p class="note">A fixed pseudo-random sample of the ok records. Open a row's prompt to see it exactly as sent
{% if not prompts_rendered %}(chat mode; raw-mode prompts need the probe's tokenizer: <code>userturn report FILE
--html OUT --tokenizer DIR_OR_HUB_ID</code>){% endif %}; <code>userturn show FILE KEY</code> prints one record
whole.</p>
<div class="scroll">
<table><tr><th>record</th><th>item</th><th>T</th><th>perturbation</th><th>label</th><th>generated user turn</th>
<th>prompt</th></tr>
{% for r in table %}<tr><td>{{ r.key }}</td><td>{{ r.item }}</td><td class="num">{{ r.temp }}</td>
<td>{{ r.perturbation }}</td><td>{{ r.label }}</td><td><pre>{{ r.turn }}</pre></td>
<td>{% if r.prompt is not none %}<details><summary>prompt ({{ r.note }})</summary>
<pre class="prompt">{{ r.prompt }}</pre></details>
{% else %}<details><summary>conversation{% if r.note %} (prompt not rebuilt: {{ r.note }}){% endif %}
</summary><pre class="prompt">{{ r.messages }}</pre></details>{% endif %}</td></tr>
{% endfor %}</table></div>
{% if failures %}<h2 id="failures">Judge failures (raw judge output kept): {{ failures_caption }}</h2>
<div class="scroll"><table><tr><th>record</th><th>judge</th><th>error</th><th>raw</th></tr>
{% for f in failures %}<tr><td>{{ f.key }}</td><td>{{ f.judge }}</td><td>{{ f.error }}</td>
<td><pre>{{ f.raw }}</pre></td></tr>
{% endfor %}</table></div>{% endif %}
<h2 id="provenance">Provenance</h2>
<div class="scroll"><table><tr><th>generated</th><td>{{ generated }}</td></tr>
<tr><th>results file</th><td>{{ source }}{% if prov.file %} ({{ prov.file }}){% endif %}</td></tr>
<tr><th>versions</th><td>{% for name, v in prov.versions.items() %}{{ name }} {{ v }}{% if not loop.last %}, {% endif %}
{% endfor %}</td></tr>
<tr><th>python</th><td>{{ prov.python }} on {{ prov.platform }}</td></tr>
<tr><th>judge panels</th><td>{{ prov.panels|join(", ") or "none (rule labels only)" }}</td></tr>
<tr><th>judge prompts (sha256)</th><td>{% for judge, shas in prov.judge_prompts.items() %}{{ judge }}:
{{ shas|join(", ") }}<br>{% else %}none{% endfor %}</td></tr>
{% if prov.unfingerprinted %}<tr><th>unfingerprinted</th><td>{{ prov.unfingerprinted }} records from before
configuration fingerprints</td></tr>{% endif %}</table></div>
<h3>Configurations ({{ prov.configs|length }})</h3>
<div class="scroll"><table><tr><th>fingerprint</th><th>rows</th><th>records</th><th>settings</th></tr>
{% for c in prov.configs %}<tr><td><code>{{ c.fingerprint }}</code></td><td class="num">{{ c.rows }}</td>
<td class="num">{{ c.records }}</td><td><details><summary>{{ c.name }}</summary><pre>{{ c.json }}</pre></details></td>
</tr>{% endfor %}</table></div>
</body></html>
"""


def _clip(text: str | None, limit: int = CLIP) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


def _rank(text: str) -> bytes:
    """A pseudo-random order, the same on every run and machine, so examples spread over items."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


class _AcrossItems:
    """Up to `size` records from distinct items (the items first in `_rank` order; within an item the record whose
    key ranks first), in bounded memory; counts every record (and, with `count_items`, item) offered."""

    def __init__(self, size: int, count_items: bool = True) -> None:
        self.size, self.count_items = size, count_items
        self.chosen: dict[bytes, tuple[bytes, str, bytes]] = {}  # item rank -> (key rank, file:line, raw line)
        self.worst = b""  # the last chosen item in rank order, once `size` are chosen
        self.records = 0
        self._item_ranks = array.array("q")  # 8 bytes per record offered: a million records cost 8 MB, not a set

    @property
    def items(self) -> int:
        """Distinct items offered (by their 64-bit rank; a collision among fewer than 10^8 items is negligible)."""
        return len(np.unique(np.frombuffer(self._item_ranks, dtype=np.int64))) if self.records else 0

    def offer(self, item_id: str, key: str, number: str, raw: bytes) -> None:
        self.records += 1
        item, rank = _rank(item_id), _rank(key)
        if self.count_items:
            self._item_ranks.append(int.from_bytes(item, "little", signed=True))
        held = self.chosen.get(item)
        if held is not None:
            if rank < held[0]:
                self.chosen[item] = (rank, number, raw)
        elif len(self.chosen) < self.size or item < self.worst:
            if len(self.chosen) == self.size:
                del self.chosen[self.worst]
            self.chosen[item] = (rank, number, raw)
            if len(self.chosen) == self.size:
                self.worst = max(self.chosen)

    def parsed(self) -> list[ProbeRecord]:
        return [parse_record(raw, *where.rpartition(":")[::2]) for _, (_, where, raw) in sorted(self.chosen.items())]


@dataclass
class Shown:
    """Records shown from a longer list: `of` records in all (from `items` distinct items, where counted)."""

    records: list[ProbeRecord]
    of: int
    items: int | None = None

    @property
    def caption(self) -> str:
        items = f" from {len({r.item_id for r in self.records})} of {self.items} items" if self.items else ""
        return f"{len(self.records)} of {self.of}{items}"


@dataclass
class Examples:
    """What the HTML report shows of the records: examples per label drawn across items, a sample of ok records,
    judge failures, and the judge prompts' full sha256 per judge."""

    by_label: dict[str, Shown]
    table: Shown
    failures: Shown
    judge_prompts: dict[str, list[str]]


def _select(lines: Iterable[tuple[dict, str, bytes]]) -> Examples:
    """The examples among (record dict, file:line, raw line) tuples, in bounded memory: per label up to
    SAMPLES_PER_LABEL records from distinct items, SAMPLE_TABLE ok records, FAILURES judge-failed records."""
    by_label = {label: _AcrossItems(SAMPLES_PER_LABEL) for label in LABELS}
    sample, failed = _AcrossItems(SAMPLE_TABLE, count_items=False), _AcrossItems(FAILURES, count_items=False)
    prompts: dict[str, set[str]] = defaultdict(set)
    for d, where, raw in lines:
        key = d["key"]
        if d.get("label") is not None:
            by_label[d["label"]].offer(str(d.get("item_id")), key, where, raw)
        if d.get("status") == "ok":
            sample.offer(key, key, where, raw)
        if d.get("judge_status") == "error":
            failed.offer(key, key, where, raw)
        for verdict in d.get("judges") or ():
            if verdict.get("prompt_sha256"):
                prompts[verdict["judge"]].add(verdict["prompt_sha256"])
    return Examples(by_label={label: Shown(s.parsed(), s.records, s.items)
                              for label, s in by_label.items() if s.records},
                    table=Shown(sample.parsed(), sample.records), failures=Shown(failed.parsed(), failed.records),
                    judge_prompts={judge: sorted(shas) for judge, shas in sorted(prompts.items())})


def select_examples(paths: str | Path | Sequence[str | Path], keep: np.ndarray) -> Examples:
    """The examples (`_select`, deterministic choices) from a second streaming pass over the lines that count
    (`keep`, from the first pass)."""
    lines = ((d, f"{path}:{number}", raw)
             for index, (path, number, d, raw, _) in enumerate(checked_lines(paths, Scan())) if keep[index])
    return _select(lines)


def examples_of(records: list[ProbeRecord]) -> Examples:
    """`select_examples` for records already loaded."""
    lines = ((r.model_dump(mode="json"), f"<records>:{number}", r.model_dump_json().encode())
             for number, r in enumerate(records, start=1))
    return _select(lines)


def _samples(examples: Examples) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, shown in examples.by_label.items():
        rows = []
        for r in shown.records:
            query, response = query_and_response(r)
            voters = [v for v in r.judges if v.label == r.label and v.status == "ok"]
            by = ", ".join(v.judge for v in voters) or (r.label_source or "")
            rows.append({"key": r.key, "query": _clip(query), "response": _clip(response),
                         "turn": _clip(r.user_turn), "human": _clip(human_turn(r)), "by": by,
                         "self": is_self_judged(r), "rationale": _clip(voters[0].rationale if voters else "", 300)})
        out[label] = {"caption": shown.caption, "rows": rows}
    return out


def _failures(shown: Shown) -> list[dict]:
    return [{"key": r.key, "judge": v.judge, "error": v.error, "raw": _clip(v.raw, 400)}
            for r in shown.records for v in r.judges if v.status == "error"]


PromptOf = Callable[[ProbeRecord], ReplayedPrompt]


def _table_rows(shown: Shown, prompt_of: PromptOf | None) -> list[dict]:
    rows = []
    for r in shown.records:
        prompt, note = None, ""
        if prompt_of is not None:
            try:
                replayed = prompt_of(r)
            except UserError as exc:
                note = str(exc)
            else:
                prompt = replayed.text if replayed.mode == "raw" else _json(replayed.messages)
                note = ("sha256 matches the record's prompt_sha256" if replayed.verified else
                        "NOT VERIFIED: sha256 differs from the record's prompt_sha256" if replayed.recorded_sha256
                        else "not verified: the record has no prompt_sha256")
        label = r.label or ("judge failed" if r.judge_status == "error" else "unjudged")
        rows.append({"key": r.key, "item": r.item_id, "perturbation": r.perturbation, "temp": fmt_temp(r.temperature),
                     "label": label, "turn": _clip(r.user_turn, 300), "prompt": prompt, "note": note,
                     "messages": _json([m.model_dump() for m in r.messages])})
    return rows


DEPENDENCIES = ("numpy", "pydantic", "jinja2", "matplotlib", "orjson", "aiohttp", "httpx", "openai", "transformers",
                "torch", "tokenizers", "openai-harmony", "gguf")


def provenance(source: str, groups: list[GroupSummary], examples: Examples) -> dict[str, Any]:
    """Versions, platform, the results file, configuration fingerprints and judge prompt hashes of a report."""
    versions = {}
    for name in ("userturn", *DEPENDENCIES):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    configs: dict[str, dict[str, Any]] = {}
    for g in groups:
        if g.config_fingerprint is None:
            continue
        entry = configs.setdefault(g.config_fingerprint, {"rows": 0, "records": 0, "config": g.config,
                                                           "name": f"{g.model} · {g.dataset} · {g.mode} · "
                                                                   f"{g.perturbation}"})
        entry["rows"] += 1
        entry["records"] += g.records
    file_info = ""
    with contextlib.suppress(OSError):
        stat = Path(source).stat()
        file_info = (f"{stat.st_size:,} bytes, modified "
                     f"{dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}")
    return {"versions": versions, "python": platform.python_version(), "platform": platform.platform(terse=True),
            "file": file_info, "unfingerprinted": sum(g.records for g in groups if g.config_fingerprint is None),
            "configs": [{"fingerprint": fp, **v, "json": _json(v["config"], orjson.OPT_SORT_KEYS)}
                        for fp, v in sorted(configs.items())],
            "panels": sorted({p for g in groups for p in g.judge_panel}),
            "judge_prompts": examples.judge_prompts}


def _json(value: Any, option: int = 0) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | option).decode()


def _inline_svg(svg: bytes) -> str:
    """An SVG file's <svg> element, for inlining (matplotlib's output: no scripts; the XML prolog dropped)."""
    text = svg.decode("utf-8")
    return text[text.index("<svg"):]


def render_html(groups: list[GroupSummary], agreements: list[PanelAgreement], examples: Examples, total: int,
                figures: dict[str, dict[str, bytes]] | None, source: str, no_figures: str = "", *,
                prompt_of: PromptOf | None = None, skipped: dict[str, str] | None = None, filters: str = "",
                notice: str | None = None, quote_reasks: int = 0, calibrations: Calibrations | None = None) -> str:
    """The report as one HTML string (autoescaped). `figures`: {name: {format: bytes}} (SVG inlined, else PNG as a
    data URI); `no_figures`: why there are none; `skipped`: {figure: why it has nothing to show}; `prompt_of`
    rebuilds a record's prompt for the sample table; `filters`: the row filters, as flags; `notice`: the label
    notice above the table (default: `report.label_notice` for `source`); `quote_reasks`: judge replies asked again
    because they held only a quoted verdict or two verdicts; `calibrations`: the panels against gold labels."""
    from userturn.report.label_notice import label_notice
    from userturn.report.plots import TITLES

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    shown_figures = [{"name": name, "title": TITLES.get(name, name),
                      "svg": Markup(_inline_svg(f["svg"])) if "svg" in f else None,
                      "png": base64.b64encode(f["png"]).decode("ascii") if "png" in f and "svg" not in f else None}
                     for name, f in (figures or {}).items()]
    return env.from_string(TEMPLATE).render(
        source=source, total=total, generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        groups=groups, grid=rate_grid(groups), labels=LABELS, short=SHORT, descriptions=DESCRIPTIONS,
        any_self=any(g.self_judged for g in groups), agreements=agreements,
        any_settings=any(g.settings for g in groups), figures=shown_figures,
        no_figures=no_figures or ("none was asked for" if figures is None else ""),
        skipped=[(TITLES.get(name, name), why) for name, why in (skipped or {}).items()],
        notice=notice or getattr(label_notice(groups, source), "text", None), quote_reasks=quote_reasks,
        filters=filters, samples=_samples(examples),
        failures=_failures(examples.failures),
        failures_caption=examples.failures.caption, table=_table_rows(examples.table, prompt_of),
        table_caption=examples.table.caption, prompts_rendered=prompt_of is not None,
        prov=provenance(source, groups, examples),
        any_human=any(human_turn(r) for shown in examples.by_label.values() for r in shown.records),
        calibrated=any(g.calibration is not None for g in groups), calibration=calibration_html(groups, calibrations),
        corrected=corrected_cell, controls=controls_lines(groups),
        rate=fmt_rate, ci=fmt_ci, delta=fmt_delta, temp=fmt_temp, kappa=fmt_kappa,
    )


def write_html(html: str, path: str | Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    return path
